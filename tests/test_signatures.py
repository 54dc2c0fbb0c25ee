"""pipelines.localrunner.signatures: Beam's get_signature memoized, same answers as inspect, installed by make_pipeline."""

from __future__ import annotations

import functools
import gc
import inspect

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import core, userstate
from apache_beam.typehints import decorators

from pipelines.localrunner import signatures
from pipelines.options import finalize_options, make_pipeline


class Tagged(beam.DoFn):
    def process(self, element, side=beam.DoFn.SideInputParam, *rest, flag: bool = True, **kw):
        yield element, side

    def helper(self, a, /, b=2):
        return a + b


def plain(a: int, b: str = "x", *args, **kwargs) -> None:
    pass


def test_make_pipeline_installs_the_memoized_signature_everywhere_beam_imported_it(monkeypatch):
    original = getattr(decorators.get_signature, "__wrapped__", decorators.get_signature)
    for module in (decorators, core):  # as Beam left them (restored after the test)
        monkeypatch.setattr(module, "get_signature", original)
    monkeypatch.setattr(userstate, "get_dofn_specs", signatures._beams(userstate.get_dofn_specs))
    monkeypatch.setattr(signatures, "_installed", False)
    make_pipeline(finalize_options(PipelineOptions([])))
    for module in (decorators, core):
        assert getattr(module.get_signature, "__wrapped__", None) is not None, module.__name__
    assert decorators.get_signature is core.get_signature
    assert getattr(userstate.get_dofn_specs, "__wrapped__", None) is not None


def test_memoized_signatures_equal_inspect_for_functions_methods_and_the_rest():
    signatures.install()
    get = core.get_signature
    beams = get.__wrapped__
    a, b = Tagged(), Tagged()
    for f in (plain, a.process, a.helper, Tagged.process, functools.partial(plain, 1), len, Tagged):
        assert get(f) == beams(f), f
        assert get(f) == get(f)
    assert get(a.helper) == inspect.signature(a.helper)
    # A bound method's signature is its function's less `self`, whoever it is bound to.
    assert get(a.process) is get(b.process)
    assert list(get(a.process).parameters)[0] == "element"
    assert get(Tagged.process) is not get(a.process)
    # Beam's own introspection through it is unchanged.
    assert userstate.get_dofn_specs(a) == (set(), set())
    assert core.get_function_args_defaults(a.helper) == (["a", "b"], [2])


def test_the_cache_does_not_keep_functions_alive():
    signatures.install()

    def ephemeral(x, y=1):
        return x

    core.get_signature(ephemeral)
    ref = __import__("weakref").ref(ephemeral)
    del ephemeral
    gc.collect()
    assert ref() is None


class Stateful(beam.DoFn):
    BAG = userstate.BagStateSpec("bag", beam.coders.VarIntCoder())
    TIMER = userstate.TimerSpec("t", beam.TimeDomain.WATERMARK)

    def process(self, element, bag=beam.DoFn.StateParam(BAG), timer=beam.DoFn.TimerParam(TIMER)):
        yield element

    @userstate.on_timer(TIMER)
    def fire(self):
        pass


class Helper:
    def method(self, x, bag=beam.DoFn.StateParam(Stateful.BAG)):
        return x


def test_memoized_dofn_specs_equal_beams_for_stateful_shadowed_and_wrapped_dofns():
    signatures.install()
    specs, beams = userstate.get_dofn_specs, userstate.get_dofn_specs.__wrapped__
    shadowed = Stateful()
    shadowed.process = lambda element: [element]  # hides the stateful process: Beam sees no state there
    cases = [Stateful(), Stateful(), shadowed, Tagged(), beam.Map(len).dofn, beam.Map(plain).dofn,
             beam.Map(Helper().method).dofn, beam.Map(Helper().method).dofn]
    for dofn in cases:
        for _ in range(2):
            got = specs(dofn)
            assert got == beams(dofn), dofn
    assert specs(cases[0]) == ({Stateful.BAG}, {Stateful.TIMER})
    assert specs(shadowed) == (set(), set())  # a class-level cache would say BAG and TIMER here
    first = specs(cases[0])
    first[0].clear()  # callers own the sets they get
    assert specs(cases[1]) == ({Stateful.BAG}, {Stateful.TIMER})
    userstate.validate_stateful_dofn(cases[0])


def test_uninstall_puts_beams_functions_back_and_install_again_works():
    signatures.install()
    memo_sig, memo_specs = core.get_signature, userstate.get_dofn_specs
    signatures.uninstall()
    try:
        assert core.get_signature is memo_sig.__wrapped__ and decorators.get_signature is memo_sig.__wrapped__
        assert userstate.get_dofn_specs is memo_specs.__wrapped__
    finally:
        signatures.install()
    assert getattr(core.get_signature, "__wrapped__", None) is memo_sig.__wrapped__
    assert getattr(userstate.get_dofn_specs, "__wrapped__", None) is memo_specs.__wrapped__


def test_a_pipeline_run_inspects_each_function_once_not_per_bundle(tmp_path):
    """The memo takes effect on a real local run: a second run of the same graph shape makes (almost) no
    new inspect.signature calls, where Beam alone makes them again for every bundle (guards against a
    Beam upgrade that renames what install() patches: install would then do nothing)."""
    signatures.install()
    calls = {"n": 0}
    real = inspect.signature

    def counting(*a, **kw):
        calls["n"] += 1
        return real(*a, **kw)

    def run() -> int:
        calls["n"] = 0
        with beam.Pipeline(options=finalize_options(PipelineOptions([]))) as p:
            _ = (p | beam.Create(range(20)) | beam.Map(lambda x: (x % 3, x)) | beam.GroupByKey()
                 | beam.MapTuple(lambda k, vs: (k, sum(vs))) | beam.Map(str))
        return calls["n"]

    inspect.signature = counting
    try:
        run()  # first run: every function inspected once
        again = run()
        signatures.uninstall()
        beams = run()
    finally:
        inspect.signature = real
        signatures.install()
    assert beams > 200, beams  # Beam's own introspection, per bundle and per method
    assert again < beams / 5, (again, beams)  # only the new lambdas of the second graph


def test_make_pipeline_shortens_the_state_samplers_period() -> None:
    """A bundle ends by joining its state sampler's thread, which sleeps up to the sampling period:
    make_pipeline sets it to pipelines.localrunner.statesampler.SAMPLING_PERIOD_MS (Beam's default: 200 ms)."""
    from apache_beam.runners.worker import statesampler

    from pipelines.localrunner import statesampler as sampler
    from pipelines.options import BuildOptions, finalize_options, make_pipeline

    sampler.uninstall()
    assert statesampler.StateSampler("t", None).sampling_period_ms == statesampler.DEFAULT_SAMPLING_PERIOD_MS == 200
    make_pipeline(finalize_options(BuildOptions([])))
    assert statesampler.StateSampler("t", None).sampling_period_ms == sampler.SAMPLING_PERIOD_MS == 20
    sampler.install()  # idempotent
    sampler.uninstall()
    assert statesampler.StateSampler("t", None).sampling_period_ms == 200
    sampler.install()
