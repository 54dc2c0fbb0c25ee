"""Credentials are never printed or stored, and a refused credential is one line.

A corpus and an input behind a web server with HTTP Basic auth (tests/httpserver.py on 127.0.0.1),
reached with ``http://alice:PASSWORD@…`` URLs, while the environment holds other credentials: the
build, inspect, validate, status, training, --print-config, export and evaluate run through their real CLIs,
and neither what they print nor any file they write (corpus, report, rejects, intermediates,
checkpoints, metrics, TensorBoard events, the export and its model card) holds a credential, plain
or as the Basic auth header encodes it. A wrong password (401) or a refusal (403) is one line.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from forkserver import run_python
from httpserver import FileServer
from test_serve import articles, small_config

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "Pa55-w0rd-7fQ"
ENV_SECRETS = {"AWS_ACCESS_KEY_ID": "envKEYID-9xQ", "AWS_SECRET_ACCESS_KEY": "envSECRET-4kZ",
               "WANDB_API_KEY": "wandbKEY-3pL", "HF_TOKEN": "hf_envTOKEN2mN"}
SECRETS = [PASSWORD, base64.b64encode(f"alice:{PASSWORD}".encode()).decode(), *ENV_SECRETS.values()]
TRAIN = ["--steps", "2", "--batch_size", "4", "--device", "cpu", "--set", "model.size=tiny",
         "--set", "model.dropout=0.0", "--set", "shuffle_buffer=8"]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **ENV_SECRETS)
    return run_python(args, env=env, capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.fixture
def served(tmp_path) -> Path:
    """tmp_path/site: a raw JSONL input and (later) the corpus, for the server to serve."""
    site = tmp_path / "site"
    (site / "raw").mkdir(parents=True)
    # ... with a record that is rejected: the reject log names its file
    (site / "raw" / "f0.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in articles(100, 24))
                                           + "{not json\n")
    (tmp_path / "config.json").write_text(json.dumps(small_config()))
    return site


def test_no_credential_is_printed_or_stored_by_any_command(served, tmp_path) -> None:
    outputs: dict[str, subprocess.CompletedProcess] = {}
    with FileServer(served, user="alice", password=PASSWORD) as server:
        outputs["build"] = run("-m", "pipelines.build", "--input", f"news={server.url('raw/f0.jsonl')}",
                               "--output", str(served / "corpus"), "--config", str(tmp_path / "config.json"),
                               cwd=tmp_path)
        corpus = server.url("corpus")
        for tool in (["inspect"], ["inspect", "--json"], ["validate", "--no-progress"], ["status"]):
            outputs[" ".join(tool)] = run("-m", "shardforge.cli", tool[0], corpus, *tool[1:], cwd=tmp_path)
        outputs["print-config"] = run("-m", "trainer.train", "--data", corpus, "--print-config", cwd=tmp_path)
        outputs["train"] = run("-m", "trainer.train", "--data", corpus, "--output", str(tmp_path / "run"), *TRAIN,
                               cwd=tmp_path)
        tokenizer = json.loads((served / "corpus" / "manifest.json").read_text())["tokenizer"]["path"]
        # A checkpoint records its corpus without credentials: without --tokenizer, export says so.
        outputs["export, corpus refused"] = run("-m", "shardforge.cli", "export", str(tmp_path / "run"),
                                                str(tmp_path / "no-hf"), cwd=tmp_path)
        outputs["export"] = run("-m", "shardforge.cli", "export", str(tmp_path / "run"), str(tmp_path / "hf"),
                                "--tokenizer", server.url(f"corpus/{tokenizer}"), cwd=tmp_path)
        # evaluate: the same without --data; with it (the URL with its credentials), its figures.
        outputs["evaluate, corpus refused"] = run("-m", "shardforge.cli", "evaluate", str(tmp_path / "run"),
                                                  "--device", "cpu", cwd=tmp_path)
        outputs["evaluate"] = run("-m", "shardforge.cli", "evaluate", str(tmp_path / "run"), "--data", corpus,
                                  "--batches", "1", "--device", "cpu", "--json", cwd=tmp_path)
    refused = outputs.pop("export, corpus refused")
    eval_refused = outputs.pop("evaluate, corpus refused")
    assert eval_refused.returncode == 2 and "answered 401 Unauthorized" in eval_refused.stderr and \
        "give --data CORPUS" in eval_refused.stderr, eval_refused.stderr
    assert json.loads(outputs["evaluate"].stdout)["eval_mlm_tokens"] > 0
    assert refused.returncode == 2 and "answered 401 Unauthorized" in refused.stderr and \
        "pass --tokenizer URL" in refused.stderr, refused.stderr
    for name, res in outputs.items():
        assert res.returncode == 0, (name, res.stderr[-2000:])
    assert "127.0.0.1" in outputs["inspect"].stdout and json.loads(outputs["inspect --json"].stdout)["url"] == \
        server.url("corpus", user="", password="").replace("http://:@", "http://")
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name not in ("f0.jsonl", "config.json")]
    assert any(p.suffix == ".pt" for p in files) and any("tfevents" in p.name for p in files)
    assert any(p.name == "README.md" for p in files) and any(p.name == "manifest.json" for p in files)
    rejects = [p for p in files if "rejects" in p.parts]
    assert rejects and any(b"127.0.0.1" in p.read_bytes() for p in rejects)  # the URL is there, redacted
    for secret in SECRETS:
        for name, res in [*outputs.items(), ("refused export", refused), ("refused evaluate", eval_refused)]:
            assert secret not in res.stdout + res.stderr, (secret, name)
        for p in files:
            assert secret.encode() not in p.read_bytes(), (secret, p)


def test_a_refused_credential_is_one_line(served, tmp_path) -> None:
    """401 (a wrong password) on an input file and on a corpus, 403 (refused) on an input glob: one
    line each, exit 2, no traceback (aiohttp's, whose request headers hold the Authorization header)."""
    cases = []
    with FileServer(served, user="alice", password=PASSWORD) as server:
        wrong = {"password": "Wr0ng-pw-x"}
        cases += [("401", run("-m", "pipelines.build", "--input", f"news={server.url('raw/f0.jsonl', **wrong)}",
                              "--output", str(tmp_path / "out"), cwd=tmp_path)),
                  ("401", run("-m", "shardforge.cli", "inspect", server.url("corpus", **wrong), cwd=tmp_path))]
    with FileServer(served, user="alice", password=PASSWORD, forbid=True) as server:  # a glob, listed
        cases += [("403", run("-m", "pipelines.build", "--input", f"news={server.url('raw/*.jsonl')}",
                              "--output", str(tmp_path / "out"), cwd=tmp_path))]
    for status, res in cases:
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        (line,) = [x for x in res.stderr.splitlines() if x.startswith("error:")]
        assert f"answered {status} {'Unauthorized' if status == '401' else 'Forbidden'}" in line, line
        assert "http://127.0.0.1:" in line and "@" not in line.split(" answered")[0], line
    assert not (tmp_path / "out").exists()


def test_missing_s3_credentials_are_one_line(s3_emulator, s3_bucket, tmp_path) -> None:
    """No AWS credentials anywhere (environment, empty config files, no metadata server), or only a key
    id: inspect, train and a build that writes to S3 each say so in one line naming the URL and where
    credentials come from, exit 2, no botocore traceback, the key id given not printed."""
    empty = tmp_path / "empty"
    empty.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") or k == "AWS_DEFAULT_REGION"}
    env.update(PYTHONPATH=str(ROOT), FSSPEC_S3_ENDPOINT_URL=s3_emulator, AWS_EC2_METADATA_DISABLED="true",
               AWS_CONFIG_FILE=str(empty), AWS_SHARED_CREDENTIALS_FILE=str(empty))
    (tmp_path / "raw.jsonl").write_text(json.dumps({"text": "a line of text"}) + "\n")
    cases = {"inspect": (["-m", "shardforge.cli", "inspect", f"{s3_bucket}/corpus"], env),
             "train": (["-m", "trainer.train", "--data", f"{s3_bucket}/corpus", "--steps", "1"], env),
             "build": (["-m", "pipelines.build", "--input", "raw.jsonl", "--output", f"{s3_bucket}/out"], env),
             "partial": (["-m", "shardforge.cli", "inspect", f"{s3_bucket}/corpus"],
                         dict(env, AWS_ACCESS_KEY_ID=ENV_SECRETS["AWS_ACCESS_KEY_ID"]))}
    for name, (args, case_env) in cases.items():
        res = subprocess.run([sys.executable, *args], env=case_env, capture_output=True, text=True, cwd=tmp_path,
                             timeout=300)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (name, res.stderr[-3000:])
        (line,) = [x for x in res.stderr.splitlines() if x.startswith("error:")]
        assert line.startswith(f"error: no AWS credentials for {s3_bucket}/"), (name, line)
        assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE" in line and "instance role" in line
        assert ENV_SECRETS["AWS_ACCESS_KEY_ID"] not in res.stdout + res.stderr, name
        if name == "partial":
            assert "missing: AWS_SECRET_ACCESS_KEY" in line, line


def test_missing_s3_credentials_re_raised_as_text_are_one_line() -> None:
    """A runner that re-raised botocore's error kept only its text: still the one line."""
    from shardforge.console.run import one_line_error

    err = RuntimeError("botocore.exceptions.NoCredentialsError: Unable to locate credentials [while running 'Read']")
    assert str(one_line_error(err)).startswith("no AWS credentials for an s3:// URL (Unable to locate credentials): ")
    assert one_line_error(RuntimeError("Unable to locate credentials")) is None


@pytest.mark.parametrize("command", ["pipelines.build", "trainer.train", "shardforge build", "shardforge train"])
def test_credentials_in_a_config_files_url_are_refused_as_on_the_command_line(tmp_path, command) -> None:
    """s3fs took 'KEY:SECRET@bucket' from a config file as a bucket name, and botocore's traceback quoted it."""
    secret = "UrlSecretXYZ"
    (tmp_path / "train.yaml").write_text(f"data: s3://AKIAURLKEY:{secret}@audit/c1\noutput: run\nsteps: 2\n")
    (tmp_path / "build.json").write_text(json.dumps(
        {"sources": [{"name": "a", "input": f"s3://AKIAURLKEY:{secret}@audit/raw/*.jsonl"}]}))
    module, _, sub = command.partition(" ")
    config = "train.yaml" if "train" in command else "build.json"
    res = run("-m", module, *([sub] if sub else []), f"--config={config}" if sub else "--config", *([] if sub else
              [config]), *(["--output", "out"] if "build" in command else []), cwd=tmp_path)
    assert res.returncode == 2 and secret not in res.stdout + res.stderr, res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and "credentials inside a s3:// URL" in res.stderr
