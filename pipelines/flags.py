"""The Beam commands' own flags and their --help, without Beam (importing it takes ~2 s).

``python -m pipelines.build`` / ``repack`` / ``serve`` (and ``shardforge build`` / ``repack`` / ``serve``)
answer ``--help`` from here before anything imports Beam (``build_help`` …), and refuse a mistyped flag,
a bad value or a missing --input / --output here too (``check_flags``), against their own flags and a
list of Beam's (``BEAM_FLAGS``). The same adders register the flags on Beam's ``PipelineOptions``
(``pipelines.options.BuildOptions`` …), so the help and the parser the job runs with are one list, and
the job checks argv again once Beam is imported. ``--help_beam`` (Beam's own options) needs Beam:
``pipelines.options.handle_help``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, get_args

from pipelines.localrunner.preflight import runner_in_argv
from schemas.config import (
    BuildConfig,
    CleanConfig,
    DecontaminateConfig,
    PackingConfig,
    PackingRule,
    ShardConfig,
    SourceConfig,
    SourceFormat,
    TokenizerConfig,
)
from shardforge.console.args import (
    ArgumentParser,
    above,
    at_least,
    byte_size,
    option_strings,
    unknown_args_message,
)
from shardforge.console.run import exit_if_stdout_closed

DEFAULT_SPILL_MB = 32

RULES = get_args(PackingRule)
FORMATS = get_args(SourceFormat)
TOKENIZER_KINDS = get_args(TokenizerConfig.model_fields["model_type"].annotation)

BEAM_HELP_NOTE = "\n" + textwrap.fill(
    "Apache Beam's own options (--runner, --project, --region, --temp_location, --sdk_container_image, "
    "--direct_num_workers, ...) are accepted too: --help_beam lists them. Any other flag is an error. "
    "Without --runner the job runs on this machine (nothing is downloaded).", width=79)

BUILD_DESCRIPTION = """\
Build a training corpus from raw text: read the inputs, clean them, remove exact
and near duplicates, split sentences, train a tokenizer (or reuse one), encode,
pack into sequences, and write WebDataset shards with their manifest.json, a
report.html (what was kept, filtered and deduplicated, and why) and timings.html.
A build that finished is never changed: build into a new --output to change it.

examples:
  %(prog)s --input 'data/*.jsonl' --output out/corpus
  %(prog)s --config examples/build.yaml --input 'data/*.jsonl' --output out/corpus
  %(prog)s --input 'ccnews=gs://raw/cc/*.jsonl.gz' --output gs://corpora/v1 \\
      --runner DataflowRunner --project P --region R --temp_location gs://tmp/beam

Flags override the --config file (--input replaces its sources); what neither
sets takes the default shown. A local build shows its progress (bars on a
terminal, a line a minute in a log); every build ends with a short summary
(--json: the summary as JSON) and the report's path."""

REPACK_DESCRIPTION = """\
A new corpus with another packing rule, sequence length, split or shard size,
from an existing corpus's tokenized documents: nothing is cleaned, deduplicated
or tokenized again, and the tokenizer is the parent's (copied into the new corpus).
With the parent's own settings the shards come out the same bytes as the parent's.
It prints a short summary (--json: the summary as JSON).

examples:
  %(prog)s --tokenized out/corpus --output out/corpus-doc --rule doc_sentences
  %(prog)s --tokenized gs://corpora/v1 --output gs://corpora/v1-sop --rule sop --max_seq_len 256"""

SERVE_HELP_NOTE = """
Build flags of `python -m pipelines.build` (--config, --rule, --max_seq_len,
--vocab_size, --tokenizer, …; not --input/--output) shape version 1; its
--doc_processes, --spill_mb and --spill_dir are taken too, and --format,
--text_field, --encoding, --delimiter and --follow_links say how every batch's
files are read (build --help).
"""


def _default(model: Any, name: str) -> Any:
    """A config field's default (what the help shows)."""
    return model.model_fields[name].default


def add_source_flags(g: Any) -> None:
    """The flags that say how every source's files are read (they set each source of the config)."""
    g.add_argument("--format", default=None, metavar="FORMAT",
                   help=f"Format of the input files: {', '.join(FORMATS)} (default: auto, by extension). "
                        "This and the next four set every source (the --input ones, or the --config's).")
    g.add_argument("--text_field", default=None, metavar="FIELD",
                   help="The field holding the text in JSON / JSONL / Parquet records "
                        f"(default: {_default(SourceConfig, 'text_field')}).")
    g.add_argument("--delimiter", default=None, metavar="LINE",
                   help="Text files hold many documents, separated by lines that read LINE (e.g. "
                        "'<|endoftext|>'; '' for blank lines, as BERT's pretraining text) (default: one "
                        "document per file).")
    g.add_argument("--encoding", default=None, metavar="CODEC",
                   help="Text encoding of text, JSON and JSONL files (e.g. cp1252, latin-1, utf-16-le; "
                        f"default: {_default(SourceConfig, 'encoding')}; a UTF-16/32 byte-order mark is read "
                        "by itself).")
    g.add_argument("--follow_links", action="store_true", default=False,
                   help="Read local links that lead out of the folder an --input names (refused by default: "
                        "each is one not_a_file reject).")


def add_build_flags(parser: Any) -> None:
    """``python -m pipelines.build``'s flags (``BuildOptions``); each names its config key and default."""
    g = parser.add_argument_group("what to build")
    g.add_argument("--input", action="append", default=None, metavar="[NAME=]URL",
                   help="Raw input file, folder or glob (local, gs://, s3://, http://). Repeat for several "
                        "sources; NAME= names a source in the report (e.g. ccnews=gs://b/cc/*.jsonl.gz).")
    g.add_argument("--output", default=None, metavar="URL",
                   help="Where the corpus goes (a new local folder, gs://…, s3://…).")
    g.add_argument("--config", default=None, metavar="FILE",
                   help="Build config (YAML or JSON, any URL; examples/build.yaml is a commented one). It may "
                        "set only some sections; flags override it.")
    add_source_flags(g)
    c = parser.add_argument_group("cleaning and duplicates")
    c.add_argument("--languages", default=None, metavar="CODES",
                   help="Languages to keep, a comma list of codes (en,de,fr,zh,...), or 'any' to keep every "
                        f"language (default: {','.join(_default(CleanConfig, 'languages'))}).")
    c.add_argument("--min_words", type=int, default=None, metavar="N",
                   help=f"Fewest words a document may have (default: {_default(CleanConfig, 'min_words')}).")
    c.add_argument("--max_words", type=int, default=None, metavar="N",
                   help=f"Most words a document may have (default: {_default(CleanConfig, 'max_words'):,}, "
                        "Gopher's rule for web pages: books and long stories are longer).")
    c.add_argument("--max_doc_bytes", type=byte_size, default=None, metavar="BYTES",
                   help=f"Largest document, in bytes of text: 4000000, 4MB or 4MiB (default: "
                        f"{_default(CleanConfig, 'max_doc_bytes'):,}); each source reads records up to 4x that.")
    c.add_argument("--pii", default=None, metavar="KINDS",
                   help="PII kinds replaced by placeholders in kept documents: a comma list of email, ip, phone, "
                        "or none (default: email,ip; docs/cleaning.md).")
    c.add_argument("--no_near_dedupe", action="store_true", default=False,
                   help="Remove exact duplicates only (default: near duplicates too).")
    c.add_argument("--dedupe_index", default=None, metavar="URL",
                   help="The dedupe index of an existing corpus (its dedupe/index folder, which its manifest "
                        "names): documents that duplicate that corpus's are removed too (incremental builds).")
    c.add_argument("--decontaminate", action="append", default=None, metavar="PATH",
                   help="Evaluation sets (JSONL, JSON, Parquet or text files; any URL or glob; repeat for several): "
                        "documents sharing an n-gram with them are removed (docs/dedupe.md).")
    c.add_argument("--decontaminate_ngram", type=int, default=None, metavar="N",
                   help=f"Words per n-gram of --decontaminate (default: {_default(DecontaminateConfig, 'ngram')}, "
                        "as GPT-3).")
    c.add_argument("--decontaminate_mode", default=None, metavar="MODE",
                   help="document (remove the document; the default) or spans (cut out only the overlapping words).")
    t = parser.add_argument_group("tokenizer")
    t.add_argument("--tokenizer_kind", default=None, metavar="KIND",
                   help=f"Tokenizer to train: {', '.join(TOKENIZER_KINDS)}; unigram and bpe are SentencePiece's, "
                        "byte_bpe is a byte-level BPE as RoBERTa's (default: "
                        f"{_default(TokenizerConfig, 'model_type')}).")
    t.add_argument("--vocab_size", type=int, default=None, metavar="N",
                   help=f"Vocabulary size to train (default: {_default(TokenizerConfig, 'vocab_size')}).")
    t.add_argument("--tokenizer", default=None, metavar="PATH",
                   help="Reuse an existing tokenizer instead of training one: an spm.model, a tokenizer.json "
                        "(ours, or an existing model's: docs/continued-pretraining.md), a Hugging Face model "
                        "folder holding one, or a corpus (the tokenizer it was built with: corpora to --mix).")
    p = parser.add_argument_group("packing and shards")
    p.add_argument("--rule", default=None, metavar="RULE",
                   help=f"Packing rule: {', '.join(RULES)} (default: {_default(PackingConfig, 'rule')}; "
                        "docs/packing.md).")
    p.add_argument("--max_seq_len", type=int, default=None, metavar="N",
                   help=f"Most tokens per sequence, special tokens included (default: "
                        f"{_default(PackingConfig, 'max_seq_len')}).")
    p.add_argument("--valid_fraction", type=float, default=None, metavar="F",
                   help=f"Share of documents in the valid split (default: {_default(PackingConfig, 'valid_fraction')}).")
    p.add_argument("--shard_bytes", type=byte_size, default=None, metavar="BYTES",
                   help=f"Target shard size in bytes: 268435456, 256MiB or 256MB (default: "
                        f"{_default(ShardConfig, 'target_bytes')}, {_default(ShardConfig, 'target_bytes') >> 20} MiB).")
    p.add_argument("--shard_samples", type=int, default=None, metavar="N",
                   help="Target shard size in samples (default: by bytes only).")
    p.add_argument("--seed", type=int, default=None, metavar="N",
                   help="Seed of every random choice (the split, packing, the tokenizer's sample); the same "
                        f"input, config and seed give the same bytes (default: {_default(BuildConfig, 'seed')}).")
    p.add_argument("--batch_mb", type=float, default=None, metavar="MB",
                   help="Build in batches of at most this many MB of input files, each appended to the "
                        "corpus as a version: memory bounded by the batch, not the corpus (on this machine; "
                        "see docs/scaling.md). A rerun resumes after the last committed batch.")


PRINT_CONFIG = ("--print-config", "--print_config")


def add_summary_flags(parser: Any, what: str = "build") -> None:
    """What the build (or repack) prints (the driver's own: not Beam options, ``take_json``, ``take_print_config``)."""
    parser.add_argument("--json", action="store_true", default=False,
                        help=f"Print the {what}'s summary as JSON on stdout (default: a few lines for a person).")
    if what == "build":
        parser.add_argument(*PRINT_CONFIG, dest="print_config", action="store_true", default=False,
                            help="Print the build config the flags, --config and the defaults resolve to, as YAML "
                                 "that --config loads again, and exit (nothing is read or written; no --output needed).")


def take_json(argv: Sequence[str]) -> tuple[bool, list[str]]:
    """(whether argv asks for --json, argv without it): the rest goes to Beam, which knows no --json."""
    rest = [a for a in argv if a != "--json"]
    return len(rest) != len(argv), rest


def take_print_config(argv: Sequence[str]) -> tuple[bool, list[str]]:
    """(whether argv asks for --print-config, argv without it), as ``take_json``."""
    rest = [a for a in argv if a not in PRINT_CONFIG]
    return len(rest) != len(argv), rest


def spill_mb_value(text: str) -> float:
    """``--spill_mb``'s argparse type: 0 or more MB, or -1 (keep everything in memory); else one line."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of MB: {text!r}") from None
    if not (value >= 0 or value == -1):
        raise argparse.ArgumentTypeError(f"must be 0 or more MB, or -1 to keep everything in memory, not {text}")
    return value


def add_local_runner_flags(parser: Any, doc_processes: bool = True) -> None:
    """The local runner's cores and memory (``LocalRunnerOptions``): every command that runs a pipeline.

    doc_processes=False: memory only (repack's help: it cleans no documents)."""
    g = parser.add_argument_group("cores and memory on this machine (no --runner)" if doc_processes
                                  else "memory on this machine (no --runner)")
    if doc_processes:
        g.add_argument("--doc_processes", type=int, default=None, metavar="N",
                       help="Clean (with language ID), sketch and split documents into sentences in N processes "
                            "beside the build, which goes on with the rest (0: one per core; default: 1, in the "
                            "build's own process). The faster way to use a machine's cores; the output does not "
                            "depend on it (docs/scaling.md; Beam's --direct_num_workers N runs N whole workers "
                            "instead).")
    g.add_argument("--spill_mb", type=spill_mb_value, default=None, metavar="MB",
                   help="MB of data each step keeps in memory on its way to the next; the rest goes to "
                        f"temporary files (default: {DEFAULT_SPILL_MB}; 0 spills everything; -1 keeps everything "
                        "in memory). The output does not depend on it.")
    g.add_argument("--spill_dir", default=None, metavar="DIR",
                   help="Folder for the spilled data (default: the system temporary folder; the files are "
                        "gone when the build ends).")


def add_repack_flags(parser: Any) -> None:
    """``python -m pipelines.repack``'s flags (``RepackOptions``)."""
    g = parser.add_argument_group("what to repack")

    def add(*names: str, **kw: Any) -> None:
        # Beam parses every PipelineOptions subclass with one parser, so a flag that
        # BuildOptions already defines (same name, type and meaning) must not be added twice.
        try:
            g.add_argument(*names, **kw)
        except argparse.ArgumentError:
            pass

    add("--tokenized", default=None, metavar="URL",
        help="The parent corpus (its folder, its manifest.json, or its tokenized/ folder).")
    add("--output", default=None, metavar="URL", help="Where the new corpus goes (not the parent's folder).")
    add("--rule", default=None, metavar="RULE",
        help=f"Packing rule: {', '.join(RULES)} (default: the parent's; docs/packing.md).")
    add("--max_seq_len", type=int, default=None, metavar="N",
        help="Most tokens per sequence (default: the parent's).")
    add("--short_seq_prob", type=float, default=None, metavar="P",
        help="Share of shorter target lengths (default: 0.1 for pair rules, else 0).")
    add("--seed", type=int, default=None, metavar="N", help="Seed of the split and packing (default: the parent's).")
    add("--valid_fraction", type=float, default=None, metavar="F",
        help="Share of documents in valid (default: the parent's).")
    add("--shard_bytes", type=byte_size, default=None, metavar="BYTES",
        help="Target shard size in bytes: 268435456, 256MiB or 256MB (default: the parent's).")
    add("--shard_samples", type=int, default=None, metavar="N",
        help="Target shard size in samples (default: the parent's).")
    add("--groups", type=int, default=None, metavar="N", help="Packing groups (default: from the token count).")
    # Refused with its reason when given (a manifest names only files inside its corpus); not offered.
    add("--tokenizer_ref", action="store_true", default=False, help=argparse.SUPPRESS)


def add_serve_flags(p: Any) -> None:
    """``python -m pipelines.serve``'s own flags (the rest are build flags and Beam options)."""
    p.add_argument("--watch", default=None,
                   help="Glob or folder URL of raw files to ingest (default: the one recorded in the corpus).")
    p.add_argument("--corpus", required=True, help="Corpus root URL (created at the first batch).")
    p.add_argument("--source", default=None, help="Source name of the watched files (default: recorded, else 'other').")
    p.add_argument("--poll", type=above(0), default=30.0,
                   help="Seconds between looks at the watch glob (default: %(default)g).")
    p.add_argument("--settle", type=at_least(0, float), default=5.0,
                   help="A file is taken only once its modification time is this many seconds old "
                        "(a local file may still be being written; default: %(default)g).")
    p.add_argument("--max_files", type=at_least(1), default=256,
                   help="Most files per batch (= per version; default: %(default)s).")
    p.add_argument("--once", action="store_true", help="Ingest what is pending now, then exit.")
    p.add_argument("--batch_retries", type=int, default=3,
                   help="How many times a batch that failed on a transient error (the store could not be "
                        "reached, a 5xx, a dropped connection) is tried again in place, after pauses of "
                        "--poll seconds doubling each time, before the service stops (0: stop at once; "
                        "--once never waits; default: %(default)s).")
    p.add_argument("--log_level", default="INFO", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="Logging level of the service's log lines: DEBUG, INFO, WARNING or ERROR "
                        "(default: %(default)s).")


def module_doc(module: str) -> str | None:
    """A module's docstring, read from its source without importing it (``module.__doc__`` once imported)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8")), clean=False)


def command_parser(prog: str, description: str | None,
                   add: Callable[[argparse.ArgumentParser], None]) -> ArgumentParser:
    """The --help parser of a Beam command: its own flags plus --help_beam."""
    parser = ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add(parser)
    parser.add_argument("--help_beam", action="store_true",
                        help="List every Apache Beam pipeline option (--runner, --project, --region, …) and exit.")
    return parser


def build_parser(runner_flags: bool = True) -> ArgumentParser:
    """The build's flags, for --help and ``check_flags``; runner_flags=False: the build's own flags only
    (what the driver takes out of argv before the rest goes to Beam, the local runner's flags included)."""
    def add(p: argparse.ArgumentParser) -> None:
        add_build_flags(p)
        if runner_flags:
            add_local_runner_flags(p)
        add_summary_flags(p.add_argument_group("output"))

    return command_parser("python -m pipelines.build", BUILD_DESCRIPTION, add)


def repack_parser(runner_flags: bool = True) -> ArgumentParser:
    """Repack's flags, for --help and ``check_flags``; runner_flags=False: as ``build_parser``."""
    def add(p: argparse.ArgumentParser) -> None:
        add_repack_flags(p)
        if runner_flags:
            add_local_runner_flags(p, doc_processes=False)
        add_summary_flags(p.add_argument_group("output"), "repack")

    return command_parser("python -m pipelines.repack", REPACK_DESCRIPTION, add)


def serve_parser() -> ArgumentParser:
    p = command_parser("python -m pipelines.serve", (module_doc("pipelines.jobs.serve") or "") + SERVE_HELP_NOTE,
                       lambda _: None)
    add_serve_flags(p)
    return p


def serve_check_parser() -> ArgumentParser:
    """Every flag serve takes besides Beam's (its own, the build's, the local runner's), for ``check_flags``;
    the job itself refuses --input / --output (it takes --watch and --corpus)."""
    p = serve_parser()
    add_build_flags(p)
    add_local_runner_flags(p)
    return p


def wants_help(argv: Sequence[str]) -> bool:
    """-h / --help, and not --help_beam (Beam lists its own options; that needs Beam)."""
    return "--help_beam" not in argv and ("-h" in argv or "--help" in argv)


def print_help(parser: argparse.ArgumentParser) -> None:
    parser.print_help()
    print(BEAM_HELP_NOTE)


def answer_help(parser: Callable[[], argparse.ArgumentParser], argv: Sequence[str]) -> bool:
    """Print the command's --help if argv asks for it; True if it did."""
    if not wants_help(argv):
        return False
    with exit_if_stdout_closed():  # `--help | head`: no BrokenPipeError traceback
        print_help(parser())
        sys.stdout.flush()
    return True


def tagged(arg: str) -> bool:
    """Whether an --input names its source (NAME=URL)."""
    return "=" in arg and "://" not in arg.split("=", 1)[0]


def split_input(arg: str) -> tuple[str, str]:
    """'ccnews=gs://b/x/*.jsonl' -> ('ccnews', url); an untagged URL gets the name 'other'."""
    if tagged(arg):
        name, url = arg.split("=", 1)
        return name.strip(), url.strip()
    return "other", arg


def empty_input(arg: str) -> str | None:
    """The one line for an --input whose URL is empty (``--input "$RAW"`` with RAW unset, ``news=``):
    read as a path, it would build the working folder. None for any other."""
    if split_input(arg)[1].strip():
        return None
    return f"--input {arg!r} names no file, folder or glob" + (" after NAME=" if tagged(arg) else "")


def build_missing(ns: argparse.Namespace) -> str | None:
    """What a build's command line lacks (None: nothing): an --output, and inputs (--input, or a --config,
    whose sources are checked once it is read); an --input with no URL."""
    if not ns.output and not getattr(ns, "print_config", False):
        return "--output URL is required (where the corpus goes)"
    if not ns.input and not ns.config and not getattr(ns, "print_config", False):
        return "no input: give --input URL (or a --config with sources)"
    return next((p for p in map(empty_input, ns.input or ()) if p), None)


def repack_missing(ns: argparse.Namespace) -> str | None:
    if not ns.tokenized or not ns.output:
        return "--tokenized URL (the parent corpus) and --output URL are required"
    return None


def build_help(argv: Sequence[str]) -> bool:
    """``shardforge build`` / ``python -m pipelines.build`` before the build module (and Beam) is imported:
    True where it answered --help; a mistaken flag or value, or a missing --input / --output, exits 2
    with one line (``check_flags``)."""
    if answer_help(build_parser, argv):
        return True
    check_flags(build_parser(), argv, build_missing)
    return False


def repack_help(argv: Sequence[str]) -> bool:
    """``shardforge repack`` / ``python -m pipelines.repack`` before Beam is imported: as ``build_help``."""
    if answer_help(repack_parser, argv):
        return True
    check_flags(repack_parser(), argv, repack_missing)
    return False


def serve_help(argv: Sequence[str]) -> bool:
    """``shardforge serve`` before the serve module (and Beam) is imported: as ``build_help``."""
    if answer_help(serve_parser, argv):
        return True
    check_flags(serve_check_parser(), argv)
    return False


# ---------------------------------------------------------------- flag mistakes, before Beam is imported

# The values a flag may take (the config's own lists), checked before the config is made so that a
# mistake names the flag the user typed, not the config key it sets.
FLAG_CHOICES: dict[str, tuple[str, ...]] = {
    "rule": RULES, "format": FORMATS, "tokenizer_kind": TOKENIZER_KINDS,
    "decontaminate_mode": get_args(DecontaminateConfig.model_fields["mode"].annotation)}

# Apache Beam's own flags: every option of the PipelineOptions classes Beam registers (its
# pipeline_options module), at the Beam version the project pins. A flag neither the command nor this
# list knows is refused before Beam is imported (~2 s, 9-13 s on a busy machine); under another Beam
# version (or a runner given by its module path, which may bring options of its own) only the check
# after the import, against Beam's live parser, counts. tests/test_cli_flags.py checks the list.
BEAM_VERSION = "2.77.0"
BEAM_FLAGS = frozenset("--" + name for name in """
allow_non_deterministic_key_coders allow_unsafe_triggers application_id artifact_endpoint artifact_port
artifacts_dir auto_unique_labels autoscaling_algorithm azure_connection_string azure_managed_identity_client_id
beam_plugin beam_plugins beam_services blob_service_endpoint bootstrap_servers cloud_build_machine_type
create_from_snapshot dataflow_endpoint dataflow_job_file dataflow_kms_key dataflow_service_option
dataflow_service_options default_sdk_harness_log_level direct_embed_docker_python direct_num_workers
direct_runner_bundle_repeat direct_running_mode direct_test_splits disable_beartype disk_provisioned_iops
disk_provisioned_throughput_mibps disk_size_gb disk_type docker_registry_push_url dry_run
element_processing_timeout_minutes enable_artifact_caching enable_bucket_read_metric_counter
enable_bucket_write_metric_counter enable_gcsio_blob_generation enable_hot_key_logging enable_streaming_engine
environment_cache_millis environment_config environment_option environment_options environment_type
exclude_infer_dataclass_field_type expansion_port experiment experiments extra_package extra_packages
file_to_stage files_to_stage flexrs_goal flink_job_server_jar flink_master flink_submit_uber_jar flink_version
force_cloudpickle_deterministic_coders gbek gcp_oauth_scope gcp_oauth_scopes gcs_custom_audit_entries
gcs_custom_audit_entry hdfs_full_urls hdfs_host hdfs_port hdfs_user impersonate_service_account jar_cache_dir
job-server-timeout job_endpoint job_name job_port job_server_java_launcher job_server_jvm_properties
job_server_jvm_property job_server_timeout kafka_streams_job_server_jar label labels machine_type
maven_repository_url max_cache_memory_usage_mb max_num_workers max_parallelism min_cpu_platform network no_auth
no_direct_runner_use_stacked_bundle no_gcsio_throttling_counter no_pipeline_type_check no_save_main_session
no_use_public_ips no_wait_until_finish num_workers number_of_worker_harness_threads on_success_matcher
output_executable_path parallelism performance_runtime_type_check pickle_library
prebuild_sdk_container_base_image prebuild_sdk_container_engine prism_beam_version_override prism_location
prism_log_kind prism_log_level profile_cpu profile_location profile_memory profile_postprocess_interval_sec
profile_sample_rate profile_temp_location profile_upload_interval_sec profiler_agent profiler_extra_arg
profiler_extra_args profiler_extra_env_var profiler_extra_env_vars profiler_stop_after_crash
profiler_stop_after_sec project pubsub_root_url region requirements_cache requirements_cache_only_sources
requirements_file resource_hint resource_hints runner runtime_type_check s3_access_key_id s3_api_version
s3_disable_ssl s3_endpoint_url s3_region_name s3_secret_access_key s3_session_token s3_verify save_main_session
sdk_container_image sdk_harness_container_image_overrides sdk_harness_log_level_overrides sdk_location
sdk_worker_parallelism service_account_email setup_file spark_job_server_jar spark_master_url spark_rest_url
spark_submit_uber_jar spark_version staging_location streaming subnetwork temp_location template_location
transform_name_mapping type_check_additional type_check_strictness update update_compatibility_version
use_public_ips use_transform_service user_agent wait_until_finish_duration worker_disk_type
worker_harness_container_image worker_machine_type worker_region worker_zone zone
""".split())


# Beam's runners whose options are all among BEAM_FLAGS (lowercase, without "Runner"). Another runner
# (DaskRunner, one given by its module path) may register options of its own when Beam imports it.
RUNNERS_OF_BEAM_FLAGS = frozenset({"direct", "fnapi", "bundlebaseddirect", "switchingdirect", "testdirect", "dataflow",
                                   "testdataflow", "portable", "flink", "spark", "prism"})


def beam_flags_known(argv: Sequence[str]) -> bool:
    """Whether BEAM_FLAGS is every Beam flag this command can take: the pinned Beam is installed, and
    ``--runner`` (if given) is one of ``RUNNERS_OF_BEAM_FLAGS``."""
    try:
        if importlib.metadata.version("apache-beam") != BEAM_VERSION:
            return False
    except importlib.metadata.PackageNotFoundError:
        return False
    if argv and argv[-1] == "--runner":
        return False  # a --runner without its value: Beam's own parser says so
    runner = runner_in_argv(argv)
    if runner is None:
        return True
    name = runner.lower()
    return (name[:-len("runner")] if name.endswith("runner") else name) in RUNNERS_OF_BEAM_FLAGS


def choice_problem(flag: str, value: str, choices: Sequence[str]) -> str:
    """One line for a value that is not one of choices, with the closest one."""
    from shardforge.console.args import closest_choice

    close = closest_choice(value, choices)
    hint = f" (did you mean {close}?)" if close else ""
    return f"--{flag} {value!r} is not one of {', '.join(choices)}{hint}"


def stray_arguments(argv: Sequence[str], extra: Sequence[str]) -> list[str]:
    """The words in extra (what the command's parser left) that no flag can own: not a flag, and not right
    after a flag the parser left (a Beam flag's value, ``--project p``), such as the files of a glob the
    shell expanded after ``--input``. A word after a Beam switch that takes no value is left to Beam's own
    check, which knows every option's kind."""
    strays: list[str] = []
    left = list(extra)
    previous_left = False
    previous = ""
    for word in argv:
        is_left = bool(left) and word == left[0]
        if is_left:
            left.pop(0)
            owned = previous_left and previous.startswith("--") and "=" not in previous
            if not word.startswith("-") and not owned:
                strays.append(word)
        previous_left, previous = is_left, word
    return strays


def check_flags(parser: argparse.ArgumentParser, argv: Sequence[str],
                missing: Callable[[argparse.Namespace], str | None] | None = None) -> None:
    """Exit 2 with one line (the parser's error) on a flag neither the command nor Beam knows, a value of
    the wrong type, or a value not among a flag's choices (``FLAG_CHOICES``), before Beam is imported.
    missing: what the command line lacks besides argparse's required flags (``build_missing``); nothing is
    missing from ``--help_beam``. A mistyped flag is named before a required flag is missing (``serve --corpus`` misspelled is the
    misspelling, not "--corpus is required"). What passes is checked again once Beam is imported
    (``pipelines.options.check_beam_args``)."""
    required = [a for a in parser._actions if a.required]
    for action in required:
        action.required = False
    try:
        ns, extra = parser.parse_known_args(list(argv))  # a value of the wrong type: parser.error
    finally:
        for action in required:
            action.required = True
    for flag, choices in FLAG_CHOICES.items():
        value = getattr(ns, flag, None)
        if value is not None and value not in choices:
            parser.error(choice_problem(flag, value, choices))
    strays = stray_arguments(argv, extra)
    if strays:  # before the runner's checks, which would name only the first of a glob's files
        parser.error(unknown_args_message(strays, option_strings(parser)))
    if not beam_flags_known(argv):
        return
    unknown = [a for a in extra if a.startswith("--") and a != "--" and a.split("=", 1)[0] not in BEAM_FLAGS]
    if unknown:
        parser.error(unknown_args_message(unknown, [*option_strings(parser), *sorted(BEAM_FLAGS)]))
    if required:
        parser.parse_known_args(list(argv))  # now a missing required flag: parser.error
    problem = missing(ns) if missing is not None and "--help_beam" not in argv else None
    if problem:
        parser.error(problem)
