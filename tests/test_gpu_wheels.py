"""The GPU benchmark on a machine without a package registry: the carried wheels whose package is
missing are installed (and no others), and a missing package costs one clear line or one part, not a
traceback after minutes of GPU time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
# Distributions the carried wheels need that the lent GPU image has (its package list, read 2026-11-17).
IMAGE_HAS = {"aiohttp", "fsspec", "grpcio", "numpy", "packaging", "pillow", "protobuf", "pyarrow", "pyparsing",
             "python-dateutil", "pyyaml", "requests", "sortedcontainers", "typing-extensions"}
# Where the wheels are installed: the lent image's Python.
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
          "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_wheel_list_is_pinned_and_closed_over_what_the_image_lacks() -> None:
    """gpu_wheels.sh --list: one pin per package, constraints.txt's version; every package those need is
    in the list or in the image (a dependency a new release adds fails here, not on a lent GPU)."""
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_wheels.sh"), "--list"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    pins = dict(line.split("==") for line in proc.stdout.split())
    listed = {_norm(n) for n in pins}
    assert len(listed) == len(pins) == 42
    assert {"pydantic", "webdataset", "gcsfs", "apache-beam", "gcp-storage-emulator"} <= listed
    constraints = dict(x.split("==") for x in (REPO / "constraints.txt").read_text().split() if "==" in x)
    assert all(constraints.get(n) == v for n, v in pins.items()), pins
    needed = {}
    for name in listed:
        assert metadata.version(name) == pins.get(name, pins.get(name.replace("-", "_")))  # the venv's = the pin
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(TARGET):
                needed.setdefault(_norm(req.name), set()).add(name)
    missing = {n: sorted(by) for n, by in needed.items() if n not in listed and n not in IMAGE_HAS}
    assert not missing, missing


def _wheel(folder: Path, name: str, version: str, source: str) -> Path:
    """A minimal pure-Python wheel holding the module ``name``."""
    info = f"{name}-{version}.dist-info"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}.py", source)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", f"{name}.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return path


def _install(wheels: Path, target: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "carried_wheels.py"), str(wheels), str(target)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_only_the_missing_packages_are_installed_and_only_once(tmp_path) -> None:
    wheels, target = tmp_path / "whl", tmp_path / "site"
    wheels.mkdir()
    _wheel(wheels, "sf_carried_probe", "1.0", "VALUE = 7\n")
    # Installed here already (the machine's own): never replaced, whatever the carried copy holds.
    # pydantic_core's file name spells its distribution pydantic-core.
    _wheel(wheels, "numpy", "0.0.1", "raise ImportError('the carried numpy replaced the installed one')\n")
    _wheel(wheels, "pydantic_core", "0.0.1", "raise ImportError('the carried pydantic_core was installed')\n")
    first = _install(wheels, target)
    assert first.returncode == 0, first.stderr
    assert "installed 1 of 3" in first.stdout and "(sf-carried-probe)" in first.stdout, first.stdout
    assert sorted(p.name for p in target.glob("*.py")) == ["sf_carried_probe.py"]
    probe = subprocess.run([sys.executable, "-c", "import numpy, sf_carried_probe; print(sf_carried_probe.VALUE)"],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(target)})
    assert probe.returncode == 0 and probe.stdout.strip() == "7", probe.stderr
    again = _install(wheels, target)
    assert again.returncode == 0 and "all 3 packages" in again.stdout and "installed already" in again.stdout


def test_a_broken_carried_wheel_fails_with_pips_reason(tmp_path) -> None:
    wheels = tmp_path / "whl"
    wheels.mkdir()
    (wheels / "sf_not_a_wheel-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    proc = _install(wheels, tmp_path / "site")
    assert proc.returncode != 0 and "could not install" in proc.stderr


def _bench(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Python code run with benchmarks/bench_gpu.py importable, in a fresh process."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), "SF_OUT": str(tmp_path / "gpu.md")})


def test_bench_gpu_without_its_core_packages_says_which_in_one_line(tmp_path) -> None:
    proc = _bench("import runpy, sys\n"
                  "sys.modules['webdataset'] = None  # as if not installed\n"
                  "sys.argv = ['bench_gpu.py', '--dry-run', '--out', __import__('os').environ['SF_OUT']]\n"
                  "runpy.run_path('benchmarks/bench_gpu.py', run_name='__main__')\n", tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "lacks webdataset:" in lines[0] and "gpu_wheels.sh" in lines[0], proc.stderr
    assert not (tmp_path / "gpu.md").exists()


def test_a_part_whose_packages_are_missing_is_left_out_and_said(tmp_path) -> None:
    code = ("import os, sys\n"
            "for m in ('apache_beam', 'transformers'): sys.modules[m] = None  # as if not installed\n"
            "from dataclasses import replace\n"
            "import torch\n"
            "from benchmarks import bench_gpu as bg\n"
            "s = replace(bg.DRY, plan=('datawait', ('tiny', bg.F, 'HF', 'eager')), steps=1)\n"
            "b = bg.Bench(s, torch.device('cpu'), os.environ['SF_OUT'])\n"
            "b.run()\n")
    proc = _bench(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "gpu.md").read_text()
    section = text.split("## Parts not run", 1)[1]
    assert "datawait: not run, missing Python packages (apache_beam)" in section
    assert "tiny FULL-SENTENCES HF eager: not run, missing Python packages (transformers)" in section
    assert "Parts that failed" not in text and "Traceback" not in proc.stderr
