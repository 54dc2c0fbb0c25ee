"""Everything that tunes or works around Apache Beam's local runner (FnApiRunner, apache-beam 2.77.0).

README.md (this folder) lists each patch, the Beam internals it touches, how it is switched off and
the test that fails when a Beam upgrade moves them. The modules:

* ``fusion``: a Flatten read only by a GroupByKey is written straight into the GroupByKey's buffer.
* ``signatures``: Beam's DoFn introspection (``get_signature``, ``get_dofn_specs``) memoized.
* ``spill``: stage data spilled to disk and streamed through bundles (``install``, ``to_disk``).
* ``spill_files``: the spill settings, spill files and chunks the spill's patches share.
* ``spill_buffers``: Beam's ``ListBuffer`` / ``GroupingBuffer`` patched to keep their data on disk.
* ``spill_channel``: the in-memory data channel patched to stream a bundle's input and output.
* ``statesampler``: Beam's state sampler wakes every 20 ms, so a bundle's end waits less; a Ctrl-C while
  a bundle starts it leaves no thread that keeps the process from exiting.
* ``heap``: freed memory back to the OS; pyarrow on glibc's malloc, two arenas, a rarer collector.
* ``docpool``: the document processes beside the runner (``--doc_processes N``).
* ``docworker``: the entry of one document process (``python -m pipelines.localrunner.docworker``).
* ``batching``: batches made inside a DoFn (``BundleBatches``), handed to the pool (``PooledBatches``).
* ``sdkworker``: the entry of a worker process of ``--direct_num_workers N``, quiet and tuned.
* ``workers``: a run's end tells every worker process to end before it waits for one, and a worker
  says nothing of a bundle its closed control stream cut short.
* ``preflight``: what a command checks and sets up before it imports Beam.
* ``progress``: progress bars of a local build on a terminal.

This ``__init__`` imports nothing: the document processes, the SDK worker entry and the preflight
run before Beam is imported. The modules import nothing of ``pipelines`` outside this folder but the
package itself (``import pipelines`` in ``docpool`` and ``sdkworker``).
"""
