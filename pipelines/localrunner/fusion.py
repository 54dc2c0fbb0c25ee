"""Beam's local runner writes a Flatten's inputs straight into the GroupByKey that reads it.

Every ``CoGroupByKey`` is a Flatten of its tagged inputs followed by a GroupByKey. Beam's
in-process ``FnApiRunner`` (2.77) never fuses a Flatten with more than one input
(``translations.sink_flattens``: "Actually attempt to sink rather than always materialize" is
its TODO): each input stage writes the Flatten's buffer, and one more stage reads that buffer,
decoding every element only to encode it again into the GroupByKey's buffer. A build moved its
documents that way twice at the verdict join (``Dedupe/JoinVerdicts``): 38 MB read, decoded and
re-encoded for a 20 MB input, and the same again, smaller, at every join of the near-duplicate
step.

``install`` adds one planning phase after ``sink_flattens``: where a materialized Flatten's only
consumer is a GroupByKey's write, the Flatten's input writes go to the GroupByKey's buffer
directly and the Flatten's read stage and the GroupByKey's write stage are dropped. The same
elements reach the same grouping buffer with the same coder (``fix_flatten_coders`` has given
every Flatten input the Flatten's coder, which is the GroupByKey's input), so what a build
computes and writes is unchanged; only the copy is gone. Planning of Dataflow and of any
other runner is untouched.

Replaces ``apache_beam.runners.portability.fn_api_runner.translations.sink_flattens`` (apache-beam
2.77.0), which ``FnApiRunner.create_stages`` looks up in that module when it plans;
``tests/test_fusion.py`` plans and runs real joins through it and
``tests/test_localrunner_internals.py`` checks what it relies on: both fail if a Beam upgrade moves
them. Installed by ``pipelines.options.make_pipeline`` for local runs (``uninstall``: Beam's own).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

_lock = threading.Lock()
_original: list[Any] = []  # Beam's sink_flattens while installed
_fused = {"flattens": 0}  # Flattens written straight into a GroupByKey by this process (``fused``)


def fused() -> int:
    """How many Flatten-into-GroupByKey rewrites this process has planned so far."""
    return _fused["flattens"]


def flattens_into_groups(stages: Iterable[Any], context: Any) -> Iterator[Any]:
    """The planning phase: each materialized Flatten read only by a GroupByKey write is written into
    that GroupByKey's buffer by its inputs. Runs on single-transform stages (before fusion)."""
    from apache_beam.runners.portability.fn_api_runner.translations import split_buffer_id
    from apache_beam.runners.worker.bundle_processor import DATA_INPUT_URN, DATA_OUTPUT_URN

    stages = list(stages)
    writes: dict[bytes, list[Any]] = defaultdict(list)  # materialized buffer -> the stages writing it
    consumers: dict[str, list[Any]] = defaultdict(list)  # PCollection -> the stages reading it
    for stage in stages:
        for t in stage.transforms:
            if t.spec.urn == DATA_OUTPUT_URN:
                writes[t.spec.payload].append(stage)
            for pcoll in t.inputs.values():
                consumers[pcoll].append(stage)
    pcolls = context.components.pcollections
    gone: dict[Any, frozenset] = {}  # a dropped stage -> what follows it now must follow instead
    for read in stages:
        if len(read.transforms) != 1 or read.transforms[0].spec.urn != DATA_INPUT_URN:
            continue
        t = read.transforms[0]
        buffer = t.spec.payload
        if split_buffer_id(buffer)[0] != "materialize" or not writes.get(buffer) or len(t.outputs) != 1:
            continue
        (flat,) = t.outputs.values()
        readers = consumers.get(flat, [])
        if len(readers) != 1 or len(readers[0].transforms) != 1:
            continue
        gbk_write = readers[0]
        w = gbk_write.transforms[0]
        if w.spec.urn != DATA_OUTPUT_URN or split_buffer_id(w.spec.payload)[0] != "group":
            continue
        inputs = [_only_input(s) for s in writes[buffer]]
        if any(pcolls[p].coder_id != pcolls[flat].coder_id
               or pcolls[p].windowing_strategy_id != pcolls[flat].windowing_strategy_id for p in inputs):
            continue  # not the bytes the grouping buffer decodes: leave Beam's plan
        for s in writes[buffer]:
            s.transforms[0].spec.payload = w.spec.payload
        # The grouping buffer decodes with the data channel coder of the GroupByKey's input, which no
        # data port names any more.
        context.add_data_channel_coder(flat)
        after = frozenset(writes[buffer])
        gone[read] = after
        gone[gbk_write] = after | read.must_follow | gbk_write.must_follow
        _fused["flattens"] += 1
    if not gone:
        yield from stages
        return

    def resolve(previous: frozenset) -> frozenset:
        out: set[Any] = set()
        todo = list(previous)
        while todo:
            s = todo.pop()
            if s in gone:
                todo.extend(gone[s] - out)
            else:
                out.add(s)
        return frozenset(out)

    for stage in stages:
        if stage in gone:
            continue
        if stage.must_follow & gone.keys():
            stage.must_follow = resolve(stage.must_follow)
        yield stage


def _only_input(stage: Any) -> str:
    (t,) = stage.transforms
    (pcoll,) = t.inputs.values()
    return pcoll


def _wrap(original):
    def sink_flattens(stages, pipeline_context):
        return flattens_into_groups(original(stages, pipeline_context), pipeline_context)
    sink_flattens.__wrapped__ = original
    return sink_flattens


def install() -> None:
    """Plan every FnApiRunner pipeline of this process with ``flattens_into_groups``. Idempotent."""
    from apache_beam.runners.portability.fn_api_runner import translations

    with _lock:
        if not _original:
            _original.append(translations.sink_flattens)
            translations.sink_flattens = _wrap(translations.sink_flattens)


def uninstall() -> None:
    """Beam's own planning back."""
    from apache_beam.runners.portability.fn_api_runner import translations

    with _lock:
        if _original:
            translations.sink_flattens = _original.pop()
