"""shardforge's lean torch trainer: pretrain an encoder on a corpus the Beam jobs built.

This room is the torch half of the project and never Beam: it streams the
shards a corpus's manifest lists (loader), masks on the device (masking), runs
the model (model, batch, precision, optim), evaluates, checkpoints, records
metrics (metrics: what a step measures; loggers: where records go), and exports
a Hugging Face folder (export, hf_*). ``python -m trainer.train`` is its entry
point; train.py reads top to bottom: set up, then the loop.

What it may import: torch (and the libraries only the trainer uses: numpy, tqdm,
safetensors, tokenizers, sentencepiece, yaml, matplotlib, the optional trackers), schemas
(the corpus contract it shares with the Beam jobs), shardforge.storage (URLs
and files) and shardforge.console (CLI plumbing). Never pipelines or
apache_beam (tests/test_boundaries.py checks it).
"""
