"""The local runner's data in and out of a bundle, streamed: Beam's in-memory data channel patched.

Beam's ``FnApiRunner`` writes a stage's entire input into the in-memory data channel before the
bundle starts (one concatenated copy), and what the bundle writes piles up in the channel until
the bundle ends. With the spill installed (``pipelines.localrunner.spill``):

* **Input streams in.** ``BundleManager._send_input_to_worker`` hands the in-memory channel a lazy
  reference to the stage's input (the buffer's items, bytes or spill chunks) and
  ``InMemoryDataChannel.input_elements`` reads one item at a time while the bundle consumes it.
* **Output streams out.** ``InMemoryDataChannel.output_stream`` of a running bundle's expected
  outputs appends to the runner's buffers as the SDK flushes (every ~10 MB), not after the
  bundle ends; ``DataOutputOperation.finish`` drops a finished bundle's output stream (the runner
  caches every stage's bundle processor, which otherwise kept the last stream of each output with
  its C buffer, up to 16 MB, for the rest of the run: ~70 MB at 6 MB of input).
* **Freed memory back after a big bundle.** ``BundleManager.process_bundle`` returns the C heap's
  free pages (``pipelines.localrunner.heap.release_free_memory``) once a bundle moved more than
  16 MB in and out.

``targets()`` names every method replaced here; ``pipelines.localrunner.spill`` installs them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from pipelines.localrunner.heap import release_free_memory
from pipelines.localrunner.spill_files import resolve, settings

_TRIM_AFTER = 16 << 20  # bytes a bundle moved (in + out) past which the C heap's free pages are returned
_local = threading.local()  # .bundle: (bundle context manager, expected outputs) of the running bundle;
# .moved: bytes the running bundle moved in and out


def _count(n: int) -> None:
    _local.moved = getattr(_local, "moved", 0) + n


class _LazyInput:
    """A stage's input in the in-memory channel: read chunk by chunk while the bundle consumes it."""

    __slots__ = ("instruction_id", "transform_id", "items")

    def __init__(self, instruction_id: str, transform_id: str, items: Any):
        self.instruction_id, self.transform_id, self.items = instruction_id, transform_id, items

    def elements(self) -> Iterator[Any]:
        from apache_beam.portability.api import beam_fn_api_pb2

        for item in self.items or ():
            data = resolve(item)
            _count(len(data))
            if data:
                yield beam_fn_api_pb2.Elements.Data(instruction_id=self.instruction_id,
                                                    transform_id=self.transform_id, data=data)


def _wrap_send_input(original):
    def _send_input_to_worker(self: Any, process_bundle_id: str, read_transform_id: str, byte_streams: Any) -> None:
        from apache_beam.runners.worker.data_plane import InMemoryDataChannel

        conn = self._worker_handler.data_conn
        if settings() is not None and isinstance(conn, InMemoryDataChannel):
            conn.inverse()._inputs.append(_LazyInput(process_bundle_id, read_transform_id, byte_streams))
            return
        original(self, process_bundle_id, read_transform_id, (resolve(x) for x in (byte_streams or ())))
    return _send_input_to_worker


def _wrap_input_elements(original):
    def input_elements(self: Any, instruction_id: str, unused_expected_inputs: Any, abort_callback: Any = None):
        if not any(type(e) is _LazyInput for e in self._inputs):
            yield from original(self, instruction_id, unused_expected_inputs, abort_callback)
            return
        from apache_beam.portability.api import beam_fn_api_pb2

        other = []
        for element in self._inputs:
            if element.instruction_id != instruction_id:
                other.append(element)
            elif type(element) is _LazyInput:
                yield from element.elements()
            elif isinstance(element, beam_fn_api_pb2.Elements.Timers):
                if not element.is_last:
                    yield element
            elif element.data or element.is_last:
                yield element
        self._inputs = other
    return input_elements


def _wrap_output_stream(original):
    def output_stream(self: Any, instruction_id: str, transform_id: str) -> Any:
        bundle = getattr(_local, "bundle", None)
        if bundle is None or transform_id not in bundle[1]:
            return original(self, instruction_id, transform_id)
        from apache_beam.runners.portability.fn_api_runner.fn_runner import BundleManager
        from apache_beam.runners.worker.data_plane import ClosableOutputStream

        context, expected_outputs = bundle

        def into_buffer(data: bytes) -> None:  # what the runner does with each output after the bundle
            _count(len(data))
            if data:
                with BundleManager._lock:
                    context.get_buffer(expected_outputs[transform_id], transform_id).append(data)

        return ClosableOutputStream.create(into_buffer, into_buffer, self._data_buffer_time_limit_ms)
    return output_stream


def wrap_output_finish(original):
    """``DataOutputOperation.finish`` that drops the output stream once it has handed its bytes over
    (marked ``drops_stream``: ``spill.release_finished_streams`` never wraps twice)."""
    def finish(self: Any) -> None:
        original(self)
        # The stream has handed its bytes over; without this the cached bundle processor keeps
        # it, and its C buffer (up to 16 MB: it flushes past 10 MB and keeps its capacity), for
        # the rest of the run: one per output of every fused stage. The next bundle sets a new one.
        self.output_stream = None
    finish.drops_stream = True  # type: ignore[attr-defined]
    finish.__wrapped__ = original  # type: ignore[attr-defined]
    return finish


def _wrap_process_bundle(original):
    def process_bundle(self: Any, inputs: Any, expected_outputs: Any, fired_timers: Any,
                       expected_output_timers: Any, dry_run: bool = False) -> Any:
        if settings() is None or dry_run:
            return original(self, inputs, expected_outputs, fired_timers, expected_output_timers, dry_run)
        previous = getattr(_local, "bundle", None), getattr(_local, "moved", 0)
        _local.bundle, _local.moved = (self.bundle_context_manager, expected_outputs), 0
        try:
            return original(self, inputs, expected_outputs, fired_timers, expected_output_timers, dry_run)
        finally:
            # A big bundle decodes, sorts and converts its elements, then frees them; glibc and
            # pyarrow's pool keep the freed pages resident, so without this the process's RSS is
            # the high-water mark of every stage before, not of the current one (~7 ms for a
            # 600 MB heap). No cyclic collection here: a bundle leaves few cycles (13-1,869 objects
            # at 30 MB), and a full collection after each big bundle cost 1.7 % of a 100 MB
            # build's CPU (14 of them, ~160 ms each: it scans every object alive).
            if _local.moved > _TRIM_AFTER:
                release_free_memory(collect=False)
            _local.bundle, _local.moved = previous
    return process_bundle


def targets() -> list[tuple[Any, str, Any]]:
    """(class, method, replacement) of every channel and bundle patch; AttributeError or KeyError on
    a Beam without these classes or methods."""
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.worker import bundle_processor, data_plane

    out = bundle_processor.DataOutputOperation
    bm, ch = fn_runner.BundleManager, data_plane.InMemoryDataChannel
    return [
        (bm, "process_bundle", _wrap_process_bundle(bm.__dict__["process_bundle"])),
        (bm, "_send_input_to_worker", _wrap_send_input(bm.__dict__["_send_input_to_worker"])),
        (ch, "input_elements", _wrap_input_elements(ch.__dict__["input_elements"])),
        (ch, "output_stream", _wrap_output_stream(ch.__dict__["output_stream"])),
        (out, "finish", wrap_output_finish(out.__dict__["finish"])),
    ]
