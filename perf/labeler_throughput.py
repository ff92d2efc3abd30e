"""Labeler throughput: label a synthetic 1,024-rank x 20,000-step run (20.5M rank-steps)
and compare with the time to merely read the same Parquet.

    python3 perf/labeler_throughput.py [--ranks 1024 --steps 20000 --seed 0 --repeat 2]

1. A child process generates a synthetic ``steps`` table (faultlab.schema.STEPS) of a
   synchronous data-parallel job, 8 peer groups (pipeline stages of slightly unequal
   cost), 8 ranks per node: per-rank compute ~30 ms x group scale with 3% noise and a
   rare single-step spike (a GC pause: never a label), an all-reduce of ~10 ms;
   ``step_s`` = max compute + all-reduce, ``comm_s`` = step_s - own compute (the
   straggler waits least), ``gc_s`` the spike's extra time. Injected with known intervals: three stragglers (compute x
   2.0, 1.6, 3.0 on one rank each) and a job-wide slowdown (+30 ms on every all-reduce,
   a slow NIC), plus a matching ``injections`` table. It writes
   ``steps.parquet`` (row order step-major, as a merged log) to a temp dir. Not timed.
2. A FRESH child per measurement (so its peak memory is its own):
   ``read plain``: ``pq.read_table(path).to_pandas()`` (what RunDir.read_table does);
   ``read lean``:  ``faultlab.labeler.read_steps(path)`` (what label_run reads with:
   the STEPS columns, strings as categoricals);
   ``read + label``: the ``--reader`` read (lean by default) +
   ``faultlab.labeler.label(steps, injections)``.
   Timed from after the imports; peak memory as ``ru_maxrss`` (whole process) and
   ``VmHWM``. ``label`` runs ``--repeat`` times, each in its own process; the labels
   of every repeat must be identical (deterministic). The machine may be shared:
   the best of the repeats is reported, and every run is listed.
3. Prints both side by side, the ratio, and for every injected interval whether a
   label of the right component with the right fault_id was found and how far its
   first/last step is from the truth.

Exit 1 when read + label takes over 30 s (the best of the repeats: the machine may
be shared), peak memory is over 4 GiB (the largest of the repeats), a repeat gives
different labels, or an injected interval is not found (a label of the right
component with the injection's fault_id, first and last step within 5 of the truth).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

LIMIT_S = 30.0
LIMIT_BYTES = 4 << 30
T0 = 1_700_000_000.0


# -- generation (child) ---------------------------------------------------------------


def truth(R: int, S: int) -> list[dict]:
    """The injected faults: component, fault type, factor/extra, steps [a, b)."""

    def at(frac: float) -> int:
        return int(S * frac)

    return [
        {"fault_id": "f-straggle-a", "fault_type": "cpu-contention", "rank": 17 % R, "factor": 2.0,
         "a": at(0.15), "b": at(0.18)},
        {"fault_id": "f-straggle-b", "fault_type": "gpu-clock-cap", "rank": (R // 2 + 11) % R, "factor": 1.6,
         "a": at(0.40), "b": at(0.45)},
        {"fault_id": "f-straggle-c", "fault_type": "process-pause", "rank": (R - 24) % R, "factor": 3.0,
         "a": at(0.60), "b": at(0.61)},
        {"fault_id": "f-nic", "fault_type": "nic-slow", "rank": None, "extra_s": 0.03,
         "a": at(0.75), "b": at(0.80)},
    ]


def generate(path: str, R: int, S: int, seed: int) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from faultlab import schema

    rng = np.random.default_rng(seed)
    n_groups = 8 if R >= 8 else 1
    group = (np.arange(R) * n_groups) // R  # contiguous stages
    gscale = 1.0 + 0.02 * np.arange(n_groups)
    rank_scale = gscale[group] * (1.0 + 0.005 * rng.standard_normal(R))  # per-device spread
    c = 0.03 * rank_scale[None, :] * (1.0 + 0.03 * rng.standard_normal((S, R)))
    # rare single-step spikes (a GC pause on one rank): 1 in 20,000 cells, 2-4x
    n_spk = max(1, (S * R) // 20_000)
    si, ri = rng.integers(0, S, n_spk), rng.integers(0, R, n_spk)
    gc = np.zeros((S, R))
    gc[si, ri] = c[si, ri] * (rng.uniform(2.0, 4.0, n_spk) - 1.0)
    c += gc
    core = 0.01 * (1.0 + 0.03 * rng.standard_normal(S))
    faults = truth(R, S)
    for f in faults:
        if f["rank"] is None:
            core[f["a"] : f["b"]] += f["extra_s"]
        else:
            c[f["a"] : f["b"], f["rank"]] *= f["factor"]
    step = c.max(axis=1) + core
    t = T0 + np.concatenate([[0.0], np.cumsum(step)[:-1]])
    jitter = rng.uniform(0.0, 5e-4, (S, R))  # ranks leave the previous collective at slightly different times

    node_names = pa.array([f"node{k:03d}" for k in range(-(-R // 8))])
    group_names = pa.array([f"stage{k}" for k in range(n_groups)])
    ranks = np.tile(np.arange(R, dtype=np.int32), S)
    steps_col = np.repeat(np.arange(S, dtype=np.int64), R)
    node_idx = pa.array(np.tile((np.arange(R) // 8).astype(np.int32), S))
    grp_idx = pa.array(np.tile(group.astype(np.int32), S))
    cols = {
        "run_id": pa.DictionaryArray.from_arrays(pa.array(np.zeros(S * R, dtype=np.int32)),
                                                 pa.array(["synthetic-1024"])).cast(pa.string()),
        "rank": pa.array(ranks),
        "node": pa.DictionaryArray.from_arrays(node_idx, node_names).cast(pa.string()),
        "peer_group": pa.DictionaryArray.from_arrays(grp_idx, group_names).cast(pa.string()),
        "step": pa.array(steps_col),
        "t_start": pa.array((t[:, None] + jitter).ravel()),
        "compute_s": pa.array(c.ravel()),
        "comm_s": pa.array((step[:, None] - c).ravel()),
        "step_s": pa.array(np.repeat(step, R)),
        "gc_s": pa.array(gc.ravel()),
    }
    # any other (optional) column of the schema: not measured
    table = pa.table({f.name: cols.get(f.name, pa.nulls(S * R, f.type)) for f in schema.STEPS}, schema=schema.STEPS)
    del cols
    pq.write_table(table, path)
    inj = []
    for f in faults:
        node = "node000" if f["rank"] is None else f"node{f['rank'] // 8:03d}"
        target = "eth0" if f["rank"] is None else f"rank:{f['rank']}"
        inj.append({"run_id": "synthetic-1024", "fault_id": f["fault_id"], "fault_type": f["fault_type"],
                    "node": node, "target": target, "start_ts": float(t[f["a"]]),
                    "end_ts": float(t[f["b"] - 1] + step[f["b"] - 1]), "params": "{}", "severity": 1.0,
                    "status": "reverted", "verified": True, "evidence": "{}"})
    return {"faults": faults, "injections": inj, "rows": int(S * R), "bytes": os.path.getsize(path)}


# -- measurement (child) --------------------------------------------------------------


def _peak() -> dict:
    import resource

    hwm = 0
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
    return {"ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "vmhwm_bytes": hwm}


def measure(mode: str, path: str, meta_path: str, profile: str | None) -> dict:
    import hashlib
    import resource

    import pandas as pd
    import pyarrow.parquet as pq
    from faultlab.labeler import label, read_steps

    meta = _load(meta_path)
    inj = pd.DataFrame(meta["injections"])
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    c0 = cpu()
    t0 = time.perf_counter()
    steps = pq.read_table(path).to_pandas() if mode in ("read-plain", "label-plain") else read_steps(path)
    t_read = time.perf_counter() - t0
    out: dict = {"mode": mode, "rows": len(steps), "read_s": t_read}
    if mode.startswith("label"):
        lab = label(steps, inj)
        out["total_s"] = time.perf_counter() - t0
        out["label_s"] = out["total_s"] - t_read
        out["cpu_s"] = cpu() - c0
        out["labels"] = json.loads(lab.drop(columns=["evidence"]).to_json(orient="records"))
        out["sha256"] = hashlib.sha256(pd.util.hash_pandas_object(lab, index=True).values.tobytes()).hexdigest()
    else:
        out["total_s"] = t_read
        out["cpu_s"] = cpu() - c0
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    out.update(_peak())
    return out


# -- driver ---------------------------------------------------------------------------


def _child(*args: str) -> dict:
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit(f"child {args[0]} failed with exit code {p.returncode}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _load(path: str) -> dict:
    with open(path) as fh:
        return json.load(fh)


def found(faults: list[dict], labels: list[dict]) -> list[dict]:
    """Per injected fault: the label with its fault_id, and its step offsets from the truth."""
    rows = []
    for f in faults:
        comp = "job" if f["rank"] is None else f"rank:{f['rank']}"
        hit = [x for x in labels if x["fault_id"] == f["fault_id"] and x["source"] == "injected"]
        row = {"fault": f["fault_id"], "component": comp, "steps": f"{f['a']}-{f['b'] - 1}", "found": False}
        if hit:
            x = min(hit, key=lambda x: abs(x["start_step"] - f["a"]))
            d0, d1 = x["start_step"] - f["a"], x["end_step"] - (f["b"] - 1)
            row.update(found=x["component"] == comp and abs(d0) <= 5 and abs(d1) <= 5,
                       label=f"{x['component']} {x['start_step']}-{x['end_step']}",
                       onset_d=d0, end_d=d1, slowdown=round(x["slowdown"], 3), n_labels=len(hit))
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2, help="label runs, each in a fresh process (determinism check)")
    ap.add_argument("--reader", choices=("lean", "plain"), default="lean",
                    help="read before labeling: faultlab.labeler.read_steps (lean) or pq.read_table().to_pandas()")
    ap.add_argument("--profile", default=None, help="write a cProfile of the first label run to this file")
    ap.add_argument("--keep", default=None, help="write the Parquet here and keep it (default: a temp dir)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.child:
        kind = a.child[0]
        if kind == "generate":
            _, path, meta_path, R, S, seed = a.child
            meta = generate(path, int(R), int(S), int(seed))
            with open(meta_path, "w") as fh:
                json.dump(meta, fh)
            print(json.dumps({"rows": meta["rows"], "bytes": meta["bytes"]}))
        else:
            _, path, meta_path, prof = a.child
            print(json.dumps(measure(kind, path, meta_path, None if prof == "-" else prof)))
        return 0

    tmp = None
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
        d = a.keep
    else:
        tmp = tempfile.TemporaryDirectory(prefix="faultlab-perf-")
        d = tmp.name
    path, meta_path = os.path.join(d, "steps.parquet"), os.path.join(d, "meta.json")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall times on a shared machine vary)")
    t = time.perf_counter()
    args = [a.ranks, a.steps, a.seed]
    if a.keep and os.path.exists(path) and os.path.exists(meta_path) and _load(meta_path).get("args") == args:
        g = {"rows": a.ranks * a.steps, "bytes": os.path.getsize(path)}  # reuse the kept file
    else:
        g = _child("generate", path, meta_path, str(a.ranks), str(a.steps), str(a.seed))
        meta = _load(meta_path)
        meta["args"] = args
        with open(meta_path, "w") as fh:
            json.dump(meta, fh)
    meta = _load(meta_path)
    print(f"synthetic steps: {a.ranks} ranks x {a.steps} steps = {g['rows']:,} rows, "
          f"{g['bytes'] / 2**20:.0f} MiB Parquet ({time.perf_counter() - t:.1f} s to generate, not counted)")

    rp = [_child("read-plain", path, meta_path, "-") for _ in range(max(1, a.repeat))]
    rl = [_child("read-lean", path, meta_path, "-") for _ in range(max(1, a.repeat))]
    lmode = "label" if a.reader == "lean" else "label-plain"
    labs = [_child(lmode, path, meta_path, (a.profile if (i == 0 and a.profile) else "-")) for i in range(max(1, a.repeat))]
    rp_b, rl_b = min(rp, key=lambda x: x["total_s"]), min(rl, key=lambda x: x["total_s"])
    best = min(labs, key=lambda x: x["total_s"])
    gib = 2**30

    def runs(xs):
        return ", ".join(f"{x['total_s']:.2f}" for x in xs)

    print()
    print(f"{'':30s}{'read plain':>12s}{'read lean':>12s}{'read ' + a.reader + ' + label':>20s}")
    print(f"{f'wall time (s), best of {len(labs)}':30s}{rp_b['total_s']:12.2f}{rl_b['total_s']:12.2f}{best['total_s']:20.2f}"
          f"   (= read {best['read_s']:.2f} + label {best['label_s']:.2f})")
    print(f"{'  CPU s (user+sys), that run':30s}{rp_b['cpu_s']:12.2f}{rl_b['cpu_s']:12.2f}{best['cpu_s']:20.2f}")
    print(f"{'peak RSS, ru_maxrss (GiB), max':30s}{max(x['ru_maxrss_bytes'] for x in rp) / gib:12.2f}"
          f"{max(x['ru_maxrss_bytes'] for x in rl) / gib:12.2f}{max(x['ru_maxrss_bytes'] for x in labs) / gib:20.2f}")
    print(f"{'peak RSS, VmHWM (GiB), max':30s}{max(x['vmhwm_bytes'] for x in rp) / gib:12.2f}"
          f"{max(x['vmhwm_bytes'] for x in rl) / gib:12.2f}{max(x['vmhwm_bytes'] for x in labs) / gib:20.2f}")
    print(f"ratio (read + label) / plain read: {best['total_s'] / rp_b['total_s']:.2f}x;  "
          f"/ lean read: {best['total_s'] / rl_b['total_s']:.2f}x;  label alone / plain read: "
          f"{best['label_s'] / rp_b['total_s']:.2f}x")
    print(f"every run (s): read plain {runs(rp)}; read lean {runs(rl)}; read + label {runs(labs)}")
    same = len({x["sha256"] for x in labs}) == 1
    print(f"deterministic over {len(labs)} fresh process(es): {'yes' if same else 'NO'} (labels sha256 {labs[0]['sha256'][:16]})")
    res = found(meta["faults"], best["labels"])
    print()
    print(f"{'fault':14s}{'component':11s}{'truth steps':>14s}  {'label':22s}{'onset d':>8s}{'end d':>7s}{'slowdown':>9s}  found")
    for r in res:
        print(f"{r['fault']:14s}{r['component']:11s}{r['steps']:>14s}  {r.get('label', '-'):22s}"
              f"{r.get('onset_d', ''):>8}{r.get('end_d', ''):>7}{r.get('slowdown', ''):>9}  {'yes' if r['found'] else 'NO'}")
    other = [x for x in best["labels"] if x["source"] != "injected"]
    print(f"other labels: {len(other)}" + ("" if not other else " -> " + "; ".join(
        f"{x['component']} {x['start_step']}-{x['end_step']} {x['source']} x{x['slowdown']:.2f}" for x in other[:8])))

    bad = []
    if best["total_s"] > LIMIT_S:
        bad.append(f"read + label {best['total_s']:.1f} s > {LIMIT_S:.0f} s")
    peak = max(x["ru_maxrss_bytes"] for x in labs)
    if peak > LIMIT_BYTES:
        bad.append(f"peak RSS {peak / gib:.2f} GiB > 4 GiB")
    if not same:
        bad.append("labels differ between runs")
    if not all(r["found"] for r in res):
        bad.append("an injected interval was not found")
    print()
    print("PASS" if not bad else "FAIL: " + "; ".join(bad))
    if tmp is not None:
        tmp.cleanup()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
