"""Flags the trainer does not take but a user types: Hugging Face run_mlm.py / TrainingArguments flags with no
equivalent here (``NO_EQUIVALENT``), and the words the build and other trainers use for what is set
elsewhere here (``OTHER_WORDS``: the corpus's sequence length and packing, torchrun's process count, a model
config key as a flag). Each is one line saying what to give instead (exit 2), with or without a value;
spelling alone would point several at a flag that means another thing (``--epochs`` at ``--eps``, the
build's ``--max_seq_len`` at ``--max_steps``, ``--num_gpus`` at the loader's ``--num_workers``).
``trainer.args`` adds them to the trainer's parser; no torch here (the trainer's flags are checked before
torch is imported)."""

from __future__ import annotations

import argparse
from typing import Any

# The texts two run_mlm flags share (each pair means one thing here).
_EVAL_STRATEGY = "evaluation runs every --eval_every (--eval_steps) steps and at the last step; --eval_batches 0: none"
_BEST_MODEL = ("the run keeps its newest --keep_last checkpoints and logs each evaluation's loss to metrics.jsonl: "
               "export the one you want (shardforge export RUN/checkpoints/ckpt-N.pt OUT)")
_HUB = ("shardforge export RUN OUT writes a Hugging Face folder (with its model card); upload it with "
        "huggingface-cli upload: nothing here reaches the network")
_FULL_EVAL = "evaluation runs at the training precision (--precision)"
_LOAD_DTYPE = ("--init loads a model folder's weights into the model, which trains at --precision (auto: bf16 on a "
               "GPU that has it, fp32 on CPU) whatever dtype the folder was saved in")
_TRAIN_FILE = ("the data is a corpus a build wrote (--data CORPUS): `shardforge build --input FILES --output CORPUS` "
               "makes one from text files")

_EPOCHS = ("the length is --steps or --max_tokens (tokens); one epoch is the train split's tokens (shardforge "
           "inspect CORPUS shows them)")
_SEQUENCE = "set by the corpus: build it (or shardforge repack it) with --max_seq_len"

# run_mlm.py / TrainingArguments flags with no equivalent here: each is one line saying what to give instead.
NO_EQUIVALENT: dict[str, str] = {
    "--num_train_epochs": _EPOCHS,
    "--max_seq_length": _SEQUENCE,
    "--overwrite_output_dir": "a rerun into the same --output resumes from its newest checkpoint; to start "
                              "over, give a new --output (or remove its checkpoints/)",
    "--do_train": "training always runs; evaluation is --eval_every N and --eval_batches N (0: none)",
    "--do_eval": "evaluation runs every --eval_every steps and at the last step on --eval_batches valid batches "
                 "(--eval_batches 0: none); a model alone (a checkpoint, a run, a Hugging Face folder) is "
                 "evaluated by shardforge evaluate MODEL --data CORPUS",
    "--per_device_eval_batch_size": "evaluation batches are --batch_size sequences; --eval_batches sets how many",
    "--report_to": "metrics.jsonl and TensorBoard (--set trackers.tensorboard=false: off) are written to --output; "
                   "--set trackers.wandb=true or trackers.mlflow=true adds W&B or MLflow",
    "--logging_dir": "the logs go into --output (metrics.jsonl, TensorBoard in tb/)",
    "--auto_find_batch_size": "the batch size is what you give, on every device: a run that runs out of memory "
                              "stops at once with one line naming the --batch_size to give (a global batch is "
                              "kept by gradient accumulation)",
    "--eval_strategy": _EVAL_STRATEGY,
    "--evaluation_strategy": _EVAL_STRATEGY,
    "--save_strategy": "a checkpoint is saved every --checkpoint_every (--save_steps) steps and at the last step",
    "--logging_strategy": "a progress line every --log_every (--logging_steps) steps; metrics.jsonl has every step",
    "--max_eval_samples": "each evaluation reads --eval_batches batches of the valid split",
    "--max_train_samples": "the length is --steps or --max_tokens (tokens)",
    "--train_file": _TRAIN_FILE,
    "--validation_file": "the valid split is the corpus's (the build's --valid_fraction)",
    "--dataset_name": _TRAIN_FILE + "; nothing is downloaded",
    "--dataset_config_name": "the data is a corpus a build wrote (--data CORPUS); nothing is downloaded",
    "--tokenizer_name": "the tokenizer is the corpus's (its manifest names it): build the corpus with "
                        "--tokenizer PATH to reuse an existing one",
    "--model_type": "the model is RoBERTa's encoder (--model_size, --config_overrides); ALBERT's and SpanBERT's "
                    "come with their --recipe (albert-base, spanbert-base: docs/recipes.md), and export writes "
                    "the matching Hugging Face class",
    "--line_by_line": "packing is the corpus's: build it (or shardforge repack it) with --rule doc_sentences for "
                      "one document per sequence",
    "--pad_to_max_length": "packing is the corpus's (build or shardforge repack with --rule); batches are padded "
                           "to their longest sequence",
    "--preprocessing_num_workers": "preprocessing is the build's: shardforge build --doc_processes N",
    "--load_best_model_at_end": _BEST_MODEL,
    "--metric_for_best_model": _BEST_MODEL,
    "--push_to_hub": _HUB,
    "--hub_model_id": _HUB,
    "--tf32": "on a GPU the run trains in mixed precision (--precision auto: bf16, or fp16 where the GPU lacks "
              "it), whose matmuls TF32 does not touch; fp32 matmuls keep torch's default precision",
    "--bf16_full_eval": _FULL_EVAL,
    "--fp16_full_eval": _FULL_EVAL,
    "--label_smoothing_factor": "the MLM loss is plain cross-entropy over the masked tokens (no smoothing)",
    "--config_name": "the model's shape is --model_size, a --recipe or --config_overrides KEY=VALUE; --init FOLDER "
                     "continues a Hugging Face model with its own config.json (--config is a train config YAML)",
    "--cache_dir": "nothing is downloaded, so nothing is cached: --init takes a local or fsspec folder",
    "--streaming": "the corpus is always streamed, shard by shard, from wherever --data is (nothing is loaded "
                   "whole)",
    "--disable_tqdm": "progress is a log line every --log_every steps; there is no progress bar to turn off",
    "--ignore_data_skip": "a resumed run goes on from the data position its checkpoint saved (each reader's place "
                          "in its shards), not by replaying the batches before it: there is nothing to skip",
    "--trust_remote_code": "--init reads a model folder's config.json and weights only: no code from it runs",
    "--torch_dtype": _LOAD_DTYPE,
    "--low_cpu_mem_usage": _LOAD_DTYPE,
    "--save_safetensors": "export (shardforge export RUN OUT) writes model.safetensors; checkpoints are torch "
                          "files, loaded with weights_only",
    "--save_only_model": "a checkpoint holds the optimizer and the data position too, for an exact resume; "
                         "shardforge export RUN OUT writes the model alone",
}

# run_mlm.py's --config_overrides (the shape of a model trained from scratch, KEY=VALUE,...): each Hugging Face
# config key the encoder has, as the model config key it sets; the ones set elsewhere say where.
HF_CONFIG_KEYS: dict[str, str] = {
    "hidden_size": "model.hidden", "num_hidden_layers": "model.layers", "num_attention_heads": "model.heads",
    "intermediate_size": "model.intermediate", "embedding_size": "model.embedding_size",
    "hidden_dropout_prob": "model.dropout", "attention_probs_dropout_prob": "model.attention_dropout",
    "type_vocab_size": "model.type_vocab_size", "layer_norm_eps": "model.layer_norm_eps",
    "hidden_act": "model.hidden_act",
}
HF_CONFIG_ELSEWHERE: dict[str, str] = {
    "vocab_size": "the corpus's tokenizer sets it",
    "max_position_embeddings": "positions count from pad_id + 1 as fairseq's do: --set model.max_positions=N "
                               "(514 for 512 tokens)",
}

_PACKING = ("packing is the corpus's: shardforge repack --tokenized CORPUS --output NEW --rule RULE packs it again "
            "without cleaning, deduplicating or tokenizing again (docs/packing.md)")
_TOKENIZER = ("the tokenizer and its vocabulary are the corpus's (its manifest names them); the build sets them "
              "(--tokenizer_kind, --vocab_size, or --tokenizer PATH to reuse one)")
_DROPOUT = ("dropout is --config_overrides hidden_dropout_prob=P,attention_probs_dropout_prob=P (run_mlm's form), "
            "or --set model.dropout=P --set model.attention_dropout=P")
_SHAPE = ("the model's shape is --model_size (tiny, small, base, large), a --recipe, or --config_overrides "
          "num_hidden_layers=N,hidden_size=N,... (Hugging Face config keys)")
_SENTENCE = ("the sentence task is --set model.sentence_head=nsp or sop, on a corpus packed in pairs (--rule "
             "segment_pair_nsp, sentence_pair_nsp or sop; shardforge repack packs one again); the bert-base and "
             "albert-* recipes set it")
_WHOLE_WORD = "whole-word masking is --masking whole_word (span: SpanBERT's spans; ngram: ALBERT's n-grams)"
_PROCESSES = ("one process a GPU, started by torchrun: torchrun --nproc_per_node N -m trainer.train ... (--nnodes, "
              "--node_rank and --master_addr across machines: deploy/trainer/launch.sh); --device picks cpu or cuda")
_SHARDING = ("every rank holds the whole model (DDP over torchrun's processes), with no DeepSpeed or FSDP "
             "sharding; --activation_checkpointing and --gradient_accumulation fit a larger model or batch")

# The build's flags and other trainers' words (Lightning, Megatron, fairseq, DeepSpeed) for what is set elsewhere
# here, and each --config_overrides key as a flag of its own.
OTHER_WORDS: dict[str, str] = {
    **dict.fromkeys(("--epoch", "--epochs", "--max_epochs", "--num_epochs"), _EPOCHS),
    **dict.fromkeys(("--max_seq_len", "--seq_len", "--seq_length", "--block_size", "--tokens_per_sample"), _SEQUENCE),
    **dict.fromkeys(("--rule", "--packing"), _PACKING),
    **dict.fromkeys(("--tokenizer", "--tokenizer_kind", "--vocab_size"), _TOKENIZER),
    **dict.fromkeys(("--dropout", "--attention_dropout"), _DROPOUT),
    **dict.fromkeys(("--layers", "--num_layers", "--heads"), _SHAPE),
    **dict.fromkeys(("--nsp", "--sop", "--sentence_head"), _SENTENCE),
    **dict.fromkeys(("--whole_word_mask", "--whole_word_masking", "--wwm"), _WHOLE_WORD),
    **dict.fromkeys(("--gpus", "--num_gpus", "--nproc_per_node", "--devices", "--num_nodes", "--nnodes",
                     "--world_size"), _PROCESSES),
    **dict.fromkeys(("--deepspeed", "--fsdp", "--zero_stage"), _SHARDING),
    "--hub_token": _HUB,
    **{f"--{hf}": f"--config_overrides {hf}=VALUE (run_mlm's form), or --set {key}=VALUE"
       for hf, key in HF_CONFIG_KEYS.items()},
    "--max_position_embeddings": HF_CONFIG_ELSEWHERE["max_position_embeddings"],
}


class NoEquivalent(argparse.Action):
    """A flag of NO_EQUIVALENT or OTHER_WORDS: one line saying what to give instead, exit 2 (with or without a
    value)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        name = self.option_strings[0]
        parser.error(f"{option_string}: {NO_EQUIVALENT.get(name) or OTHER_WORDS[name]}")
