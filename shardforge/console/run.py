"""How every command runs: a user error is one line (exit 2), anything else a redacted traceback (exit 1).

Every ``__main__`` of the data job, the trainer and the `shardforge` command
runs its body through `run_cli`. Importing this module costs nothing: it loads
neither half (tests/test_boundaries.py).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterator

from schemas.errors import UserError, causes
from shardforge.console.redact import (
    config_texts,
    install_log_redaction,
    redact_text,
    redacted_output,
    refuse_url_credentials,
    register_secrets,
)


def find_user_error(exc: BaseException) -> UserError | None:
    """The UserError behind exc, also when a runner (Beam) re-raised it wrapped in its own error."""
    for e in causes(exc):
        if isinstance(e, UserError):
            return e
    names = "|".join(sorted(_user_error_names()))
    m = re.search(rf"\b(?:{names}): (.+?)(?: \[while running|\n|$)", str(exc))
    return UserError(m.group(1)) if m else None


def _user_error_names() -> set[str]:
    """UserError and the names of its subclasses loaded in this process (a runner that re-raises an
    error as text keeps only its class name: ``InputChanged: …``)."""
    names, todo = set(), [UserError]
    while todo:
        cls = todo.pop()
        names.add(re.escape(cls.__name__))
        todo += cls.__subclasses__()
    return names | {"ShardFormatError"}


def unreachable_store_error(exc: BaseException) -> UserError | None:
    """A UserError naming the host when exc says an object store could not be connected to at all
    (its name does not resolve, nothing listens, no network), after the clients' own retries.

    A typo'd bucket endpoint, a missing network or proxy, an emulator that is not running: the
    user can fix each, and a traceback of aiohttp's connector says less than one line."""
    from shardforge.storage.retry import (  # fsspec: only once a command failed
        OPERATION_ATTR,
        unreachable_endpoint,
    )

    where = unreachable_endpoint(exc)
    if where is None:
        return None
    operations = [getattr(e, OPERATION_ATTR) for e in causes(exc) if isinstance(getattr(e, OPERATION_ATTR, None), str)]
    doing = f" [{operations[0]}]" if operations else ""
    return UserError(f"cannot reach {where}{doing}: check the URL, the network (or proxy) and the store's "
                     "endpoint settings (STORAGE_EMULATOR_HOST for gs:// URLs, FSSPEC_S3_ENDPOINT_URL or "
                     "AWS_ENDPOINT_URL for s3:// URLs)")


def access_denied_error(exc: BaseException) -> UserError | None:
    """A UserError naming the URL when a store or web server refused the credentials (HTTP 401 / 403)
    anywhere in exc's causes: the user can fix them, and aiohttp's traceback (whose request headers
    hold the Authorization header) must not be printed."""
    from shardforge.storage.reads import denied_message  # fsspec: only once a command failed
    from shardforge.storage.retry import OPERATION_ATTR, access_denied

    denied = access_denied(exc)
    if denied is None:
        return None
    status, url = denied
    if not url:
        ops = [getattr(e, OPERATION_ATTR) for e in causes(exc) if isinstance(getattr(e, OPERATION_ATTR, None), str)]
        url = ops[0].split(" ", 1)[-1] if ops else ""
    return UserError(denied_message(status, url))


# botocore's errors for S3 credentials it found none of, or only part of (s3fs raises them as they
# are; a runner that re-raised one kept its name in the text). Matched by name and module, so that a
# command that never touched S3 loads no botocore.
_NO_CREDENTIALS = frozenset({"NoCredentialsError", "PartialCredentialsError"})
_NO_CREDENTIALS_TEXT = re.compile(r"\b(?:NoCredentialsError|PartialCredentialsError): (.+?)(?: \[while running|\n|$)")


def missing_credentials_error(exc: BaseException) -> UserError | None:
    """A UserError naming the URL and where S3's credentials come from when botocore found none (or
    only part of them) anywhere in exc's causes; else None. botocore's words name no secret."""
    from shardforge.storage.retry import OPERATION_ATTR  # fsspec: only once a command failed

    chain = list(causes(exc))
    found = next((str(e) for e in chain if any(t.__name__ in _NO_CREDENTIALS and t.__module__.startswith("botocore")
                                               for t in type(e).__mro__)), None)
    if found is None:
        match = next((m for m in map(_NO_CREDENTIALS_TEXT.search, map(str, chain)) if m), None)
        if match is None:
            return None
        found = match.group(1)
    ops = [getattr(e, OPERATION_ATTR) for e in chain if isinstance(getattr(e, OPERATION_ATTR, None), str)]
    url = ops[0].split(" ", 1)[-1] if ops else "an s3:// URL"
    return UserError(f"no AWS credentials for {url} ({found.rstrip('.')}): s3:// URLs take them from the "
                     "environment: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (a profile "
                     "of ~/.aws/credentials), or run where an instance role provides them")


# errnos of a path the user named that cannot serve: a file where a folder is needed (or the other
# way), a folder in the way, no permission, a full or read-only disk, a name too long.
PATH_ERRNOS = frozenset(getattr(errno, n) for n in ("ENOTDIR", "EISDIR", "EEXIST", "EACCES", "EPERM", "ENOSPC",
                                                    "EROFS", "EDQUOT", "ENAMETOOLONG") if hasattr(errno, n))


def path_error(exc: BaseException) -> UserError | None:
    """A UserError for an OS error on a path that the user can fix (``PATH_ERRNOS``), e.g. an
    ``--output`` that is an existing file: "Not a directory: out/manifest.json". Missing files are
    the commands' own messages ("no manifest at ..."), not this."""
    for e in causes(exc):
        if isinstance(e, OSError) and e.errno in PATH_ERRNOS and e.filename:
            where = f"{e.filename}" + (f" -> {e.filename2}" if e.filename2 else "")
            return UserError(f"{e.strerror or os.strerror(e.errno)}: {where}{FULL_HINT if e.errno in FULL else ''}")
    for e in causes(exc):  # a full disk is never a bug, also where a library's write names no file
        if isinstance(e, OSError) and e.errno in FULL:
            return UserError(f"{e.strerror or os.strerror(e.errno)}{FULL_HINT}")
    return None


FULL = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT") if hasattr(errno, n))
FULL_HINT = (" (what was written completely stays, nothing half-written is kept or committed: free some space, "
             "or write to another folder, and run the same command again)")


def one_line_error(exc: BaseException) -> UserError | None:
    """The one line ``run_cli`` prints for exc (a mistake or a condition the user can fix), or None for a
    traceback. A runner's log of a step's error is left out for the same errors (``pipelines.options``)."""
    return (find_user_error(exc) or unreachable_store_error(exc) or access_denied_error(exc)
            or missing_credentials_error(exc) or path_error(exc))


# What Beam's runner appends to an error raised in a step: where it was raised, not what is wrong.
_RUNNER_SUFFIX = re.compile(r"(?: \[while running '[^']*'\])+$")


def user_error_line(message: str) -> str:
    """The one line a CLI prints for a user error (credentials redacted, the runner's step name dropped)."""
    return f"error: {redact_text(_RUNNER_SUFFIX.sub('', message))}"


# Loggers of the object-store clients that log an error with its traceback before raising it
# (gcsfs: "_request out of retries on exception: ..."): the command shows that error itself.
CLIENT_LOGGERS = ("gcsfs", "s3fs")


def _without_traceback(record: logging.LogRecord) -> bool:
    record.exc_info, record.exc_text = None, None
    return True


# Beam's runner logs an error raised in a step, with its traceback, before it re-raises it.
RUNNER_LOGGERS = ("apache_beam.runners.common",)


def _not_an_interrupt(record: logging.LogRecord) -> bool:
    """False for a log record of a Ctrl-C (the command says "interrupted" once, without a trace)."""
    exc = record.exc_info[0] if record.exc_info else None
    if exc is not None and issubclass(exc, KeyboardInterrupt):
        return False
    return not _INTERRUPT_TEXT.match(record.getMessage())


def quiet_library_logs() -> None:
    """Keep the object-store clients' log lines, without the traceback of the error they then raise:
    the command prints that error once (one line for a user's mistake, else its traceback). And
    leave out the runner's log of a Ctrl-C inside a step (the command says "interrupted")."""
    for names, keep in ((CLIENT_LOGGERS, _without_traceback), (RUNNER_LOGGERS, _not_an_interrupt)):
        for name in names:
            log = logging.getLogger(name)
            if keep not in log.filters:
                log.addFilter(keep)


INTERRUPTED = 130  # 128 + SIGINT: the shell's status of a command stopped by Ctrl-C
DATA_JOB_INTERRUPTED = ("nothing unfinished was committed (a corpus version is committed by its manifest, written "
                        "last); run the same command again to finish")
DATA_JOB_COMMITTED = ("the corpus version was committed before the interrupt (its manifest.json is written): "
                      "only the summary was cut short; running the same command again prints it")


def data_job_interrupted(committed: list[str]) -> Callable[[], str]:
    """A data job's Ctrl-C text: DATA_JOB_COMMITTED once ``committed`` holds its output, else DATA_JOB_INTERRUPTED."""
    return lambda: DATA_JOB_COMMITTED if committed else DATA_JOB_INTERRUPTED


TRAIN_INTERRUPTED = ("run the same command again to resume from the run's last checkpoint, if one was saved "
                     "(SIGTERM instead of Ctrl-C saves one at the end of the current step, then exits)")
# What Beam's runner makes of a KeyboardInterrupt raised inside a step: "KeyboardInterrupt [while running 'X']".
_INTERRUPT_TEXT = re.compile(r"^(?:\w+: )?KeyboardInterrupt(?: \[while running|$)")


def was_interrupted(exc: BaseException) -> bool:
    """True when exc is a KeyboardInterrupt, or a runner's error that wraps one (a cause, or its text)."""
    return any(isinstance(e, KeyboardInterrupt) or _INTERRUPT_TEXT.match(str(e)) for e in causes(exc))


STDOUT_CLOSED = 141  # 128 + SIGPIPE: the shell's status of a command whose reader closed the pipe


def stdout_closed() -> bool:
    """True when stdout is a pipe whose reader has gone (``| head`` that read its lines): polling it says
    POLLERR. Then stdout points at /dev/null, so that Python's own flush at exit prints no second error."""
    import select

    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if not any(ev & select.POLLERR for _, ev in poller.poll(0)):
            return False
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
        return True
    except (ValueError, OSError, AttributeError):
        return False


@contextlib.contextmanager
def exit_if_stdout_closed() -> Iterator[None]:
    """Around printing (--help): a reader that left (``| head``) ends the command quietly, status 141."""
    try:
        yield
    except BrokenPipeError:
        if not stdout_closed():
            raise
        raise SystemExit(STDOUT_CLOSED) from None


def stacks_on_sigusr1() -> None:
    """``kill -USR1 PID`` prints the stack of every thread of this process to its stderr, and the command
    goes on: for a command that seems stuck (a stalled store, a runner that never answers, an exit that
    never comes), where each thread waits. Python's ``faulthandler`` writes it from its C signal handler,
    without running Python code, so it answers also while the main thread is inside a C call or the
    interpreter waits at exit (for its threads, for exit handlers). Only where nothing else handles SIGUSR1
    (a caller's own handler is kept) and only from the main thread, as ``signal`` requires. A stack names
    files, lines and functions, no values: nothing a credential could be in."""
    import faulthandler
    import signal

    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is None or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(usr1) != signal.SIG_DFL:
        return
    with contextlib.suppress(AttributeError, OSError, RuntimeError, ValueError):  # no stderr with a file number
        faulthandler.register(usr1, file=sys.__stderr__ or sys.stderr, all_threads=True)


def run_cli(body: Callable[[], int], argv: list[str] | None = None,
            interrupted: str | Callable[[], str] = "") -> int:
    """Run a command's body: a user error (also one a runner re-raised wrapped) prints one line, exit 2.

    Ctrl-C prints "interrupted" and the command's ``interrupted`` text (what is left, how to go on; a
    function is asked for it when the interrupt comes) instead of a traceback, exit 130, also where a
    runner wrapped the KeyboardInterrupt. Output into a
    reader that left (``| head``) ends quietly, exit 141 (``stdout_closed``). Any other exception is a bug or an infrastructure failure: its traceback is
    printed with credentials redacted, exit 1. argv: the command's arguments when
    they are not this process's (an in-process call), for their credentials to be masked.
    """
    install_log_redaction()
    quiet_library_logs()
    stacks_on_sigusr1()
    os.environ.setdefault("SHARDFORGE_CHECK_HOSTS", "1")  # a store host that does not resolve: one line at once
    args = sys.argv[1:] + list(argv or [])
    register_secrets(args)
    try:
        refuse_url_credentials(args)
        configs = config_texts(args)  # a URL inside a --config file: refused and masked as on the command line
        register_secrets(configs)
        refuse_url_credentials(configs)
        with redacted_output(), _background_errors_told_once() as told:
            code = body()
        for line in told:  # a background thread's error the command's own thread never met
            print(f"warning: {line}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return _interrupted(interrupted)
    except Exception as e:  # noqa: BLE001 - Beam wraps errors raised inside stages
        if was_interrupted(e):
            return _interrupted(interrupted)
        if isinstance(e, BrokenPipeError) and stdout_closed():
            return STDOUT_CLOSED  # the reader of our output left (`| head`): nothing to say, nowhere to say it
        user = one_line_error(e)
        if user is not None:
            print(user_error_line(str(user)), file=sys.stderr)
            return 2
        print(redact_text("".join(traceback.format_exception(e))).rstrip("\n"), file=sys.stderr)
        return 1


@contextlib.contextmanager
def _background_errors_told_once() -> Iterator[list[str]]:
    """While a command runs, a background thread's error that ``one_line_error`` knows (TensorBoard's
    writer meeting a full disk) prints no traceback: the thread that owns the writer raises it again
    on its next call, and the command says it in one line. Those never raised again are yielded, to be
    said as warnings when the command ends."""
    seen: list[BaseException] = []
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and one_line_error(args.exc_value) is not None:
            seen.append(args.exc_value)
        else:
            previous(args)

    told: list[str] = []
    threading.excepthook = hook
    try:
        yield told
    finally:
        threading.excepthook = previous
        told += [user_error_line(str(one_line_error(e)))[len("error: "):] for e in seen]


def _interrupted(hint: str | Callable[[], str]) -> int:
    text = hint() if callable(hint) else hint
    print(f"interrupted{f': {text}' if text else ''}", file=sys.stderr)
    return INTERRUPTED
