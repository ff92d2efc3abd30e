"""The labeler at scale: synthetic runs of 1e7 and 1e8 rank-steps (1e9 with --sizes)
labeled out of core on Dask, against a plain streaming scan of the same files.

    python3 perf/labeler_scale.py [--sizes 1e7,1e8] [--ranks 1000] [--workers 2] [--in-memory-up-to 1e7]

A run of 1e9 rank-steps (``--sizes 1e9``) takes about 20 GB of Parquet in the
temporary folder and its labeling about 32 GB more of memory maps beside it.

Per size (R = --ranks, S = size / R):

1. ``faultlab.synthrun.write_run`` writes the run (steps partitioned by step block,
   planted faults of every kind the labeler labels). Not timed.
2. A FRESH child process per measurement (its peak memory its own):
   ``scan``: a pyarrow dataset scan of the steps table (``steps/``, or
   ``steps.parquet`` for a small run) streaming the columns the labeler reads, batch
   by batch (nothing kept);
   ``out of core``: ``label_run(out_of_core=True)`` on the labeler's embedded cluster
   (``faultlab.labeler.cluster.local_cluster``) of ``--workers`` worker processes started by the
   child (its peak RSS as ``VmHWM``; each worker's from the worker itself at the end);
   ``in memory``: ``label_run(out_of_core=False)`` up to ``--in-memory-up-to`` rows.
3. Prints, side by side, wall time, CPU time (user + system, of every process: the
   controller and the workers; a figure that a loaded machine inflates less than the
   wall time) and peak RSS of each process, the ratios of the out-of-core times to the
   scan's, when each out-of-core pass finished its first and last block (the time
   between two passes and after the last is the controller's), and whether every
   planted fault got a label the labeler found (source ``injected``) of its
   component within 5 steps of its span; the out-of-core labels must equal the
   in-memory ones where both ran.

Exit 1 when a planted fault is missed or the two labelers disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

#: disk a run takes here, its Parquet and its labeling's memory maps (bytes per rank-step,
#: with room: 20 and 32 bytes at 1e9)
DISK_BYTES_PER_RANK_STEP = 64

COLUMNS = ["run_id", "rank", "node", "peer_group", "step", "t_start", "compute_s", "comm_s", "step_s", "dataloader_s"]


def _peak_rss_bytes() -> int:
    """This process's peak resident set size (bytes): ``VmHWM`` of ``/proc/self/status``.
    Not ``ru_maxrss``: Linux keeps it across ``execve``, so a child started by
    ``subprocess`` (vfork + exec) reports at least its parent's peak (here the
    generator's); ``ru_maxrss`` only where there is no ``/proc``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu_seconds() -> float:
    """CPU seconds (user + system) this process has used."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def scan(run: str) -> dict:
    import pyarrow.dataset as ds

    from faultlab import steptable

    t, c = time.perf_counter(), _cpu_seconds()
    d = ds.dataset(str(steptable.steps_source(run)), format="parquet", partitioning="hive")
    rows = 0
    for b in d.to_batches(columns=[c for c in COLUMNS if c in d.schema.names]):
        rows += b.num_rows
    return {"seconds": time.perf_counter() - t, "cpu": _cpu_seconds() - c, "rows": rows,
            "rss": {"controller": _peak_rss_bytes()}}


def label(run: str, mode: str, workers: int) -> dict:
    from faultlab.labeler import label_run

    if mode == "in-memory":
        t, c = time.perf_counter(), _cpu_seconds()
        labels = label_run(run, out_of_core=False)
        return {"seconds": time.perf_counter() - t, "cpu": _cpu_seconds() - c, "rss": {"controller": _peak_rss_bytes()},
                "labels": _rows(labels)}
    from dask.distributed import Client

    from faultlab.labeler.cluster import close, local_cluster

    cl, security = local_cluster(workers)
    c = Client(cl, security=security)
    try:
        w0 = c.run(_cpu_seconds)
        t, c0 = time.perf_counter(), _cpu_seconds()
        passes: dict = {}  # each pass's first and last progress call (s from the start)

        def note(done, total, what):
            now = time.perf_counter() - t
            passes.setdefault(what, [now, now])[1] = now

        labels = label_run(run, out_of_core=True, client=c, progress=note)
        wall, cpu = time.perf_counter() - t, _cpu_seconds() - c0
        cpu += sum(v - w0[k] for k, v in c.run(_cpu_seconds).items())
        worker_rss = c.run(_peak_rss_bytes)
    finally:
        close(c, cl)
    rss = {"controller": _peak_rss_bytes(), **{f"worker {i}": v for i, v in enumerate(sorted(worker_rss.values()))}}
    return {"seconds": wall, "cpu": cpu, "rss": rss, "labels": _rows(labels), "passes": passes}


def _rows(labels) -> list[dict]:
    cols = ["component", "start_step", "end_step", "fault_id", "source", "slowdown"]
    return json.loads(labels[cols].to_json(orient="records"))


def _child(*args: str) -> dict:
    cp = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
    if cp.returncode:
        sys.stderr.write(cp.stderr[-4000:])
        raise SystemExit(f"child {args} failed")
    return json.loads(cp.stdout.strip().splitlines()[-1])


def found(faults: list[dict], labels: list[dict]) -> list[str]:
    """The planted faults without a label the labeler found (source ``injected``: not
    the ``injected-unmanifested`` row reconciliation writes for an injection no label
    matched) of their component within 5 steps of their span."""
    miss = []
    for f in faults:
        comp = "job" if f["rank"] is None else f"rank:{f['rank']}"
        ok = [r for r in labels if r["component"] == comp and r["fault_id"] == f["fault_id"] and r["source"] == "injected"
              and abs(r["start_step"] - f["a"]) <= 5 and abs(r["end_step"] - (f["b"] - 1)) <= 5]
        if not ok:
            miss.append(f["fault_id"])
    return miss


def gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e7,1e8")
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--in-memory-up-to", type=float, default=1e7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", nargs="+")
    a = ap.parse_args()
    if a.child:
        kind, run, *rest = a.child
        out = scan(run) if kind == "scan" else label(run, kind, int(rest[0]) if rest else 2)
        print(json.dumps(out))
        return 0
    from faultlab import synthrun

    bad = 0
    sizes = [float(x) for x in a.sizes.split(",")]
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if max(sizes) * DISK_BYTES_PER_RANK_STEP > free:
        raise SystemExit(f"--sizes: {max(sizes):.0e} rank-steps need about {max(sizes) * DISK_BYTES_PER_RANK_STEP / 1e9:.0f} GB "
                         f"free in {tempfile.gettempdir()} ({free / 1e9:.0f} GB free): set TMPDIR to a larger disk or a smaller size")
    for size in sizes:
        R = a.ranks
        S = int(round(size / R))
        d = tempfile.mkdtemp(prefix="labeler-scale-")
        try:
            t = time.perf_counter()
            info = synthrun.write_run(os.path.join(d, "run"), R, S, seed=a.seed)
            gen = time.perf_counter() - t
            run = os.path.join(d, "run")
            sc = _child("scan", run)
            ooc = _child("out-of-core", run, str(a.workers))
            mem = _child("in-memory", run) if R * S <= a.in_memory_up_to else None
            miss = found(info["faults"], ooc["labels"])
            same = mem is None or mem["labels"] == ooc["labels"]
            bad += bool(miss) or not same
            print(f"\n== {R:,} ranks x {S:,} steps = {R * S:.1e} rank-steps, {info['blocks']} block(s) "
                  f"(generated in {gen:.0f} s)")
            print(f"  {'':24} {'wall s':>8} {'x scan':>7} {'CPU s':>8} {'x scan':>7}  peak RSS per process")
            for name, m in (("plain pyarrow scan", sc), ("labeler out of core", ooc), ("labeler in memory", mem)):
                if m is None:
                    continue
                rss = ", ".join(f"{k} {gib(v)}" for k, v in m["rss"].items())
                print(f"  {name:24} {m['seconds']:8.1f} {m['seconds'] / sc['seconds']:7.1f} {m['cpu']:8.1f} "
                      f"{m['cpu'] / sc['cpu']:7.1f}  {rss}")
            print("  out-of-core passes (s from its start: first and last block done): "
                  + ", ".join(f"{k} {a:.1f}-{b:.1f}" for k, (a, b) in ooc["passes"].items()) + f", labels out at {ooc['seconds']:.1f}")
            print(f"  planted faults labeled (found, component, span within 5 steps): {len(info['faults']) - len(miss)}"
                  f"/{len(info['faults'])}" + (f", missed {miss}" if miss else ""))
            if mem is not None:
                print(f"  out-of-core labels equal the in-memory ones: {same}")
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
