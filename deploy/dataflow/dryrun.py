"""Translate the full build for DataflowRunner offline, without submitting it.

    python -m deploy.dataflow.dryrun --input 'gs://raw/*.jsonl' --output gs://corpora/v1 \\
        --runner DataflowRunner --project P --region us-central1 --temp_location gs://tmp/beam \\
        --sdk_container_image us-central1-docker.pkg.dev/P/shardforge/build:0.1.0 --sdk_location container

Beam 2.77's own `--dry_run` stops inside `DataflowRunner.run_pipeline` just
before submission, but that method first imports the Dataflow API client
(`apache-beam[gcp]`: google-cloud-dataflow-client), which we do not install
(its auth stack retries for credentials for 20-35 s offline). So this module
drives the same steps itself, with Beam's own code, in the order
`Pipeline.run()` + `DataflowRunner.run_pipeline()` do, up to the point where
`apiclient.Job` would build the request:

1. every flag is known to some PipelineOptions class (Beam only warns and
   drops unknown ones; we fail);
2. `beam.Pipeline(runner=DataflowRunner(), ...)` runs Beam's options
   validator for the Dataflow service (project, region, GCS temp/staging
   paths, job name, worker options);
3. the round trip `Pipeline.from_runner_api(pipeline.to_runner_api())` that
   `Pipeline.run()` performs for non-portable runners: every DoFn, CombineFn
   and side-input function is pickled and unpickled;
4. the Dataflow-specific rewrites: combine-fn and side-input visitors, the
   runner's PTransform overrides, GBK-input KV enforcement, the Docker
   environment from --sdk_container_image, environment merging, Beam's
   pre-submit optimizer phases (pack_combiners, sort_stages) and
   `validate_pipeline_graph`;
5. the job's pipeline options as the service would receive them (a protobuf
   Struct) and the serialized job graph size;
6. a static scan of every pickled payload (pickletools opcodes, nothing is
   executed) listing the modules the workers must import; none may be torch,
   trainer, tests or __main__.

It does not prove that the Dataflow service accepts the job, that the
container image exists or has the right packages, or that IAM/quotas allow
the run: see docs/gcp.md.
"""

from __future__ import annotations

import base64
import bz2
import json
import pickletools
import sys
import tempfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from apache_beam import Pipeline
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    TypeOptions,
    WorkerOptions,
)
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow import dataflow_runner
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
from apache_beam.runners.dataflow.ptransform_overrides import get_dataflow_transform_overrides
from apache_beam.runners.pipeline_utils import (
    merge_common_environments,
    merge_superset_dep_environments,
    validate_pipeline_graph,
)
from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.transforms import environments
from apache_beam.transforms.display import DisplayData
from google.protobuf.struct_pb2 import Struct

from deploy.dataflow.main import make_pipeline
from pipelines.options import dataflow_option_errors, remove_temp_folder
from schemas.errors import UserError

# Top-level modules the Dataflow workers must never need: the trainer half,
# test code, or anything pickled from a script's main session.
FORBIDDEN_MODULES = frozenset({"torch", "trainer", "tests", "__main__", "deploy", "conftest", "pytest"})
# Our packages that the build image installs (deploy/dataflow/Dockerfile).
OWN_PACKAGES = frozenset({"storage", "schemas", "pipelines", "shardforge"})
# Dataflow rejects job requests over 10 MB (the graph plus pickled DoFns).
MAX_JOB_BYTES = 10 * 1024 * 1024

PARDO_URNS = {common_urns.primitives.PAR_DO.urn}
COMBINE_URNS = {
    common_urns.composites.COMBINE_PER_KEY.urn,
    common_urns.composites.COMBINE_GLOBALLY.urn,
    common_urns.combine_components.COMBINE_PER_KEY_PRECOMBINE.urn,
    common_urns.combine_components.COMBINE_PER_KEY_MERGE_ACCUMULATORS.urn,
    common_urns.combine_components.COMBINE_PER_KEY_EXTRACT_OUTPUTS.urn,
    common_urns.combine_components.COMBINE_GROUPED_VALUES.urn,
}
PICKLED_URNS = {"beam:dofn:pickled_python_info:v1", "beam:combinefn:pickled_python:v1"}


@dataclass
class Translation:
    """What the offline Dataflow translation produced."""

    proto: beam_runner_api_pb2.Pipeline
    sdk_options: dict[str, Any]
    images: list[str]
    pickled_fns: int
    modules: set[str] = field(default_factory=set)
    job_bytes: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "transforms": len(self.proto.components.transforms),
            "pcollections": len(self.proto.components.pcollections),
            "pickled_fns": self.pickled_fns,
            "images": self.images,
            "job_bytes": self.job_bytes,
            "top_level_modules": sorted({m.split(".")[0] for m in self.modules}),
        }


def _all_options_parser() -> Any:
    """An argparse parser holding every registered PipelineOptions class's flags (as Beam builds it)."""
    from apache_beam.options import pipeline_options as po

    parser_cls = getattr(po, "_BeamArgumentParser", None)
    import argparse

    parser = (parser_cls or argparse.ArgumentParser)(allow_abbrev=False)
    seen: dict[str, type] = {}
    for cls in PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)  # same registration Beam's get_all_options performs
    return parser


def unknown_flags(argv: list[str]) -> list[str]:
    """Flags in argv that no PipelineOptions class (ours or Beam's) defines. Beam would silently drop them."""
    import pipelines.options  # noqa: F401 - registers BuildOptions

    _, unknown = _all_options_parser().parse_known_args(argv)
    return [a for a in unknown if a.startswith("-")]


def _unpack_payload(payload: bytes) -> bytes:
    """Beam's pickler output: base64 of a bz2 (or zlib) compressed pickle."""
    raw = base64.b64decode(payload)
    for decompress in (bz2.decompress, zlib.decompress):
        try:
            return decompress(raw)
        except (OSError, ValueError, zlib.error):
            continue
    return raw


def pickled_modules(payload: bytes) -> set[str]:
    """Modules a pickled payload needs on the worker, read from its opcodes without unpickling anything.

    Three shapes: a global by reference (GLOBAL / STACK_GLOBAL of module +
    name); a module cloudpickle re-imports by name (`subimport("numpy")` for
    the globals of a function pickled by value); and the `__module__` string
    stored with a function or class pickled by value (e.g. `__main__`).
    """
    data = _unpack_payload(payload)
    modules: set[str] = set()
    memo: dict[int, Any] = {}
    recent: list[Any] = []  # recent pushes (strings, or None for anything else)
    want_next_string = False
    for op, arg, _ in pickletools.genops(data):
        name = op.name
        value: Any = None
        if name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING"):
            value = arg
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            value = memo.get(int(arg))
        elif name == "MEMOIZE":
            memo[len(memo)] = recent[-1] if recent else None
            continue
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[int(arg)] = recent[-1] if recent else None
            continue
        elif name in ("FRAME", "PROTO"):
            continue
        elif name in ("GLOBAL", "STACK_GLOBAL"):
            if name == "GLOBAL":
                module, _, attr = str(arg).partition(" ")
            else:
                module, attr = (recent[-2], recent[-1]) if len(recent) >= 2 else (None, None)
            if isinstance(module, str):
                modules.add(module)
            value = ("global", attr)  # memoized and fetched again when the same global recurs
        if isinstance(value, tuple):
            want_next_string = value[1] in ("subimport", "dynamic_subimport")
        elif isinstance(value, str):
            if want_next_string or (recent and recent[-1] == "__module__"):
                modules.add(value)
            want_next_string = False
        recent.append(value)
        del recent[:-4]
    return modules


def _requirement_closure(roots: Iterable[str]) -> set[str]:
    """Normalized names of the installed distributions that `roots` pull in (markers evaluated, no extras)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [str(canonicalize_name(Requirement(r).name)) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for r in reqs:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(str(canonicalize_name(req.name)))
    return seen


def pipelines_requirements(pyproject: str | None = None) -> list[str]:
    """Core + [pipelines] requirements of our distribution, read from pyproject.toml (what the image installs)."""
    import os

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    path = pyproject or os.path.join(os.path.dirname(__file__), "..", "..", "pyproject.toml")
    with open(path, "rb") as f:
        project = tomllib.load(f)["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["pipelines"]]


def modules_outside_image(modules: Iterable[str], requirements: list[str]) -> list[str]:
    """Top-level modules that neither the stdlib, our packages nor the image's distributions provide."""
    import importlib.metadata as md

    from packaging.utils import canonicalize_name

    closure = _requirement_closure(requirements)
    provided = md.packages_distributions()
    missing = []
    for top in sorted({m.split(".")[0] for m in modules}):
        if top in sys.stdlib_module_names or top in OWN_PACKAGES:
            continue
        dists = {str(canonicalize_name(d)) for d in provided.get(top, [])}
        if not dists & closure:
            missing.append(top)
    return missing


def _pickled_payloads(proto: beam_runner_api_pb2.Pipeline) -> Iterable[tuple[str, bytes]]:
    """(transform name, pickled payload) for every user function in the pipeline."""
    for t in proto.components.transforms.values():
        if t.spec.urn in PARDO_URNS:
            pardo = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
            if pardo.do_fn.urn in PICKLED_URNS:
                yield t.unique_name, pardo.do_fn.payload
            for si in pardo.side_inputs.values():
                for fn in (si.view_fn, si.window_mapping_fn):
                    if fn.urn.startswith("beam:") and fn.payload and "pickled" in fn.urn:
                        yield t.unique_name, fn.payload
        elif t.spec.urn in COMBINE_URNS:
            comb = beam_runner_api_pb2.CombinePayload.FromString(t.spec.payload)
            if comb.combine_fn.urn in PICKLED_URNS:
                yield t.unique_name, comb.combine_fn.payload


def translate(argv: list[str]) -> Translation:
    """Build the whole pipeline from a `pipelines.jobs.build` command line and translate it for Dataflow."""
    unknown = unknown_flags(argv)
    if unknown:
        raise ValueError(f"flags no pipeline option defines (Beam would drop them): {unknown}")
    # --dry_run makes Beam's validator skip the GCS soft-delete probe (a network call).
    argv = [*argv, "--dry_run=True"]
    # Beam's Dataflow option checks, offline (a bad project, region or gs:// location is one line,
    # and no default bucket is created over the network when both locations are bad).
    errors = dataflow_option_errors(PipelineOptions(argv))
    if errors:
        raise UserError("invalid Dataflow options: " + "; ".join(" ".join(str(e).split()) for e in errors))
    runner = DataflowRunner()
    # offline: nothing remote is listed or read while the graph is built (gs:// input globs stand
    # for their files); Pipeline() runs Beam's Dataflow options validator again.
    p, _, _, options = make_pipeline(argv, runner=runner, offline=True)
    return translate_pipeline(p, options, runner)


def translate_pipeline(p: Pipeline, options: PipelineOptions, runner: DataflowRunner) -> Translation:
    """Translate a constructed pipeline for Dataflow the way DataflowRunner would, without submitting it.

    Every ``Pipeline`` makes a local temp folder that only ``run()`` removes: the
    check never runs them, so it removes the folders itself (one pair per check; one
    that Beam makes and fails inside its round trip it cannot reach),
    and stages the SDK's dependency files in a folder it removes.
    """
    made = [p]
    try:
        return _translate(made, options, runner)
    finally:
        for q in made:
            remove_temp_folder(q)


def _translate(made: list[Pipeline], options: PipelineOptions, runner: DataflowRunner) -> Translation:
    image = options.view_as(WorkerOptions).sdk_container_image
    if not image:
        raise ValueError("--sdk_container_image is required: workers need our package (deploy/dataflow/Dockerfile)")

    # Pipeline.run(): non-portable runners get a runner-API round trip first.
    p = Pipeline.from_runner_api(made[0].to_runner_api(use_fake_coders=True), runner, options)
    made.append(p)

    # DataflowRunner.run_pipeline(), the steps before it imports the API client.
    dataflow_runner._check_and_add_missing_options(options)
    p.visit(runner.combinefn_visitor())
    p.visit(runner.side_input_visitor(
        deterministic_key_coders=not options.view_as(TypeOptions).allow_non_deterministic_key_coders))
    p.replace_all(DataflowRunner._PTRANSFORM_OVERRIDES)
    overrides = get_dataflow_transform_overrides(options)
    if overrides:
        p.replace_all(overrides)
    with tempfile.TemporaryDirectory(prefix="shardforge-staging") as staging:  # Beam's default is never removed
        env = environments.DockerEnvironment.from_container_image(
            image, artifacts=environments.python_sdk_dependencies(options, staging),
            resource_hints=environments.resource_hints_from_options(options))
    runner._adjust_pipeline_for_dataflow_v2(p)
    proto = p.to_runner_api(default_environment=env)
    for env_id, e in proto.components.environments.items():
        proto.components.environments[env_id].CopyFrom(
            environments.resolve_anyof_environment(e, common_urns.environments.DOCKER.urn))
    proto = merge_common_environments(merge_superset_dep_environments(proto))
    proto = translations.optimize_pipeline(
        proto, phases=[translations.pack_combiners, translations.sort_stages],
        known_runner_urns=frozenset(), partial=True)

    # apiclient.Job(...): graph validation, required options, options as a Struct.
    validate_pipeline_graph(proto)
    gco = options.view_as(GoogleCloudOptions)
    missing = [k for k in ("project", "region", "temp_location") if not getattr(gco, k)]
    if missing:
        raise ValueError(f"missing required Dataflow options: {missing}")
    sdk_options = {k: v for k, v in options.get_all_options(retain_unknown_options=True).items() if v is not None}
    struct = Struct()
    struct.update({"options": sdk_options,
                   "display_data": [i.get_dict() for i in DisplayData.create_from_options(options).items]})

    images = sorted({beam_runner_api_pb2.DockerPayload.FromString(e.payload).container_image
                     for e in proto.components.environments.values()
                     if e.urn == common_urns.environments.DOCKER.urn})
    modules: set[str] = set()
    n = 0
    for name, payload in _pickled_payloads(proto):
        try:
            pickler.loads(payload)  # the workers' first step on every bundle
        except Exception as e:
            raise ValueError(f"{name}: its pickled function does not load back: {e}") from e
        modules |= pickled_modules(payload)
        n += 1
    bad = sorted(m for m in modules if m.split(".")[0] in FORBIDDEN_MODULES or m.startswith("test_"))
    if bad:
        raise ValueError(f"pickled functions refer to modules the Dataflow workers must not need: {bad}")
    outside = modules_outside_image(modules, pipelines_requirements())
    if outside:
        raise ValueError(f"pickled functions need modules the [pipelines] image does not install: {outside}")
    job_bytes = len(proto.SerializeToString()) + len(struct.SerializeToString())
    if job_bytes > MAX_JOB_BYTES:
        raise ValueError(f"job request would be {job_bytes} bytes, over Dataflow's {MAX_JOB_BYTES}")
    return Translation(proto, json.loads(json.dumps(sdk_options, default=str)), images, n, modules, job_bytes)


def main(argv: list[str] | None = None) -> int:
    """Translate and print a JSON summary; exit 2 on a user error, 1 if the job would not build, one line each."""
    from pipelines.options import quiet_beam

    quiet_beam()
    argv = sys.argv[1:] if argv is None else argv
    try:
        t = translate(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - report any translation failure as one line
        print(f"dataflow translation failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(t.summary(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
