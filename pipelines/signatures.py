"""Memoize Beam's ``get_signature``: the per-bundle DoFn introspection is a fixed cost of every build.

Beam's portable runner builds a fresh operator graph for every bundle, and for each DoFn
it walks ``dir(dofn)`` and asks ``inspect.signature`` of every method, several times
(``userstate.get_dofn_specs`` via ``is_stateful_dofn`` and ``validate_stateful_dofn``,
``DoFnSignature``, ``MethodWrapper``). A demo-sized build made ~64k ``inspect.signature``
calls for a few hundred distinct functions: 1-2 s of a tiny build, the largest
single part of its fixed cost after imports (issue #16, item 7).

A signature is a pure function of the function object (its code, defaults and
annotations), and a bound method's is its function's without the first parameter,
whoever it is bound to. So the result is cached per function, weakly (a function that
goes away takes its entry with it); anything that is not a plain function or a method
of one (partials, builtins, callable objects) goes to Beam uncached. The cached value is
the very ``inspect.Signature`` Beam would compute; those objects are immutable.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_installed = False


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
    get_signature.__doc__ = original.__doc__
    return get_signature


def install() -> None:
    """Replace ``get_signature`` in the Beam modules that imported it by name (idempotent, thread-safe)."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        from apache_beam.transforms import core, ptransform, util
        from apache_beam.typehints import decorators

        fast = _memoized(decorators.get_signature)
        for module in (decorators, core, ptransform, util):
            if getattr(module, "get_signature", None) is fast.__wrapped__:  # type: ignore[attr-defined]
                module.get_signature = fast  # type: ignore[attr-defined]
        _installed = True
