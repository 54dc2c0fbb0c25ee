"""Beam's Python job server, with ``--sdk_worker_parallelism`` SDK workers per job: the portable test's runner.

    python tests/portable_jobserver.py --port P
    python -m apache_beam.runners.worker.worker_pool_main --service_port Q
    python -m pipelines.build ... --runner PortableRunner --job_endpoint localhost:P \\
        --environment_type EXTERNAL --environment_config localhost:Q --sdk_worker_parallelism 2

Beam's own ``python -m apache_beam.runners.portability.local_job_service_main`` runs every job on a
``FnApiRunner`` made with one worker whatever the job's options say, so a job gets one SDK worker
from the pool and every bundle runs in that one process. This is the same server
(``LocalJobServicer``, the same job API, artifact staging and ``FnApiRunner``) with one change: a
job's ``--sdk_worker_parallelism N`` (the portable option that, on Flink or Spark, sets the SDK
workers per task manager) asks the pool for N SDK workers, and the runner deals each stage's input
over all of them, so bundles of one stage run in different processes, as on a cluster. The
change reaches one Beam internal (``FnApiRunner._num_workers``, set by the Python runner from
``--direct_num_workers`` only when it runs a pipeline itself): ``tests/test_portable.py`` fails if
the pool starts fewer workers than asked. The workers reach the runner at ``localhost`` (the pool is
on this machine).

A worker that dies fails the job. Beam's runner waits for an instruction's answer forever once
the worker that was to give it is gone (measured: a build whose SDK worker was killed was still
waiting 150 s later), except in Docker environments, where it watches the container and fails
what the worker owed. This server does the same for an external pool's workers: when a worker's
control stream ends, every instruction still waiting on it fails with "SDK worker lost", and so
does the job.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time


def parallelism(options) -> int:
    """The job's ``--sdk_worker_parallelism`` (Beam's default, 1, when unset or 0)."""
    from apache_beam.options.pipeline_options import PortableOptions

    try:
        n = int(options.view_as(PortableOptions).sdk_worker_parallelism or 1)
    except (TypeError, ValueError):
        n = 1
    return max(n, 1)


def fail_what_lost_workers_owed() -> None:
    """A worker's control stream that ends with answers still owed answers them with an error (and what
    is sent to it later): the runner then fails the bundle as if the worker had reported the error, which
    also ends its wait for the bundle's data."""
    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    conn = worker_handlers.ControlConnection
    read, push = conn._read, conn.push

    def fail(future, why: str) -> None:
        future.set(beam_fn_api_pb2.InstructionResponse(instruction_id=future.instruction_id, error=why))

    def read_then_fail(self) -> None:
        try:
            read(self)
        except Exception:  # noqa: BLE001 - the stream of a killed worker ends in a gRPC error
            pass
        owed = list(self._futures_by_id.values())
        self.lost = (f"SDK worker lost: its process ended while the runner waited for {len(owed)} of its answers"
                     if owed else "SDK worker lost")
        for future in owed:
            fail(future, self.lost)

    def push_unless_lost(self, req):
        future = push(self, req)
        lost = getattr(self, "lost", None)
        if future is not None and lost is not None:
            fail(future, lost)
        return future

    conn._read, conn.push = read_then_fail, push_unless_lost


def count_received_bytes() -> list[int]:
    """Count the bytes of every element the workers send the runner (a one-item list, growing): each
    element that crosses a fused-stage boundary (a shuffle, a side input) comes through it once."""
    from apache_beam.runners.worker import data_plane

    total = [0]
    channel = data_plane._GrpcDataChannel
    receive = channel.input_elements

    def counted(self, *args, **kwargs):
        for element in receive(self, *args, **kwargs):
            total[0] += len(getattr(element, "data", b"") or b"")
            yield element

    channel.input_elements = counted
    return total


def main(argv: list[str] | None = None) -> int:
    from apache_beam.runners.portability import local_job_service
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    class ParallelBeamJob(local_job_service.BeamJob):
        """Beam's local job, run on as many SDK workers as the job asks for."""

        def _invoke_runner(self):
            from apache_beam.portability.api import beam_job_api_pb2

            self.set_state(beam_job_api_pb2.JobState.RUNNING)
            runner = fn_runner.FnApiRunner(provision_info=self._provision_info)
            runner._num_workers = parallelism(self.pipeline_options())
            try:
                return runner.run_via_runner_api(self._pipeline_proto, self.pipeline_options())
            finally:
                if args.count_bytes:
                    with open(args.count_bytes, "w") as f:
                        f.write(str(received[0]))

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port of the job API (0: any free port)")
    parser.add_argument("--port_file", help="write the port here once the server listens")
    parser.add_argument("--count_bytes", help="after each job, write here the bytes its workers sent the runner "
                                              "(every element that crossed a stage boundary), since the start")
    args = parser.parse_args(argv)
    received = count_received_bytes() if args.count_bytes else [0]
    logging.basicConfig(level=logging.WARNING)
    fail_what_lost_workers_owed()
    # The pool runs on this machine: its workers reach the runner at localhost. (Beam names the host by its
    # fully qualified name, which may resolve to an address a loopback-only network does not have.)
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    worker_handlers.ExternalWorkerHandler.host_from_worker = lambda self: "localhost"
    servicer = local_job_service.LocalJobServicer(beam_job_type=ParallelBeamJob)
    port = servicer.start_grpc_server(args.port)
    if args.port_file:
        with open(args.port_file, "w") as f:
            f.write(str(port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(3600)
    finally:
        servicer.stop()


if __name__ == "__main__":
    sys.exit(main())
