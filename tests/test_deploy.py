"""deploy/: Dataflow translation offline, scale-out determinism, containers, launchers, Kubernetes.

Docker cannot run here, so the Dockerfiles are checked statically; the
commands in the scripts and the manifest are checked against the real
parsers (Beam's options, torchrun's, trainer.train's) by running the scripts
in their print modes.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # deploy/ is not an installed package
    sys.path.insert(0, str(ROOT))

DEPLOY = ROOT / "deploy"
IMAGE = "us-central1-docker.pkg.dev/my-project/shardforge/build:0.1.0"


# ------------------------------------------------------------------ helpers

def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in path.read_text().splitlines():
        s = line.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if s.startswith("#"):
            continue
        buf += " " + s[:-1] if s.endswith("\\") else " " + s
        if not s.endswith("\\"):
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def final_stage(instrs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last = max(i for i, (k, _) in enumerate(instrs) if k == "FROM")
    return instrs[last:]


def pyproject() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def pin_of(reqs: list[str], name: str) -> str:
    for r in reqs:
        m = re.fullmatch(rf"{re.escape(name)}==([\w.]+)", r.strip())
        if m:
            return m.group(1)
    raise AssertionError(f"{name} is not pinned with == in {reqs}")


def dockerfile_args(instrs: list[tuple[str, str]]) -> dict[str, str]:
    """ARG defaults (NAME=value) of a Dockerfile."""
    return {a.split("=", 1)[0]: a.split("=", 1)[1] for k, a in instrs if k == "ARG" and "=" in a}


def base_images(instrs: list[tuple[str, str]]) -> dict[str, str]:
    """Every stage's base image with ARG defaults substituted, by stage alias ("" for an unnamed stage)."""
    args = dockerfile_args(instrs)
    out = {}
    for k, a in instrs:
        if k == "FROM":
            image, _, alias = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], a).partition(" AS ")
            out[alias.strip()] = image.strip()
    return out


def constraints() -> dict[str, str]:
    """constraints.txt as {canonical name: pinned version}; every line must be an exact pin."""
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.!+_-]+)", line.strip())
        assert m, f"constraints.txt: not an exact pin: {line!r}"
        name = str(canonicalize_name(m.group(1)))
        assert name not in pins, f"constraints.txt pins {name} twice"
        pins[name] = m.group(2)
    return pins


def lock_python() -> str:
    """The Python minor version constraints.txt was resolved with (from its header)."""
    m = re.search(r"\(Python (\d+\.\d+)\.\d+", (ROOT / "constraints.txt").read_text())
    assert m, "constraints.txt header names no Python version"
    return m.group(1)


def check_image_hygiene(dockerfile: Path, extras: list[str]) -> None:
    """Pinned bases, dependencies from constraints.txt in a layer before the code, a non-root user."""
    from deploy.requirements import requirements

    instrs = dockerfile_instructions(dockerfile)
    # Every base image has a release tag (or a digest), never :latest or no tag at all.
    for alias, image in base_images(instrs).items():
        m = re.fullmatch(r"[\w.\-/]+(:(?P<tag>[\w][\w.\-]*))?(@sha256:[0-9a-f]{64})?", image)
        assert m and (m.group("tag") or "@sha256:" in image), (alias, image)
        assert m.group("tag") != "latest", (alias, image)
    stage = final_stage(instrs)
    runs = [a for k, a in stage if k == "RUN"]
    # Every pip install resolves against constraints.txt, or resolves nothing (--no-deps).
    for run in runs:
        for cmd in re.split(r"&&|;", run):
            if "pip install" in cmd:
                assert "-c constraints.txt" in cmd or "--no-deps" in cmd, cmd
    # The dependency layer comes before any source is copied: code edits do not re-resolve.
    deps = next(i for i, (k, a) in enumerate(stage) if k == "RUN" and "-r /tmp/requirements.txt" in a)
    assert f"requirements.py {' '.join(extras)}" in stage[deps][1]
    before = [a.split()[:-1] for k, a in stage[:deps] if k == "COPY" and not a.startswith("--from")]
    assert sorted(f for files in before for f in files) == ["constraints.txt", "deploy/requirements.py",
                                                           "pyproject.toml"], before
    code = [i for i, (k, a) in enumerate(stage) if k == "COPY" and a.split()[0] in ("storage/", "schemas/", "pipelines/",
                                                                                   "trainer/", "shardforge/")]
    assert code and min(code) > deps
    # Every source a COPY names is in the repository (a stale one fails the docker build).
    sources = [src for k, a in stage if k == "COPY" and not a.startswith("--from") for src in a.split()[:-1]]
    assert all((ROOT / src).exists() for src in sources), sources
    assert any("pip install --no-deps" in stage[i][1] for i in range(max(code), len(stage)) if stage[i][0] == "RUN")
    # The requirements the image installs are pyproject's (read by the same script).
    proj = pyproject()
    want = [*proj["dependencies"], *(r for e in extras for r in proj["optional-dependencies"][e])]
    assert set(want) <= set(requirements(extras))
    # It runs as an unprivileged user that the image creates: USER uid:gid, last, before the entrypoint.
    users = [i for i, (k, _) in enumerate(stage) if k == "USER"]
    assert users, f"{dockerfile}: no USER (runs as root)"
    uid, _, gid = stage[users[-1]][1].partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit(), stage[users[-1]]
    assert users[-1] < next(i for i, (k, _) in enumerate(stage) if k == "ENTRYPOINT")
    assert not [a for k, a in stage[users[-1]:] if k == "RUN"], "RUN after USER: installs must be root's"
    assert any(f"useradd --uid {uid} " in a for a in runs)


def script_lines(cmd: list[str], env: dict[str, str]) -> list[str]:
    res = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def dataflow_env(input_url: str, **extra: str) -> dict[str, str]:
    return {"PROJECT": "my-project", "REGION": "us-central1", "BUCKET": "my-bucket", "IMAGE": IMAGE,
            "OUTPUT": "gs://my-corpora/en-v1", "INPUT": input_url, "JOB_NAME": "shardforge-test", **extra}


def k8s_docs() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "k8s" / "train.yaml").read_text()) if d]
    return {d["kind"]: d for d in docs}


def container_env(docs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The trainer container's environment, ConfigMap references resolved."""
    c = docs["Job"]["spec"]["template"]["spec"]["containers"][0]
    cm = docs["ConfigMap"]
    env = {}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        else:
            ref = e["valueFrom"]["configMapKeyRef"]
            assert ref["name"] == cm["metadata"]["name"], e
            env[e["name"]] = cm["data"][ref["key"]]
    return env


@pytest.fixture(scope="module")
def trainer_flags() -> set[str]:
    """Every option string `python -m trainer.train` accepts, from its own --help."""
    res = subprocess.run([sys.executable, "-m", "trainer.train", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    options = res.stdout.split("options:", 1)[1]  # the usage text and description mention other tools' flags
    return {f for line in options.splitlines() if (m := re.match(r"\s{2}(-[^ ,]+(?:, -[^ ,]+)*)", line))
            for f in m.group(1).split(", ")}


def check_trainer_args(args: list[str], flags: set[str]) -> Any:
    """Every flag exists in trainer.train's CLI and the values validate as a TrainConfig."""
    from trainer.train import build_train_config

    values: dict[str, Any] = {f.lstrip("-"): None for f in flags if f.startswith("--")}
    values["set"] = []
    i = 0
    while i < len(args):
        flag = args[i]
        assert flag in flags, f"{flag} is not an option of trainer.train ({sorted(flags)})"
        assert i + 1 < len(args), f"{flag} has no value"
        key = flag.lstrip("-")
        if key == "set":
            values["set"].append(args[i + 1])
        else:
            values[key] = args[i + 1]
        i += 2
    return build_train_config(argparse.Namespace(**values), values["set"])


# ------------------------------------------------------------------ Dataflow: command, translation, template

def test_dataflow_command_uses_only_known_flags():
    from deploy.dataflow.dryrun import unknown_flags

    args = script_lines(["bash", "deploy/dataflow/dataflow.sh", "print", "--rule", "sop"],
                        dataflow_env("ccnews=gs://raw/cc/*.jsonl.gz"))
    for flag in ("--runner", "--project", "--region", "--temp_location", "--sdk_container_image", "--output",
                 "--input"):
        assert flag in args
    assert args[args.index("--runner") + 1] == "DataflowRunner"
    assert args[args.index("--sdk_container_image") + 1] == IMAGE
    assert unknown_flags(args) == []
    # Beam silently drops flags it does not know; the check must not.
    assert unknown_flags([*args, "--max_workers_typo", "3"]) == ["--max_workers_typo"]


@pytest.fixture(scope="module")
def translation(demo_corpus):
    from deploy.dataflow.dryrun import translate

    args = script_lines(["bash", "deploy/dataflow/dataflow.sh", "print"], dataflow_env(f"ccnews={demo_corpus['ccnews']}"))
    return args, translate(args)


def test_full_build_translates_for_dataflow(translation):
    args, t = translation
    names = [tr.unique_name for tr in t.proto.components.transforms.values()]
    for stage in ("SpreadDocuments", "Clean", "Dedupe", "TrainTokenizer", "Tokenize", "WriteCorpus"):
        assert any(n.split("/")[0] == stage for n in names), stage
    assert t.images == [IMAGE]
    assert t.pickled_fns > 20
    tops = {m.split(".")[0] for m in t.modules}
    assert {"pipelines", "apache_beam"} <= tops
    assert not tops & {"torch", "trainer", "__main__"}
    assert t.sdk_options["project"] == "my-project" and t.sdk_options["region"] == "us-central1"
    assert t.sdk_options["output"] == "gs://my-corpora/en-v1"
    assert 0 < t.job_bytes < 10 * 1024 * 1024


def test_translation_catches_unpicklable_closures_and_stray_modules():
    import threading

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

    from deploy.dataflow.dryrun import translate_pipeline

    def pipeline(fn):
        opts = PipelineOptions(["--project", "my-project", "--region", "us-central1", "--temp_location",
                                "gs://my-bucket/tmp", "--sdk_container_image", IMAGE, "--sdk_location", "container",
                                "--dry_run=True"])
        runner = DataflowRunner()
        p = beam.Pipeline(runner=runner, options=opts)
        _ = p | beam.Create([1, 2]) | beam.Map(fn)
        return translate_pipeline(p, opts, runner)

    lock = threading.Lock()
    with pytest.raises(Exception, match="pickle|lock"):
        pipeline(lambda x: (lock, x))
    # A function of this test module would need the tests on the workers.
    with pytest.raises(ValueError, match="must not need"):
        pipeline(dockerfile_instructions)
    assert pipeline(os.path.basename).pickled_fns >= 1


def test_translation_leaves_no_temp_folders(tmp_path, monkeypatch):
    """Each Pipeline makes a temp folder only run() removes, and staging one more: the check removes them."""
    import tempfile

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

    from deploy.dataflow.dryrun import translate_pipeline

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for image in (IMAGE, None):  # a translation, and one refused
        flags = ["--project", "my-project", "--region", "us-central1", "--temp_location", "gs://my-bucket/tmp",
                 "--sdk_location", "container", "--dry_run=True"]
        opts = PipelineOptions(flags + (["--sdk_container_image", image] if image else []))
        runner = DataflowRunner()
        p = beam.Pipeline(runner=runner, options=opts)
        _ = p | beam.Create([1, 2]) | beam.Map(os.path.basename)
        assert os.path.isdir(p.local_tempdir)
        if image:
            assert translate_pipeline(p, opts, runner).pickled_fns >= 1
        else:
            with pytest.raises(ValueError, match="sdk_container_image"):
                translate_pipeline(p, opts, runner)
        # Beam's requirements cache is meant to persist (its staging reuses it); nothing else may.
        assert [n for n in os.listdir(tmp_path) if n != "beam-requirements-cache"] == []


def test_translation_requires_worker_image_and_valid_locations(demo_corpus):
    from deploy.dataflow.dryrun import translate
    from schemas.errors import UserError

    env = dataflow_env(f"ccnews={demo_corpus['ccnews']}")
    args = script_lines(["bash", "deploy/dataflow/dataflow.sh", "print"], env)
    i = args.index("--sdk_container_image")
    with pytest.raises(ValueError, match="sdk_container_image"):
        translate(args[:i] + args[i + 2:])
    bad = script_lines(["bash", "deploy/dataflow/dataflow.sh", "print"], {**env, "BUCKET": "b"})
    with pytest.raises(UserError, match="temp_location"):
        translate(bad)


# ------------------------------------------------------------------ Dataflow from a machine without GCP access

# Runs a module as `python -m` would, with an audit hook that reports every attempt to
# resolve or connect to a host other than loopback: proof that a command touched no network.
NETGUARD = """
import ipaddress, runpy, sys
def loopback(h):
    if h in (None, "localhost", b"localhost"):
        return True
    try:
        return ipaddress.ip_address(h.decode() if isinstance(h, bytes) else h).is_loopback
    except ValueError:
        return False
def hook(event, args):
    if event == "socket.getaddrinfo" and not loopback(args[0]):
        sys.stderr.write(f"NETWORK getaddrinfo {args[0]}\\n")
    elif event == "socket.connect" and isinstance(args[1], tuple) and not loopback(args[1][0]):
        sys.stderr.write(f"NETWORK connect {args[1]}\\n")
sys.addaudithook(hook)
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""
# Beam prints this at import on every command (the CLI's business): not ours to count.
BEAM_IMPORT_NOISE = "WARNING:root:apitools not found"


def run_offline(module: str, args: list[str], timeout: float) -> tuple[subprocess.CompletedProcess, float, list[str]]:
    """Run `python -m module args` as a user without GCP access would: no emulator in the environment.

    Returns the process, its wall time, and its stderr lines (Beam's import
    warning left out); fails if the command tried to reach any host but loopback.
    """
    import time

    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_EMULATOR_HOST", "FSSPEC_GS_TOKEN")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", NETGUARD, module, *args], env=env, capture_output=True,
                         text=True, cwd=ROOT, timeout=timeout)
    wall = time.monotonic() - t0
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith(BEAM_IMPORT_NOISE)]
    assert not [ln for ln in lines if ln.startswith("NETWORK")], lines
    return res, wall, lines


DATAFLOW_FLAGS = ["--runner", "DataflowRunner", "--project", "my-project", "--region", "us-central1",
                  "--temp_location", "gs://my-bucket/beam/tmp"]


def test_dataflow_run_without_gcp_extra_fails_at_once_in_one_line(demo_corpus):
    from pipelines.options import DATAFLOW_INSTALL, DATAFLOW_MODULES, missing_modules

    # The test environment deliberately lacks apache-beam[gcp] (ENVIRONMENT.md: its auth stack
    # retries for credentials on every offline gs:// access); this is the user's situation.
    assert missing_modules(DATAFLOW_MODULES), "apache-beam[gcp] is installed in the test environment"
    # Before: 4 m 36 s of GCS retries, then a 45-line traceback. A 60 s limit proves the difference.
    res, wall, lines = run_offline("pipelines.build", [
        "--input", f"ccnews={demo_corpus['ccnews']}", "--output", "gs://my-corpora/en-v1", *DATAFLOW_FLAGS],
        timeout=60)
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1, lines
    assert "apache-beam[gcp]" in lines[0] and DATAFLOW_INSTALL in lines[0], lines
    assert f"--input ccnews={demo_corpus['ccnews']}" in lines[0], lines  # and, at once, the local input
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert wall < 30, wall
    # The install line the error gives is the README's.
    assert DATAFLOW_INSTALL in (ROOT / "README.md").read_text()
    # The extra the message names exists, at the Beam version the job is built with.
    extra = pyproject()["optional-dependencies"]["dataflow"]
    assert extra == [f"apache-beam[gcp]=={pin_of(pyproject()['optional-dependencies']['pipelines'], 'apache-beam')}"]


@pytest.mark.parametrize("entry", [["-m", "pipelines.build", "--input", "x.jsonl", "--output", "o"],
                                   ["-m", "pipelines.repack", "--tokenized", "c", "--output", "o"],
                                   ["-m", "pipelines.serve", "--watch", "x", "--corpus", "c"],
                                   ["-m", "shardforge.cli", "build", "--input", "x.jsonl", "--output", "o"]],
                         ids=["build", "repack", "serve", "shardforge-build"])
def test_every_dataflow_problem_is_reported_at_once_before_any_work(entry):
    """The client missing, local paths the workers cannot reach and Beam's option checks, in one line,
    from each entry point, before anything is read or written (pipelines/localrunner/preflight.py)."""
    import time

    from pipelines.options import DATAFLOW_INSTALL

    code = ("import runpy, sys\n"
            f"sys.argv = ['x', *{entry[2:]!r}, '--runner=DataflowRunner', '--project', 'p']\n"
            "try:\n"
            f"    runpy.run_module({entry[1]!r}, run_name='__main__', alter_sys=True)\n"
            "except SystemExit as e:\n"
            "    print('exit', e.code)\n")
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.monotonic() - start
    assert res.stdout.strip() == "exit 2", res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and DATAFLOW_INSTALL in lines[0], lines
    local = [f"{a} {entry[i + 1]}" for i, a in enumerate(entry) if a.startswith("--")]
    assert all(x in lines[0] for x in local), (local, lines)
    assert "Missing required option: region." in lines[0] and "--temp_location" in lines[0], lines
    assert wall < 20, wall


def test_dataflow_option_mistakes_are_one_line(demo_corpus, capsys):
    import time

    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.jobs.build import main as build_main
    from pipelines.options import check_runner_ready, dataflow_option_errors
    from schemas.errors import UserError

    # The build's main() as the CLI runs it once the client check (pipelines/localrunner/preflight.py, which needs
    # the [dataflow] extra this environment lacks) has passed: Beam's option checks, offline.
    for flags, expect in [(["--project", "p"], "Invalid Project ID (p)"),
                          (["--temp_location", "gs://b/tmp"], "Invalid GCS bucket (gs://b/tmp)")]:
        argv = list(DATAFLOW_FLAGS)
        argv[argv.index(flags[0]) + 1] = flags[1]
        start = time.monotonic()
        rc = build_main(["--input", demo_corpus["ccnews"], "--output", "gs://my-corpora/en-v1", *argv])
        wall = time.monotonic() - start
        lines = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(lines) == 1, (flags, lines)
        assert lines[0].startswith("error: invalid Dataflow options: ") and expect in lines[0], lines
        assert wall < 30, wall
    # Beam's other Dataflow checks, offline and without Beam creating a default bucket.
    ok = PipelineOptions(DATAFLOW_FLAGS[2:])
    assert dataflow_option_errors(ok) == []
    assert dataflow_option_errors(PipelineOptions(["--project", "my-project", "--temp_location",
                                                   "gs://my-bucket/t"])) == ["Missing required option: region."]
    assert "required" in dataflow_option_errors(PipelineOptions(["--project", "my-project", "--region", "r"]))[0]
    bad_job = PipelineOptions([*DATAFLOW_FLAGS, "--job_name", "Bad_Name"])
    with pytest.raises(UserError, match="Invalid job_name"):
        check_runner_ready(bad_job)
    check_runner_ready(PipelineOptions(["--runner", "FnApiRunner", "--project", "p"]))  # not Dataflow: no check


def test_offline_check_translates_gs_inputs_without_network():
    args = [*DATAFLOW_FLAGS, "--sdk_container_image", IMAGE, "--sdk_location", "container",
            "--input", "ccnews=gs://my-raw/ccnews/*.jsonl.gz", "--output", "gs://my-corpora/en-v1"]
    # Before: the glob was listed at construction: 3 m 44 s of retries, then a DNS error.
    res, wall, lines = run_offline("deploy.dataflow.dryrun", args, timeout=120)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["images"] == [IMAGE] and summary["pickled_fns"] > 20 and lines == []
    assert wall < 90, wall
    # What constructing the build would read remotely is refused in one line, not fetched.
    for extra, name in [(["--config", "gs://my-bucket/build.yaml"], "--config"),
                        (["--tokenizer", "gs://my-bucket/spm.model"], "tokenizer.model_url"),
                        (["--dedupe_index", "s3://my-bucket/index"], "dedupe.index")]:
        res, wall, lines = run_offline("deploy.dataflow.dryrun", [*args, *extra], timeout=60)
        assert res.returncode == 2 and len(lines) == 1, (extra, res.stderr)
        assert name in lines[0] and "offline" in lines[0], lines
        assert wall < 30, wall


def test_dataflow_dockerfile():
    instrs = dockerfile_instructions(DEPLOY / "dataflow" / "Dockerfile")
    stage = final_stage(instrs)
    images = base_images(instrs)
    beam_version = pin_of(pyproject()["optional-dependencies"]["pipelines"], "apache-beam")
    # Beam's boot binary comes from the Beam image of the pinned version; Python is the lock's minor.
    assert images["beam"] == f"apache/beam_python3.11_sdk:{beam_version}"
    assert images[""].startswith(f"python:{lock_python()}.") and "-slim" in images[""], images
    import apache_beam

    assert apache_beam.__version__ == beam_version
    assert any(a.startswith("--from=beam") and "/opt/apache/beam" in a for k, a in stage if k == "COPY")
    runs = " ".join(a for k, a in stage if k == "RUN")
    assert "requirements.py pipelines dataflow" in runs
    assert "trainer" not in runs.replace("torch must not", "") and "pip install torch" not in runs
    copies = [a.split()[0] for k, a in stage if k == "COPY" and not a.startswith("--from")]
    assert "trainer/" not in copies and "shardforge/" in copies and "schemas/" in copies and "pipelines/" in copies
    assert json.loads(dict(stage)["ENTRYPOINT"]) == ["/opt/apache/beam/boot"]
    env = dict(a.split("=", 1) for k, a in stage if k == "ENV" and "=" in a and " " not in a.split("=", 1)[0])
    py_file = env["FLEX_TEMPLATE_PYTHON_PY_FILE"]
    copied = {f"/opt/shardforge/{a.split()[1]}": a.split()[0] for k, a in stage if k == "COPY" and "deploy/" in a}
    assert copied[py_file] == "deploy/dataflow/main.py" and (ROOT / copied[py_file]).exists()
    assert any(a.startswith("--from=launcher") and "python_template_launcher" in a for k, a in stage if k == "COPY")
    ignored = (DEPLOY / "dataflow" / "Dockerfile.dockerignore").read_text().split()
    assert "trainer" in ignored and ".venv" in ignored and "constraints.txt" not in ignored
    check_image_hygiene(DEPLOY / "dataflow" / "Dockerfile", ["pipelines", "dataflow"])


def test_flex_template_metadata_matches_build_options(demo_corpus):
    from deploy.dataflow.dryrun import unknown_flags
    from deploy.dataflow.main import make_pipeline
    from pipelines.options import remove_temp_folder
    from schemas.config import PackingRule, SourceFormat

    meta = json.loads((DEPLOY / "dataflow" / "metadata.json").read_text())
    params = {p["name"]: p for p in meta["parameters"]}
    assert len(params) == len(meta["parameters"])
    assert not params["output"]["isOptional"] and not params["sdk_container_image"]["isOptional"]
    for name, p in params.items():
        assert p["label"] and p["helpText"], name
        # a sample value the parameter's own regexes accept, parsed by the real option types
        samples = ["1", "0.5", "sop", "auto", "container", "gs://b/c/x.yaml", "ccnews=gs://b/*.jsonl"]
        value = next(v for v in samples if all(re.match(rx, v) for rx in p.get("regexes", [])))
        assert unknown_flags([f"--{name}={value}"]) == [], name
    assert params["rule"]["regexes"] == [f"^({'|'.join(get_args(PackingRule))})$"]
    assert params["format"]["regexes"] == [f"^({'|'.join(get_args(SourceFormat))})$"]
    assert re.match(params["output"]["regexes"][0], "gs://my-corpora/en-v1")
    assert re.match(params["input"]["regexes"][0], "ccnews=gs://raw/cc/*.jsonl.gz")
    # The launcher passes parameters as --name=value: they must build the same config.
    p, cfg, out, _ = make_pipeline([f"--input=ccnews={demo_corpus['ccnews']}", "--output=/tmp/unused-corpus",
                                    "--rule=sop", "--max_seq_len=256", "--runner=FnApiRunner"])
    remove_temp_folder(p)  # only run() removes it, and this pipeline is never run
    assert cfg.packing.rule == "sop" and cfg.packing.max_seq_len == 256 and cfg.sources[0].name == "ccnews"
    # A batched build is a local driver's loop, not one job: refused with one line.
    from schemas.errors import UserError

    with pytest.raises(UserError, match="batch_mb"):
        make_pipeline([f"--input={demo_corpus['ccnews']}", "--output=/tmp/unused-corpus", "--batch_mb=64"])


# ------------------------------------------------------------------ trainer: image, launcher, Kubernetes

def test_trainer_dockerfile():
    instrs = dockerfile_instructions(DEPLOY / "trainer" / "Dockerfile")
    args = dockerfile_args(instrs)
    base = base_images(instrs)[""]
    assert base.startswith(f"python:{lock_python()}.") and "-slim" in base, base
    torch_pin = pin_of(pyproject()["optional-dependencies"]["trainer"], "torch")
    assert args["TORCH_VERSION"] == torch_pin == constraints()["torch"]
    runs = [a for k, a in instrs if k == "RUN"]
    torch_run = next(i for i, a in enumerate(runs) if "torch==${TORCH_VERSION}" in a)
    extra_run = next(i for i, a in enumerate(runs) if "requirements.py trainer" in a)
    assert torch_run < extra_run, "CUDA torch must be installed before the extra (which pins torch)"
    assert "--index-url" in runs[torch_run] and "cu" in args["TORCH_INDEX_URL"].rsplit("/", 1)[-1]
    assert "-c constraints.txt" in runs[torch_run]
    text = " ".join(runs)
    assert "pipelines" not in text and "apache-beam" not in text and "dataflow" not in text
    copies = [a.split()[0] for k, a in instrs if k == "COPY"]
    assert "pipelines/" not in copies and "trainer/" in copies
    entry = json.loads(dict(instrs)["ENTRYPOINT"])
    assert entry == ["bash", "/opt/shardforge/deploy/trainer/launch.sh"]
    assert any(a.split() == ["deploy/trainer/launch.sh", "deploy/trainer/launch.sh"] for k, a in instrs if k == "COPY")
    ignored = (DEPLOY / "trainer" / "Dockerfile.dockerignore").read_text().split()
    assert "pipelines" in ignored and "constraints.txt" not in ignored
    check_image_hygiene(DEPLOY / "trainer" / "Dockerfile", ["trainer"])


# ------------------------------------------------------------------ one set of versions: constraints.txt

def test_constraints_pin_every_requirement_of_every_extra():
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    from deploy.requirements import requirements

    pins = constraints()
    text = (ROOT / "constraints.txt").read_text()
    assert "bash scripts/lock.sh" in text  # the regeneration command is in the file itself
    extras = sorted(pyproject()["optional-dependencies"])
    assert {"pipelines", "trainer", "dev", "dataflow"} <= set(extras)
    for r in requirements(extras):
        req = Requirement(r)
        name = str(canonicalize_name(req.name))
        assert name in pins, f"{r} is not in constraints.txt: run bash scripts/lock.sh"
        assert req.specifier.contains(Version(pins[name]), prereleases=True), (r, pins[name])
    # DataflowRunner's client ([dataflow] = apache-beam[gcp]) is locked too, not only its name.
    assert {"google-cloud-dataflow-client", "google-cloud-storage", "google-auth"} <= set(pins)
    # torch without a local label, so the GPU image's 2.13.0+cu128 satisfies the same pin as CPU's +cpu.
    assert "+" not in pins["torch"]
    assert re.fullmatch(r"\d+\.\d+", lock_python())


def test_test_environment_is_the_locked_one():
    """The tests run on the versions the images and scripts/setup.sh install (else: run scripts/lock.sh)."""
    import importlib.metadata as md

    from packaging.utils import canonicalize_name

    pins = constraints()
    differ = {}
    for dist in md.distributions():
        # Importing setuptools (torch's cpp_extension does) puts its _vendor folder on sys.path:
        # its private copies (platformdirs, zipp, wheel...) are not installed packages.
        if "_vendor" in Path(str(getattr(dist, "_path", ""))).parts:
            continue
        name = str(canonicalize_name(dist.metadata["Name"]))
        if name in pins and name != "shardforge" and dist.version.split("+")[0] != pins[name]:
            differ[name] = (dist.version, pins[name])
    assert not differ, f"installed != constraints.txt (installed, locked): {differ}"


def test_a_bare_pytest_from_another_folder_finds_the_tests_helpers(tmp_path):
    """`pytest FILE` (the console script, not `python -m pytest`) run outside the repository: a test that
    imports its helpers as `tests.*` still finds them (the pytest config puts the root on sys.path)."""
    test = "tests/test_minhash.py::test_fast_normalization_equals_its_definition"  # imports tests.prose
    res = subprocess.run([str(Path(sys.executable).with_name("pytest")), "-q", "-p", "no:cacheprovider",
                          str(ROOT / test)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert res.returncode == 0 and "1 passed" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]


def test_setup_script_installs_from_the_constraints():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    installs = [ln for ln in setup.splitlines() if "pip install" in ln and not ln.lstrip().startswith("#")]
    assert len(installs) >= 3, installs
    assert all("-c constraints.txt" in ln for ln in installs), installs
    # torch first, at the lock's pin; then the extras the tests need. Never [dataflow] (its auth
    # stack makes every offline gs:// access retry for credentials).
    torch_line = next(i for i, ln in enumerate(installs) if "torch_pin" in ln)
    extras_line = next(i for i, ln in enumerate(installs) if '-e ".[' in ln)
    assert torch_line < extras_line
    assert "grep -m1 -E '^torch==' constraints.txt" in setup
    assert '".[pipelines,trainer,dev]"' in installs[extras_line] and "dataflow" not in installs[extras_line]
    # The reinstall stamp changes when either file does.
    stamp = next(ln for ln in setup.splitlines() if ln.startswith("want="))
    assert "pyproject.toml" in stamp and "constraints.txt" in stamp
    # The lock script resolves exactly the extras the images and setup.sh use, and pins torch without label.
    lock = (ROOT / "scripts" / "lock.sh").read_text()
    assert '".[pipelines,trainer,dev,dataflow]"' in lock and "freeze --all" in lock and "+.*/\\1/" in lock


def test_kubernetes_runs_the_image_user():
    docs = k8s_docs()
    c = docs["Job"]["spec"]["template"]["spec"]["containers"][0]
    instrs = final_stage(dockerfile_instructions(DEPLOY / "trainer" / "Dockerfile"))
    uid, _, gid = [a for k, a in instrs if k == "USER"][-1].partition(":")
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
    assert (sc["runAsUser"], sc["runAsGroup"]) == (int(uid), int(gid))


def test_kubernetes_manifest_structure():
    docs = k8s_docs()
    assert set(docs) == {"ConfigMap", "Service", "Job"}
    job, svc = docs["Job"], docs["Service"]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = container_env(docs)
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == int(env["NNODES"])
    assert svc["spec"]["clusterIP"] == "None" and pod["subdomain"] == svc["metadata"]["name"]
    assert svc["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert env["MASTER_ADDR"] == f"{job['metadata']['name']}-0.{svc['metadata']['name']}"
    assert int(env["MASTER_PORT"]) == svc["spec"]["ports"][0]["port"]
    assert c["image"] and ":" in c["image"]
    assert int(c["resources"]["limits"]["nvidia.com/gpu"]) == int(env["NPROC_PER_NODE"])
    assert env["DATA_URL"].startswith("gs://") and env["OUTPUT_URL"].startswith("gs://")
    entry = json.loads(dict(dockerfile_instructions(DEPLOY / "trainer" / "Dockerfile"))["ENTRYPOINT"])
    assert c["command"] == entry
    assert any(m["mountPath"] == "/dev/shm" for m in c["volumeMounts"])


def test_manifest_launch_command_matches_torchrun_and_trainer(trainer_flags):
    from torch.distributed.run import get_args_parser

    docs = k8s_docs()
    env = container_env(docs)
    c = docs["Job"]["spec"]["template"]["spec"]["containers"][0]
    # Kubernetes sets JOB_COMPLETION_INDEX in each pod of an Indexed Job.
    # The image's WORKDIR /opt/shardforge holds the repository's files.
    command = [a.replace("/opt/shardforge/", f"{ROOT}/") for a in c["command"]]
    cmd = script_lines([*command, *c["args"]], {**env, "JOB_COMPLETION_INDEX": "1", "LAUNCH_PRINT_ONLY": "1"})
    assert cmd[0] == "torchrun"
    ta = get_args_parser().parse_args(cmd[1:])
    assert (ta.nnodes, ta.node_rank, ta.nproc_per_node) == (env["NNODES"], 1, env["NPROC_PER_NODE"])
    assert (ta.master_addr, ta.master_port) == (env["MASTER_ADDR"], int(env["MASTER_PORT"]))
    assert ta.module and ta.training_script == "trainer.train"
    cfg = check_trainer_args(ta.training_script_args, trainer_flags)
    assert cfg.data == env["DATA_URL"] and cfg.output == env["OUTPUT_URL"]
    assert cfg.model.size == "base" and cfg.steps == 125000
    with pytest.raises(AssertionError, match="not an option"):
        check_trainer_args([*ta.training_script_args, "--learning_rte", "1e-4"], trainer_flags)


def test_launcher_single_node_defaults_and_required_urls(trainer_flags):
    from torch.distributed.run import get_args_parser

    base = {"DATA_URL": "gs://b/corpora/en-v1", "OUTPUT_URL": "gs://b/runs/r1", "LAUNCH_PRINT_ONLY": "1",
            "CONFIG_URL": "gs://b/train.yaml"}
    clean = {k: "" for k in ("NNODES", "NODE_RANK", "JOB_COMPLETION_INDEX", "MASTER_ADDR", "MASTER_PORT")}
    env = {k: v for k, v in os.environ.items() if k not in clean}
    res = subprocess.run(["bash", "deploy/trainer/launch.sh", "--steps", "10"], env={**env, **base,
                         "NPROC_PER_NODE": "4"}, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    ta = get_args_parser().parse_args(res.stdout.splitlines()[1:])
    assert (ta.nnodes, ta.node_rank, ta.nproc_per_node, ta.master_addr) == ("1", 0, "4", "127.0.0.1")
    rest = ta.training_script_args
    assert rest[rest.index("--config") + 1] == "gs://b/train.yaml"
    assert all(a in trainer_flags for a in rest[::2])
    missing = subprocess.run(["bash", "deploy/trainer/launch.sh"], env={**env, "LAUNCH_PRINT_ONLY": "1"},
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert missing.returncode != 0 and "DATA_URL" in missing.stderr


def test_launcher_exits_143_when_terminated_and_passes_torchrun_status_on(tmp_path):
    """torchrun exits 1 after a SIGTERM its workers ended with 143: the launcher (the container's main
    process) forwards the signal, waits for torchrun, and exits 143 so the Job sees a preemption."""
    import signal
    import time

    fake = tmp_path / "torchrun"  # stands in for torchrun: on SIGTERM its workers checkpoint, then it exits 1
    fake.write_text("#!/usr/bin/env bash\ntrap 'sleep 0.5; echo got-term >&2; exit 1' TERM\n"
                    "for i in $(seq 300); do sleep 0.1; done\nexit ${FAKE_RC:-0}\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "DATA_URL": "x", "OUTPUT_URL": "y",
           "NPROC_PER_NODE": "1", "FAKE_RC": "3"}
    env.pop("LAUNCH_PRINT_ONLY", None)
    p = subprocess.Popen(["bash", "deploy/trainer/launch.sh"], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 143 and "got-term" in err and "torchrun ended with status 1; exiting 143" in err, err
    env["FAKE_RC"], fake_quick = "3", fake.read_text().replace("seq 300", "seq 1")
    fake.write_text(fake_quick)
    done = subprocess.run(["bash", "deploy/trainer/launch.sh"], env=env, cwd=ROOT, capture_output=True, timeout=30)
    assert done.returncode == 3


def test_deploy_scripts_pass_bash_syntax_check():
    scripts = sorted(glob.glob(str(DEPLOY / "**" / "*.sh"), recursive=True) + glob.glob(str(ROOT / "scripts" / "*.sh")))
    assert any(s.endswith("lock.sh") for s in scripts)
    for script in scripts:
        res = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
        assert res.returncode == 0, (script, res.stderr)


# ------------------------------------------------------------------ Flink (deploy/flink/)

def flink_docs() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((DEPLOY / "flink" / "flink.yaml").read_text()))


def test_flink_cluster_runs_the_versions_beam_supports_and_our_worker_image_beside_each_taskmanager():
    from apache_beam.options.pipeline_options import FlinkRunnerOptions

    beam = pin_of(pyproject()["optional-dependencies"]["pipelines"], "apache-beam")
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in flink_docs() if d["kind"] == "Deployment"}
    images = {c["name"]: c["image"] for spec in pods.values() for c in spec["containers"]}
    # Flink at a version Beam's FlinkRunner supports; the job server for that Flink at our Beam version.
    flink = re.fullmatch(r"flink:(\d+\.\d+)\.\d+-scala_2\.12-java17", images["jobmanager"])
    assert flink and images["taskmanager"] == images["jobmanager"], images
    assert flink.group(1) in FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS
    assert images["job-server"] == f"apache/beam_flink{flink.group(1)}_job_server:{beam}"
    assert "--flink-master=flink-jobmanager:8081" in pods["beam-job-server"]["containers"][0]["args"]
    # Every TaskManager pod has a worker pool from our worker image (the launcher fills in IMAGE) on port 50000.
    pool = next(c for c in pods["flink-taskmanager"]["containers"] if c["name"] == "beam-worker-pool")
    assert pool["image"] == "IMAGE" and pool["args"] == ["--worker_pool"]
    assert [p["containerPort"] for p in pool["ports"]] == [50000]
    env = {e["name"]: e.get("value") for e in pool["env"]}
    assert env["FSSPEC_S3_ENDPOINT_URL"] == "http://minio:9000" and {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(env)
    assert any(d["kind"] == "Service" and d["metadata"]["name"] == "minio" for d in flink_docs())
    for image in images.values():  # release tags, never latest
        assert image == "IMAGE" or (":" in image and not image.endswith(":latest")), image


def test_flink_launcher_command_runs_the_distributed_graph_and_passes_every_runner_check():
    import socket

    from pipelines.localrunner.preflight import runner_problems
    from pipelines.options import BuildOptions, RunnerPlan, check_beam_args, finalize_options

    with socket.socket() as server:  # a job server's port that answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        env = {"OUTPUT": "s3://corpora/en-v1", "INPUT": "ccnews=s3://raw/ccnews/*.jsonl.gz",
               "JOB_ENDPOINT": f"localhost:{server.getsockname()[1]}", "TASKMANAGERS": "3"}
        args = script_lines(["bash", "deploy/flink/flink.sh", "print", "--rule", "sop"], env)
        assert runner_problems(args) == []
    for flag, value in [("--runner", "FlinkRunner"), ("--environment_type", "EXTERNAL"),
                        ("--environment_config", "localhost:50000"), ("--parallelism", "6"),
                        ("--sdk_worker_parallelism", "2"), ("--sdk_location", "container")]:
        assert args[args.index(flag) + 1] == value, flag
    version = re.search(r"beam_flink(\d+\.\d+)_job_server", (DEPLOY / "flink" / "flink.yaml").read_text()).group(1)
    assert args[args.index("--flink_version") + 1] == version
    check_beam_args(args)  # every flag known
    plan = RunnerPlan.of(finalize_options(BuildOptions(args)))
    assert plan.spread_documents and not plan.one_machine  # the graph test_portable.py runs
    assert runner_problems(args) != []  # the job server gone: one line before any work
