"""Benchmark: the distributed graph on Beam's portable runner (1 and 2 SDK workers) against the in-process build.

What the build costs when it runs the graph a distributed runner gets (``pipelines.options.RunnerPlan``:
documents spread after the read, dedupe verdicts joined by CoGroupByKey, components in rounds, no
spilling) on this machine, through a job server and an external worker pool on 127.0.0.1
(``tests/portable_jobserver.py``, ``python -m apache_beam.runners.worker.worker_pool_main``), against
the default local build (``FnApiRunner`` in-process, spilling past 32 MB). Per size and configuration,
one run of ``python -m pipelines.build`` in a fresh process (a fresh job server and pool for each
portable run):

* wall: the command's wall seconds;
* CPU: user + system seconds of every process of the run (the command, and for a portable run the
  job server, the pool and its SDK workers), each process's last reading sampled every 50 ms;
* peak RSS: the largest sum of the resident sets of all those processes at one sample;
* moved: the bytes of every element the SDK workers sent the job server (its ``--count_bytes``): on
  the portable runner each element that crosses a fused-stage boundary (a shuffle, a side input)
  goes through the runner once, so this is the data a cluster would shuffle, per input GB for
  docs/scaling.md.

Every configuration of one size builds the same input file, and the results say whether their manifests are byte-identical (they must be).

The input is ``tests/determinism.write_dup_corpus``: English-like articles with exact and near
duplicate families spread over 8 files (the dedupe stages have work to do), and its build config
(``tests/determinism.build_config``: 4,000-piece vocabulary, 512-token sequences).

Run: ``python benchmarks/bench_portable.py [--sizes 10,50] [--configs inprocess,portable1,portable2]``
(on 2 shared cores, load average 5: about 13 minutes for all six runs). Writes benchmarks/results/portable.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

from benchmarks.common import ROOT, bench_parser, command_line, free_port, machine, scratch_dir, write_results  # noqa: E402

CONFIGS = ("inprocess", "portable1", "portable2")
TICK = os.sysconf("SC_CLK_TCK")


def proc_children() -> dict[int, list[int]]:
    """ppid -> live child pids, from /proc/*/stat (zombies left out)."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":
                kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def tree(roots: list[int]) -> list[int]:
    """roots and every live descendant of them."""
    kids = proc_children()
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def cpu_and_rss(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, RSS kB) of a live process, else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return (int(fields[11]) + int(fields[12])) / TICK, rss


@dataclass
class Sampler:
    """Samples the process trees under ``roots`` every 50 ms: CPU per process (last reading) and the
    largest RSS sum."""

    roots: list[int]
    cpu: dict[int, float] = field(default_factory=dict)
    peak_kb: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        total = 0
        for pid in tree(self.roots):
            got = cpu_and_rss(pid)
            if got:
                self.cpu[pid] = max(got[0], self.cpu.get(pid, 0.0))
                total += got[1]
        self.peak_kb = max(self.peak_kb, total)

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.sample()


def start(cmd: list[str], port: int, env: dict[str, str]) -> subprocess.Popen:
    import socket

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{cmd[:3]} did not start")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_one(config: str, config_file: Path, out: Path) -> dict:
    """One build through the command line; its measurements."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    servers: list[subprocess.Popen] = []
    flags: list[str] = []
    moved = out.with_name(out.name + ".moved")
    if config.startswith("portable"):
        job_port, pool_port = free_port(), free_port()
        servers = [start([sys.executable, str(ROOT / "tests" / "portable_jobserver.py"), "--port", str(job_port),
                          "--count_bytes", str(moved)], job_port, env),
                   start([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", "--service_port",
                          str(pool_port)], pool_port, env)]
        flags = ["--runner", "PortableRunner", "--job_endpoint", f"localhost:{job_port}", "--environment_type",
                 "EXTERNAL", "--environment_config", f"localhost:{pool_port}",
                 "--sdk_worker_parallelism", config.removeprefix("portable")]
    try:
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "pipelines.build", "--config", str(config_file), "--output",
                                 str(out), "--json", *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=ROOT, env=env)
        sampler = Sampler([proc.pid, *(s.pid for s in servers)])
        before = {pid: s for pid in tree(sampler.roots) if (s := cpu_and_rss(pid))}  # the servers' idle start-up
        thread = threading.Thread(target=sampler.run, daemon=True)
        thread.start()
        stdout, stderr = proc.communicate()
        wall = time.monotonic() - t0
        sampler.stop.set()
        thread.join()
    finally:
        for s in reversed(servers):
            stop(s)
    if proc.returncode != 0:
        raise SystemExit(f"{config} failed:\n{stderr[-3000:]}")
    summary = json.loads(stdout[stdout.index("{"):])
    cpu = sum(s - (before[pid][0] if pid in before else 0.0) for pid, s in sampler.cpu.items())
    return {"config": config, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": sampler.peak_kb / 1024,
            "moved_mb": int(moved.read_text()) / 1e6 if servers else None, "processes": len(sampler.cpu),
            "kept": summary["kept"], "duplicates": summary["duplicates"],
            "manifest": hashlib.sha256((out / "manifest.json").read_bytes()).hexdigest()}


def table(rows: list[dict], sizes: dict[float, int]) -> list[str]:
    lines = ["| input | configuration | wall s | CPU s | peak RSS MB (process tree) | moved through the runner MB "
             "(per input GB) | processes | manifest |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per_gb = f"{r['moved_mb']:.0f} ({r['moved_mb'] / (sizes[r['mb']] / 1e9) / 1e3:.1f} GB)" if r["moved_mb"] else "-"
        lines.append(f"| {r['mb']:g} MB | {r['config']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['peak_rss_mb']:.0f} "
                     f"| {per_gb} | {r['processes']} | `{r['manifest'][:12]}` |")
    return lines


def main() -> None:
    ap = bench_parser(__doc__, "portable")
    ap.add_argument("--sizes", default="10,50", help="input sizes in MB (default: %(default)s)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)} (default: all)")
    args = ap.parse_args()
    from tests.determinism import build_config, write_dup_corpus

    sizes = [float(x) for x in args.sizes.split(",")]
    configs = args.configs.split(",")
    rows: list[dict] = []
    input_bytes: dict[float, int] = {}
    with scratch_dir("bench-portable-") as work:
        for mb in sizes:
            raw = work / f"raw-{mb:g}mb"
            write_dup_corpus(raw, mb, files=8)
            input_bytes[mb] = sum(p.stat().st_size for p in raw.glob("*.jsonl"))
            config_file = work / f"config-{mb:g}.json"
            config_file.write_text(json.dumps(build_config(raw, spans=False)))
            for config in configs:
                row = {"mb": mb, **run_one(config, config_file, work / f"out-{mb:g}-{config}")}
                rows.append(row)
                print(json.dumps(row), flush=True)
    same = {mb: len({r["manifest"] for r in rows if r["mb"] == mb}) == 1 for mb in sizes}
    lines = ["# The distributed graph on the portable runner vs the in-process build", "",
             f"`{command_line()}`", "", machine("apache-beam", load=True), "", *table(rows, input_bytes), "",
             "Byte-identical manifests across configurations: "
             + ", ".join(f"{mb:g} MB {'yes' if ok else 'NO'}" for mb, ok in same.items()), ""]
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
