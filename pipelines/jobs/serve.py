"""Corpus as a service: watch for raw files and append each new batch as a corpus version.

    python -m pipelines.serve --watch 'incoming/*.jsonl' --corpus out/corpus --source news
    python -m pipelines.serve --watch 'gs://raw/news/**.jsonl.gz' --corpus gs://corpus/news \\
        --source ccnews --poll 60 --runner DataflowRunner --project P --region R \\
        --temp_location gs://tmp/beam

A driver that polls the watch glob (fsspec) and runs one incremental batch
build (``pipelines.jobs.ingest.ingest_batch``, the ordinary build code) per set of
new files: on the local FnApiRunner in-process, or on Dataflow with the Beam
options passed through. The first batch creates version 1 (training the
tokenizer, with the build flags given here: --config, --rule, --vocab_size …);
later batches use the corpus's recorded config with its tokenizer frozen.

Stopping: the first SIGINT/SIGTERM lets the running batch finish and commit,
then exits; a second one abandons the batch at once (nothing of it is
committed: the version's manifest is written only after the batch completes).
A killed process restarts cleanly: state is recovered from the manifest chain.
A listing of the watched files that fails on a transient error (the store cannot be reached,
a 503) once the storage layer's retries gave up is logged and tried again a poll later: the
service outlives an outage (``--once`` fails instead, in one line). A batch that fails on a
transient error is tried again in place, up to ``--batch_retries`` times after pauses of
``--poll`` seconds doubling each time, from the corpus state re-read from its manifests (the
failed attempt may have committed before it failed); then the service stops with the error in
one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TypeVar

from pipelines.corpus.commit import check_folder
from pipelines.flags import serve_parser
from pipelines.jobs.build_config import build_config_from_options, source_config, source_flags
from pipelines.jobs.ingest import (
    SERVE_STATE,
    BatchResult,
    CorpusState,
    RawFile,
    ingest_batch,
    recover,
    scan,
)
from pipelines.jobs.summary import where_records_went
from pipelines.options import (
    BuildOptions,
    check_beam_args,
    handle_help,
    quiet_beam,
)
from pipelines.report.record import build_warnings
from pipelines.sources.listing import check_raw_input
from schemas.config import BuildConfig, SourceConfig
from schemas.errors import UserError
from schemas.manifest import accounting_totals
from shardforge.console.args import option_strings
from shardforge.console.run import run_cli
from shardforge.console.words import counted
from shardforge.storage import is_transient, join, read_text, redact_url, write_text_atomic
from shardforge.storage.retry import unreachable_endpoint

log = logging.getLogger("shardforge.serve")
T = TypeVar("T")

class Stopper:
    """SIGINT/SIGTERM: the first asks to stop after the current batch, the second abandons it."""

    def __init__(self) -> None:
        self.requested = False
        self.in_batch = False

    def install(self) -> dict[int, object]:
        """Install the handlers; returns the previous ones (for restore)."""
        return {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def restore(previous: dict[int, object]) -> None:
        for s, h in previous.items():
            signal.signal(s, h)  # type: ignore[arg-type]

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not self.in_batch:
            self.requested = True  # idle: the loop sees it within its next sleep tick
            log.warning("%s: stopping", name)
            return
        if self.requested:
            log.warning("%s again: abandoning the running batch (nothing of it is committed)", name)
            raise KeyboardInterrupt(name)
        self.requested = True
        log.warning("%s: finishing the running batch, then stopping (again to abandon it)", name)

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.requested and time.monotonic() < end:
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(serve's own flags, the rest); the rest must be build flags or Beam options (UserError otherwise)."""
    p = serve_parser()
    args, rest = p.parse_known_args(argv)
    check_beam_args(rest, also_known=option_strings(p))
    return args, rest


def serve_state(corpus: str) -> dict:
    try:
        return json.loads(read_text(join(corpus, SERVE_STATE)))
    except FileNotFoundError:
        return {}


def first_config(build_argv: list[str], source: str, watch: str) -> BuildConfig | None:
    """The build config of version 1 from the build flags (None if they cannot make one)."""
    opts = BuildOptions(build_argv + ["--input", f"{source}={watch}"])
    return build_config_from_options(opts)


def run(argv: list[str], stopper: Stopper | None = None) -> int:
    """The serve loop; returns the process exit code."""
    args, rest = parse_args(argv)
    with _root_log(args.log_level):
        return _serve(args, rest, stopper)


@contextlib.contextmanager
def _root_log(level: str) -> Iterator[None]:
    """The serve loop's log lines on stderr at ``level``, in place of the root logger's handlers; an
    in-process caller's handlers and level are put back after (not closed, as basicConfig's force does)."""
    root = logging.getLogger()
    handlers, before = root.handlers[:], root.level
    for h in handlers:
        root.removeHandler(h)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        yield
    finally:
        for h in root.handlers[:]:
            root.removeHandler(h)
            h.close()
        for h in handlers:
            root.addHandler(h)
        root.setLevel(before)


def _serve(args: argparse.Namespace, rest: list[str], stopper: Stopper | None) -> int:
    bparser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    BuildOptions._add_argparse_args(bparser)
    build_known, beam_args = bparser.parse_known_args(rest)
    if build_known.input or build_known.output:
        raise UserError("serve takes --watch and --corpus, not --input / --output")
    if args.batch_retries < 0:
        raise UserError(f"--batch_retries must be 0 or more (got {args.batch_retries})")
    corpus = args.corpus.rstrip("/")
    check_folder(corpus, "--corpus")
    recorded = serve_state(corpus)
    watch = args.watch or recorded.get("watch")
    if not watch:
        raise UserError("--watch GLOB is required (none is recorded in the corpus yet)")
    source_name = args.source or recorded.get("source") or "other"
    build_argv = rest  # BuildOptions parses the build flags and ignores the Beam ones
    source = source_config({"name": source_name, "input": watch, **source_flags(build_known)},
                           f"--source {source_name!r}")
    check_raw_input(source.name, watch, "--watch")
    args.follow_links = build_known.follow_links  # the watch listing refuses the links the reader would
    stopper = stopper or Stopper()
    previous = stopper.install()
    try:
        return _loop(args, corpus, watch, source, build_argv, beam_args, stopper)
    finally:
        Stopper.restore(previous)


def _where(e: BaseException) -> str:
    """A transient error in a few words: the store it could not reach, else its type and first line."""
    first = (str(e).strip().splitlines() or [""])[0]
    return unreachable_endpoint(e) or f"{type(e).__name__}: {first[:300]}"


def _or_wait(op: Callable[[], T], what: str, again: str, args: argparse.Namespace, stopper: Stopper) -> T | None:
    """``op()``; None after a pause of ``--poll`` when it failed on a transient error (the store cannot
    be reached, a 503) after the storage layer's retries, logged as ``cannot WHAT (why); AGAIN in N s``.
    Anything else, and any error under ``--once``, is raised."""
    try:
        return op()
    except Exception as e:  # noqa: BLE001 - classified: a transient error waits, anything else is raised
        if args.once or not is_transient(e):
            raise
        log.warning("cannot %s (%s); %s in %.0f s", what, _where(e), again, args.poll)
        stopper.sleep(args.poll)
        return None


def _look(watch: str, state: CorpusState, corpus: str, args: argparse.Namespace, stopper: Stopper):
    """``scan`` of the watched files; None after a pause when the store could not be listed.

    A service outlives a network outage: a listing that fails on a transient error is logged and
    tried again a poll interval later, instead of ending the service. ``--once`` fails instead
    (one line)."""
    return _or_wait(lambda: scan(watch, state.ledger, exclude=corpus, follow_links=args.follow_links),
                    f"list {redact_url(watch)}",
                    "looking again", args, stopper)


def _pause_after(e: Exception, failures: int, n_files: int, args: argparse.Namespace, stopper: Stopper) -> None:
    """Wait before trying again the batch that failed with ``e`` (its ``failures``-th consecutive
    failure); raise ``e`` when it is not to be tried again: --once, not transient, retries spent."""
    if args.once or not is_transient(e) or failures > args.batch_retries:
        raise e
    pause = args.poll * 2 ** (failures - 1)
    log.warning("batch of %s failed on a transient error (%s); trying it again in %.0f s (%d of %d)",
                counted(n_files, "file"), _where(e), pause, failures, args.batch_retries)
    stopper.sleep(pause)


def _recovered(corpus: str, args: argparse.Namespace, stopper: Stopper) -> CorpusState | None:
    """The corpus state re-read from its manifests after a failed batch; None after a pause when
    the store could not be read (a transient error: tried again by the loop)."""
    return _or_wait(lambda: recover(corpus), f"read the corpus {redact_url(corpus)}", "trying again", args, stopper)


def _nothing_to_ingest(watch: str, state: CorpusState, start_version: int) -> None:
    """``--once`` ends with nothing pending: where this run committed nothing, one line saying so (a glob
    that matches no file is most often a typo)."""
    if state.version != start_version:
        return
    if state.ledger:
        log.warning("--once: no new file under --watch %s: nothing to ingest (the corpus holds the %d "
                    "ingested before)", redact_url(watch), len(state.ledger))
    else:
        log.warning("--once: --watch %s matches no file: nothing to ingest", redact_url(watch))


def batch_warnings(res: BatchResult, corpus: str = "CORPUS") -> list[str]:
    """The build's warnings over a batch's records (a rule that removed most of them, undecodable ones, ...);
    the valid split is judged over the whole corpus (a small batch may well add nothing to it)."""
    batch = res.batch.model_dump(mode="json")
    batch["totals"] = res.manifest.model_dump(mode="json")["totals"]
    return build_warnings(batch, corpus)


def _loop(args: argparse.Namespace, corpus: str, watch: str, source: SourceConfig, build_argv: list[str],
          beam_args: list[str], stopper: Stopper) -> int:
    source_name = source.name

    state: CorpusState = recover(corpus)
    start_version = state.version
    log.info("corpus %s at version %d (%s absorbed)", redact_url(corpus), state.version,
             counted(len(state.ledger), "file"))
    write_text_atomic(join(corpus, SERVE_STATE), json.dumps(
        {"watch": redact_url(watch), "source": source_name, "poll": args.poll, "settle": args.settle,
         "max_files": args.max_files}, sort_keys=True, indent=1) + "\n")
    new_cfg = first_config(build_argv, source_name, watch) if state.latest is None else None

    first_seen: dict[str, float] = {}
    reported: set[tuple[str, int]] = set()
    failures = 0  # consecutive batches failed on a transient error
    stale = False  # the state may lag the corpus: a batch failed, perhaps after its commit
    try:
        while not stopper.requested:
            if stale:
                recovered = _recovered(corpus, args, stopper)
                if recovered is None:
                    continue
                state, stale = recovered, False
                if state.latest is not None:
                    new_cfg = None  # version 1 was committed: later batches use its config
            look = _look(watch, state, corpus, args, stopper)
            if look is None:
                continue  # the store could not be listed: looked again after a pause
            now = time.time()
            for f, e, why in look.changed:
                if (f.url, f.size) not in reported:
                    reported.add((f.url, f.size))
                    log.warning("changed after ingest (absorbed by v%d, NOT re-ingested): %s (%s)",
                                e.version, f.url, why)
            ready: list[RawFile] = []
            for f in look.pending:
                first_seen.setdefault(f.url, now)
                if f.mtime is None or now - f.mtime >= args.settle:
                    ready.append(f)
            if stopper.requested:
                break
            if ready:
                batch = ready[: args.max_files]
                stopper.in_batch = True
                try:
                    res = ingest_batch(state, batch, source, new_cfg, beam_args, first_seen)
                except Exception as e:  # noqa: BLE001 - a transient error is tried again, anything else raised
                    failures += 1
                    stale = True
                    stopper.in_batch = False
                    _pause_after(e, failures, len(batch), args, stopper)
                    continue
                finally:
                    stopper.in_batch = False
                failures = 0
                lags = [time.time() - f.mtime for f in batch if f.mtime is not None]
                log.info("committed v%d: %s (documents %s), %s, %.1f s (max lag since landing %.1f s); report %s",
                         res.version, counted(res.files, "file"), where_records_went(accounting_totals(res.batch)),
                         counted(res.new_shards, "new shard"), res.seconds, max(lags, default=0.0),
                         redact_url(res.report))
                for line in batch_warnings(res, redact_url(corpus)):
                    log.warning("v%d: %s", res.version, line.removeprefix("warning: "))
                new_cfg = None
                if args.once or len(ready) > len(batch):
                    continue  # look again at once: more may be waiting
            elif args.once:
                if not look.pending:
                    _nothing_to_ingest(watch, state, start_version)
                    break
                stopper.sleep(min(args.poll, args.settle))  # --once waits for files to settle
                continue
            stopper.sleep(args.poll)
    except KeyboardInterrupt:
        log.warning("stopped: the interrupted batch was abandoned; restart to ingest its files")
        return 130
    log.info("stopped at version %d", state.version)
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry (`python -m pipelines.serve`); 2 with one line on user errors."""
    quiet_beam()
    argv = sys.argv[1:] if argv is None else argv
    if handle_help(serve_parser(), argv):
        return 0
    return run_cli(lambda: run(argv), argv)

