"""Memoize Beam's DoFn introspection: repeated for every bundle, it is a fixed cost of every build.

Beam's portable runner builds a fresh operator graph for every bundle, and for each DoFn
it walks ``dir(dofn)`` and asks ``inspect.signature`` of every method, several times
(``userstate.get_dofn_specs`` via ``is_stateful_dofn`` and ``validate_stateful_dofn``,
``DoFnSignature``, ``MethodWrapper``). A demo-sized build made ~64k ``inspect.signature``
calls for a few hundred distinct functions, and memoizing them takes a demo build from 6.7
to 3.85 CPU-s (``benchmarks/bench_fixed.py``): the largest part of a build's fixed cost after
imports.

A signature is a pure function of the function object (its code, defaults and
annotations), and a bound method's is its function's without the first parameter,
whoever it is bound to. So the result is cached per function, weakly (a function that
goes away takes its entry with it); anything that is not a plain function or a method
of one (partials, builtins, callable objects) goes to Beam uncached. The cached value is
the very ``inspect.Signature`` Beam would compute; those objects are immutable.

``userstate.get_dofn_specs`` (the state and timer specs of a DoFn, read from the defaults of
every one of its bound methods: ~2,000 calls in a demo build, 80 % of them for the
``CallableWrapperDoFn`` of a ``beam.Map``) is memoized per DoFn class and per what the instance
can change about the answer: the names its own attributes shadow, and the function of any bound
method among them. It is not cached where the instance itself answers (an ``_inspect_*`` hook
in use, as ``CallableWrapperDoFn._inspect_process`` is when ``process`` is a bound method) or
where attribute lookup is dynamic (``__getattr__``, ``__dir__``, ``__getattribute__``).
Callers get fresh sets each time, as from Beam.

Replaces ``apache_beam.typehints.decorators.get_signature`` (and the same function where
``apache_beam.transforms.core``, ``ptransform`` and ``util`` imported it by name) and
``apache_beam.transforms.userstate.get_dofn_specs`` (apache-beam 2.77.0). On a Beam without them
``install`` leaves Beam as it is, and ``tests/test_signatures.py`` fails. Installed by
``pipelines.options.make_pipeline`` and ``pipelines.localrunner.sdkworker``; ``uninstall``: Beam's own.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_installed = False
_originals: list[tuple[Any, str, Any]] = []  # (module, name, Beam's function), for uninstall


def _memoized(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    plain: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get_signature(func: Any) -> Any:
        if type(func) is types.FunctionType:
            table, key = plain, func
        elif type(func) is types.MethodType and type(func.__func__) is types.FunctionType:
            table, key = bound, func.__func__
        else:
            return original(func)
        try:
            return table[key]
        except KeyError:
            sig = table[key] = original(func)
            return sig

    get_signature.__wrapped__ = original  # type: ignore[attr-defined]
    get_signature._shardforge_memo = True  # type: ignore[attr-defined]
    get_signature.__doc__ = original.__doc__
    return get_signature


def _plain_class(cls: type) -> bool:
    """No dynamic attribute lookup: `dir` and `getattr` see the class's and the instance's dicts only."""
    return all(getattr(cls, name) is getattr(object, name) for name in ("__dir__", "__getattribute__")) \
        and not hasattr(cls, "__getattr__")


def _memoized_specs(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    # class -> (its `_inspect_*` hook names, or None when not cacheable; {instance key: specs})
    per_class: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get_dofn_specs(dofn: Any) -> Any:
        cls = type(dofn)
        own = getattr(dofn, "__dict__", None)
        try:
            hooked, table = per_class[cls]
        except KeyError:
            hooks = frozenset(n[len("_inspect_"):] for n in dir(cls) if n.startswith("_inspect_"))
            hooked, table = per_class[cls] = (hooks if _plain_class(cls) else None), {}
        # A hook (`_inspect_process`) answers for the instance when its method is a bound method.
        if own is None or hooked is None or any(isinstance(getattr(dofn, n, None), types.MethodType)
                                                for n in hooked):
            return original(dofn)
        # What Beam inspects: the class's methods, except where an instance attribute shadows a
        # name (a method there counts by its function, anything else hides the name).
        key = tuple((k, v.__func__ if isinstance(v, types.MethodType) else None) for k, v in own.items())
        try:
            states, timers = table[key]
        except KeyError:
            states, timers = table[key] = original(dofn)
        return set(states), set(timers)

    get_dofn_specs.__wrapped__ = original  # type: ignore[attr-defined]
    get_dofn_specs._shardforge_memo = True  # type: ignore[attr-defined]
    get_dofn_specs.__doc__ = original.__doc__
    return get_dofn_specs


def _beams(f: Any) -> Any:
    """Beam's function under any wrapper of ours (install never wraps twice)."""
    while getattr(f, "_shardforge_memo", False):
        f = f.__wrapped__
    return f


def install() -> None:
    """Memoize ``get_signature`` (in every Beam module that imported it by name) and
    ``userstate.get_dofn_specs``; idempotent, thread-safe, never wraps twice."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        from apache_beam.transforms import core, ptransform, userstate, util
        from apache_beam.typehints import decorators

        if not (callable(getattr(decorators, "get_signature", None))
                and callable(getattr(userstate, "get_dofn_specs", None))):
            # Another Beam than the pinned one: run it as it is (slower to start, same results);
            # tests/test_signatures.py fails on such a Beam so that this gets looked at.
            _installed = True
            return
        fast = _memoized(_beams(decorators.get_signature))
        for module in (decorators, core, ptransform, util):
            if _beams(getattr(module, "get_signature", None)) is fast.__wrapped__:  # type: ignore[attr-defined]
                _originals.append((module, "get_signature", fast.__wrapped__))  # type: ignore[attr-defined]
                module.get_signature = fast  # type: ignore[attr-defined]
        _originals.append((userstate, "get_dofn_specs", _beams(userstate.get_dofn_specs)))
        userstate.get_dofn_specs = _memoized_specs(_beams(userstate.get_dofn_specs))
        _installed = True


def uninstall() -> None:
    """Put Beam's own functions back (benchmarks/bench_fixed.py compares the two in one process)."""
    global _installed
    with _lock:
        while _originals:
            module, name, original = _originals.pop()
            setattr(module, name, original)
        _installed = False
