"""The Beam internals ``pipelines/localrunner`` patches or reads, on the pinned Beam (apache-beam 2.77.0).

Each patched attribute exists with the call signature its replacement assumes (names, kinds and
defaults of the parameters: a Beam caller may pass any of them by keyword), ``install`` really
replaces it and ``uninstall`` puts Beam's own back; the attributes the patches only read exist too.
These fail at once, with the name of what moved, when a Beam upgrade renames or reshapes them; the
behaviour tests each module's README entry names fail too, later and less directly. Every test puts
back what was installed in this process before it ran.
"""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import threading
from pathlib import Path

import apache_beam
import pytest
from apache_beam.runners.portability.fn_api_runner import execution, fn_runner, translations
from apache_beam.runners.worker import bundle_processor, data_plane, statesampler
from apache_beam.transforms import core, ptransform, userstate, util
from apache_beam.typehints import decorators

from pipelines.localrunner import fusion, signatures, spill
from pipelines.localrunner import statesampler as sampler


def _params(f) -> list[tuple[str, object, object]]:
    """(name, kind, default) of each parameter: what a caller may rely on, annotations aside."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


def _names(f) -> list[str]:
    return list(inspect.signature(f).parameters)


# ------------------------------------------------------------------ spill


SPILL_METHODS = {  # (class, method) -> Beam 2.77's parameters, which the replacement takes as they are
    ("ListBuffer", "append"): ["self", "element"],
    ("ListBuffer", "__iter__"): ["self"],
    ("ListBuffer", "partition"): ["self", "n"],
    ("ListBuffer", "extend"): ["self", "extra"],
    ("ListBuffer", "copy"): ["self"],
    ("ListBuffer", "clear"): ["self"],
    ("GroupingBuffer", "append"): ["self", "elements_data"],
    ("GroupingBuffer", "partition"): ["self", "n"],
    ("GroupingBuffer", "__iter__"): ["self"],
    ("GroupingBuffer", "extend"): ["self", "input_buffer"],
    ("BundleManager", "process_bundle"):
        ["self", "inputs", "expected_outputs", "fired_timers", "expected_output_timers", "dry_run"],
    ("BundleManager", "_send_input_to_worker"): ["self", "process_bundle_id", "read_transform_id", "byte_streams"],
    ("InMemoryDataChannel", "input_elements"): ["self", "instruction_id", "unused_expected_inputs", "abort_callback"],
    ("InMemoryDataChannel", "output_stream"): ["self", "instruction_id", "transform_id"],
    ("DataOutputOperation", "finish"): ["self"],
}


@pytest.fixture
def beams_buffers():
    """Beam's own runner methods for the test body; the spill as it was installed back after."""
    was = spill.settings()
    spill.uninstall()
    yield
    if was is not None:
        spill.install(was)


def test_spill_patches_beams_methods_with_their_own_signatures(beams_buffers) -> None:
    targets = spill._targets()
    assert {(owner.__name__, name) for owner, name, _ in targets} == set(SPILL_METHODS)
    originals = {}
    for owner, name, replacement in targets:
        beams = owner.__dict__[name]
        assert inspect.isfunction(beams) and not getattr(beams, "drops_stream", False), (owner, name)
        assert _names(beams) == SPILL_METHODS[owner.__name__, name], (owner, name)
        assert _params(replacement) == _params(beams), (owner, name)  # same names, kinds and defaults
        originals[owner, name] = beams
    spill.install(spill.SpillSettings())
    try:
        for (owner, name), beams in originals.items():
            now = owner.__dict__[name]
            assert now is not beams and now.__module__.startswith("pipelines.localrunner.spill"), (owner, name)
    finally:
        spill.uninstall()
    for (owner, name), beams in originals.items():
        assert owner.__dict__[name] is beams, (owner, name)


def test_the_runner_attributes_the_spill_reads_exist() -> None:
    from apache_beam.coders import coders
    from apache_beam.transforms import window
    from apache_beam.transforms.core import Windowing

    listed = execution.ListBuffer(None)
    assert listed._inputs == [] and listed.cleared is False and not listed._grouped_output
    kv = coders.WindowedValueCoder(coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder()]),
                                   coders.GlobalWindowCoder())
    grouped = execution.GroupingBuffer(kv, kv, Windowing(window.GlobalWindows()))
    for attr in ("_table", "_pre_grouped_coder", "_post_grouped_coder", "_key_coder", "_windowing"):
        assert hasattr(grouped, attr), attr
    assert not grouped._grouped_output
    grouped._table[b"k"].append(1)  # a defaultdict(list): extend of a spilled table appends to it
    assert len(grouped._pre_grouped_coder.wrapped_value_coder._get_component_coders()) == 2
    assert isinstance(fn_runner.BundleManager._lock, type(threading.Lock()))
    manager = vars(fn_runner.BundleManager(None))
    assert "bundle_context_manager" in manager and "_worker_handler" in manager
    assert _names(execution.BundleContextManager.get_buffer) == ["self", "buffer_id", "transform_id"]
    channel = data_plane.InMemoryDataChannel()
    assert channel.inverse()._inputs == [] and hasattr(channel, "_data_buffer_time_limit_ms")
    assert _names(data_plane.ClosableOutputStream.create) == \
        ["close_callback", "flush_callback", "data_buffer_time_limit_ms"]
    # DataOutputOperation.finish closes self.output_stream (set per bundle by set_output_stream).
    finish = inspect.unwrap(bundle_processor.DataOutputOperation.finish)  # Beam's own, whether or not spilling wrapped it
    assert {"output_stream", "close"} <= set(finish.__code__.co_names)
    assert "output_stream" in bundle_processor.DataOutputOperation.set_output_stream.__code__.co_names


# ------------------------------------------------------------------ fusion


@pytest.fixture
def beams_planning():
    was = getattr(translations.sink_flattens, "__wrapped__", None) is not None
    fusion.uninstall()
    yield
    if was:
        fusion.install()


def test_fusion_wraps_sink_flattens_which_the_runner_looks_up_when_it_plans(beams_planning) -> None:
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

    beams = translations.sink_flattens
    assert _names(beams) == ["stages", "pipeline_context"]
    # create_stages reads translations.sink_flattens at each call (not a reference taken at import).
    assert {"translations", "sink_flattens"} <= set(FnApiRunner.create_stages.__code__.co_names)
    fusion.install()
    try:
        assert translations.sink_flattens is not beams and translations.sink_flattens.__wrapped__ is beams
        assert _params(translations.sink_flattens) == _params(beams)
    finally:
        fusion.uninstall()
    assert translations.sink_flattens is beams


def test_the_planning_internals_fusion_reads_exist() -> None:
    assert _names(translations.split_buffer_id) == ["buffer_id"]
    assert translations.split_buffer_id(b"materialize:x") == ("materialize", "x")
    assert _names(translations.TransformContext.add_data_channel_coder) == ["self", "pcoll_id", "is_input"]
    assert "must_follow" in _names(translations.Stage.__init__)
    assert bundle_processor.DATA_INPUT_URN and bundle_processor.DATA_OUTPUT_URN


# ------------------------------------------------------------------ signatures


@pytest.fixture
def beams_introspection():
    was = getattr(userstate.get_dofn_specs, "_shardforge_memo", False)
    signatures.uninstall()
    yield
    if was:
        signatures.install()


def test_signatures_memoizes_beams_functions_everywhere_beam_imported_them(beams_introspection) -> None:
    beams_sig, beams_specs = decorators.get_signature, userstate.get_dofn_specs
    assert _names(beams_sig) == ["func"] and _names(beams_specs) == ["dofn"]
    modules = (decorators, core, ptransform, util)
    assert all(m.get_signature is beams_sig for m in modules)  # imported by name: patched in each
    # userstate's own callers look get_dofn_specs up in the module at each call.
    for caller in (userstate.is_stateful_dofn, userstate.validate_stateful_dofn):
        assert "get_dofn_specs" in caller.__code__.co_names, caller
    signatures.install()
    try:
        for m in modules:
            assert m.get_signature is not beams_sig and m.get_signature.__wrapped__ is beams_sig, m.__name__
        assert userstate.get_dofn_specs.__wrapped__ is beams_specs
    finally:
        signatures.uninstall()
    assert all(m.get_signature is beams_sig for m in modules) and userstate.get_dofn_specs is beams_specs


# ------------------------------------------------------------------ state sampler


def test_statesampler_sets_the_default_sampling_period_and_wraps_the_start_of_beams_state_sampler() -> None:
    init = statesampler.StateSampler.__init__
    was = init.__defaults__ == (sampler.SAMPLING_PERIOD_MS,)
    sampler.uninstall()
    try:
        assert _names(init) == ["self", "prefix", "counter_factory", "sampling_period_ms"]
        assert init.__defaults__ == (statesampler.DEFAULT_SAMPLING_PERIOD_MS,) == (200,)
        beams_start = statesampler.StateSampler.start
        sampler.install()
        sampler.install()  # idempotent: start is wrapped once
        assert statesampler.StateSampler.__init__.__defaults__ == (sampler.SAMPLING_PERIOD_MS,)
        assert statesampler.StateSampler.start.__wrapped__ is beams_start  # an interrupted start finishes
        sampler.uninstall()
        assert statesampler.StateSampler.__init__.__defaults__ == (200,)
        assert statesampler.StateSampler.start is beams_start
    finally:
        if was:
            sampler.install()


def test_workers_wraps_beams_close_all_and_the_harnesss_execute() -> None:
    """What ``pipelines.localrunner.workers`` relies on: the manager's handlers by environment, each gRPC
    handler's control connection and the marker that ends its stream, the harness's ``_alive`` flag."""
    import inspect

    from apache_beam.runners.portability.fn_api_runner import worker_handlers as wh
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    from pipelines.localrunner import workers

    workers.uninstall()
    try:
        close_all, execute = wh.WorkerHandlerManager.close_all, SdkHarness._execute
        assert "_cached_handlers" in inspect.getsource(close_all)
        assert "self.control_conn = " in inspect.getsource(wh.GrpcWorkerHandler.__init__)
        assert "_DONE_MARKER" in inspect.getsource(wh.BeamFnControlServicer.Control)
        assert "self._alive = False" in inspect.getsource(SdkHarness.run)
        assert _names(execute) == ["self", "task", "request"]
        workers.install()
        workers.install()  # idempotent: each is wrapped once
        assert wh.WorkerHandlerManager.close_all.__wrapped__ is close_all
        assert SdkHarness._execute.__wrapped__ is execute
        workers.uninstall()
        assert wh.WorkerHandlerManager.close_all is close_all and SdkHarness._execute is execute
    finally:
        workers.install()


# ------------------------------------------------------------------ SDK worker entry, progress bars


def test_the_sdk_worker_entry_runs_beams_harness_as_make_pipeline_starts_it() -> None:
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
    from apache_beam.runners.worker import sdk_worker_main
    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    assert _names(sdk_worker_main.main) == ["unused_argv"]
    assert "PIPELINE_OPTIONS" in sdk_worker_main.create_harness.__code__.co_consts
    assert "default_environment" in _names(FnApiRunner.__init__)
    env = SubprocessSDKEnvironment.from_command_string("python -m pipelines.localrunner.sdkworker")
    assert env.command_string == "python -m pipelines.localrunner.sdkworker"


def test_progress_bars_show_only_where_the_dofns_run_in_this_process(monkeypatch) -> None:
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

    from pipelines.localrunner import progress

    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    seen = {}
    for mode in ("in_memory", "multi_processing"):
        opts = PipelineOptions(["--runner", "FnApiRunner", "--direct_running_mode", mode])
        with progress.local_bars(opts):
            seen[mode] = os.environ.get(progress.ENV)
    assert seen == {"in_memory": "1", "multi_processing": None}
    assert PipelineOptions([]).view_as(DirectOptions).direct_running_mode == "in_memory"  # Beam's default
    # Not a terminal (a log): lines; SHARDFORGE_PROGRESS chooses over the terminal, 0 for none.
    monkeypatch.setattr(progress, "LINE_EVERY_S", 3600.0)
    opts = PipelineOptions(["--runner", "FnApiRunner"])
    for tty, env, want in ((False, None, "lines"), (True, "lines", "lines"), (False, "1", "1"), (True, "0", None)):
        monkeypatch.setattr(sys.stderr, "isatty", lambda tty=tty: tty)
        if env is None:
            monkeypatch.delenv(progress.ENV, raising=False)
        else:
            monkeypatch.setenv(progress.ENV, env)
        with progress.local_bars(opts):
            assert progress.enabled() == (want is not None)
            seen_mode = os.environ.get(progress.ENV)
        assert (seen_mode if want else None) == want, (tty, env, seen_mode)


# ------------------------------------------------------------------ preflight


def _imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
    return found


def test_the_dataflow_client_modules_preflight_looks_for_are_what_beam_imports() -> None:
    from pipelines.localrunner.preflight import DATAFLOW_MODULES

    root = Path(apache_beam.__file__).parent
    imported = _imported_modules(root / "runners/dataflow/internal/apiclient.py") | \
        _imported_modules(root / "io/gcp/gcsio.py")  # (apiclient imports gcsio)
    for module in DATAFLOW_MODULES:
        assert any(m == module or m.startswith(module + ".") for m in imported), module


SKIPPED = """
import json, sys
from pipelines.localrunner.preflight import UNUSED_INTEGRATIONS, skip_unused_integrations
skip_unused_integrations()
import apache_beam as beam
import pyarrow.parquet
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
with beam.Pipeline(runner=FnApiRunner()) as p:
    _ = p | beam.Create([("a", 1), ("a", 2)]) | beam.GroupByKey() | beam.Map(print)
print(json.dumps(sorted(m for m in UNUSED_INTEGRATIONS if m in sys.modules)))
"""


def test_beam_runs_a_local_pipeline_without_the_integrations_preflight_leaves_out() -> None:
    """Beam imports pandas, pymongo / bson and boto3 only where it catches their ImportError: a Beam that
    needs one of them for a local pipeline fails here (and every local build with it)."""
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    res = subprocess.run([sys.executable, "-c", SKIPPED], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout
