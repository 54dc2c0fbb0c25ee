"""The two halves meet only in schemas/: the data job never imports torch, the trainer never imports Beam."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pipelines
import trainer


def modules_of(pkg) -> list[str]:
    return sorted(f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__))


def imported_after(modules: list[str]) -> set[str]:
    code = ("import sys, importlib\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m)\n"
            "print('\\n'.join(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_pipelines_never_import_torch():
    mods = imported_after(modules_of(pipelines))
    assert "apache_beam" in mods  # the check itself works
    assert not any(m == "torch" or m.startswith("torch.") for m in mods)


def test_trainer_never_imports_beam():
    mods = imported_after(modules_of(trainer))
    assert "torch" in mods
    assert not any(m == "apache_beam" or m.startswith("apache_beam.") for m in mods)


def test_schemas_import_neither():
    import schemas

    mods = imported_after(modules_of(schemas))
    assert not any(m.split(".")[0] in ("torch", "apache_beam") for m in mods)


def test_storage_imports_neither():
    import storage

    mods = imported_after(modules_of(storage))
    assert "fsspec" in mods  # the check itself works
    assert not any(m.split(".")[0] in ("torch", "apache_beam") for m in mods)
