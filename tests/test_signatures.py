"""pipelines.signatures: Beam's get_signature memoized, same answers as inspect, installed by make_pipeline."""

from __future__ import annotations

import functools
import gc
import inspect

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import core, userstate
from apache_beam.typehints import decorators

from pipelines import signatures
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
    monkeypatch.setattr(signatures, "_installed", False)
    make_pipeline(finalize_options(PipelineOptions([])))
    for module in (decorators, core):
        assert getattr(module.get_signature, "__wrapped__", None) is not None, module.__name__
    assert decorators.get_signature is core.get_signature


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
