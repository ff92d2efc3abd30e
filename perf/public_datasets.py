"""Every importer on every public dataset, with the default settings, side by side.

    python3 perf/public_datasets.py [--public ../shared/datasets/public] [--keep DIR]

Datasets (``../shared/datasets/public/`` relative to the project root):

- ``perseus-cluster_A``: Perseus drive telemetry (FAST'23). Checked against
  ``slow_drives.csv`` (the operators' confirmed fail-slow drives): are both labeled,
  and the drive-level precision and recall of the drive verdict (``perseus``:
  ``drives.json``; ``long``: the components judged ``persistent`` in
  ``components.parquet``; both the shared rule of :mod:`faultlab.labeler.verdict`) and
  the verdict's ranking: Acc@1 and Acc@k (confirmed drives in the top k / k, k = the
  confirmed drives).
- ``alibaba-pai-minibatch``: per-worker mini-batch times of two PAI jobs
  (alibaba/clusterdata), read as published by the ``pai-minibatch`` importer: the
  labels per job, against the publisher's prose (job 2: steady offsets, no episode;
  job 3: several stragglers).
- synthetic drive clusters (:data:`faultlab.labeler.synthetic.CLUSTERS`: 0, 1 and 30%
  fail-slow drives, with hard negatives, offset drives and noisy hosts; each also
  drawn from a seed not used while building, ``-s7001``) and the two
  halves of cluster A's hosts (held-out splits): drive-level precision and recall of
  the verdict, Acc@1 and Acc@k of the ranking (k = the confirmed drives), with the
  ``perseus`` and ``long`` importers and the same defaults.
- ``straggler-trace-ST``: a StragglerAnalysis trace (OSDI'25). Checked against
  ``result-ST.json`` (the upstream what-if: S, and S by stage / DP rank / op type) and
  ``ms-ST.json``/``mw-ST.json`` (M_S, M_W): S error in %, the straggling stage.

Importers: ``perseus`` and ``straggler-trace`` on their own format; ``long`` on both,
after converting them here (not timed) to the generic long format: Perseus as
``component=drive:HOST/DISK, peer_group=HOST, metric=latency, load=throughput`` (and,
for reference, ``long, no load``: the same without the load column: latency alone); the trace as
``component=rank:N, peer_group=stage:S, timestamp=step, metric=compute_s`` (forward +
backward compute per step). A pair whose format does not fit is ``n/a``.

Each run is a fresh child process (``--child``), so its peak memory
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``; Linux keeps it across exec, so the
parent stays small: it imports neither pandas nor pyarrow and converts in children too)
is its own; runtime is from after the imports to the written outputs. The answer files
are read only here, after the importers ran, never by them.

Exit 1 when a check fails: a confirmed Perseus drive not judged fail-slow by
``perseus`` or ``long`` (cluster A and both halves), S off by 3% or more, the
straggling stage not stage 3, or a label on PAI job 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(fmt: str, path: str, out: str) -> None:
    """Run one importer and print one JSON line with its figures."""
    from faultlab.labeler.importers import import_path, write_outputs

    t0 = time.perf_counter()
    res = import_path(fmt, path)
    written = write_outputs(res, out)
    dt = time.perf_counter() - t0
    lab = res.labels
    doc = {
        "runtime_s": dt,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "n_labels": int(len(lab)),
        "components": sorted(set(lab["component"].astype(str))) if len(lab) else [],
        "label_time_s": {},
        "written": sorted(written),
    }
    if len(lab):
        span = (lab["end_ts"] - lab["start_ts"]).fillna(0.0)
        doc["label_time_s"] = {str(k): float(v) for k, v in span.groupby(lab["component"].astype(str)).sum().items()}
    if "jobs" in res.info:  # PAI mini-batch jobs
        doc["jobs"] = res.info["jobs"]
        doc["label_list"] = [[str(r.component), float(r.start_ts), float(r.end_ts), float(r.slowdown)]
                             for r in lab.itertuples(index=False)]
    if res.whatif is not None:
        wi = res.whatif
        doc["whatif"] = {k: wi.get(k) for k in ("slowdown", "slowdown_measured", "launch_slowdown", "decomposition",
                                                "removal_share", "ms", "mw", "stragglers", "n_steps")}
    if res.components is not None:  # the component verdict (long), by rank
        doc["component_rank"] = [{"component": str(r.component), "fraction": float(r.labeled_fraction),
                                  "level": float(r.level), "level_z": float(r.level_z),
                                  "persistent": bool(r.persistent)}
                                 for r in res.components.itertuples(index=False)]
    if "drives.json" in res.extra:  # the drive verdict (perseus), by rank
        doc["drives"] = res.extra["drives.json"]["drives"][:8]
        doc["drive_rank"] = [{"drive": d["drive"], "failslow": bool(d["failslow"])}
                             for d in res.extra["drives.json"]["drives"]]
    try:
        doc["vm_hwm_mb"] = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024.0
    except (OSError, StopIteration):
        pass
    from faultlab.schema import json_safe

    print(json.dumps(json_safe(doc)))


def run_child(fmt: str, path: Path, out: Path) -> dict:
    cp = subprocess.run([sys.executable, __file__, "--child", fmt, str(path), str(out)], capture_output=True, text=True,
                        cwd=ROOT, timeout=900)
    if cp.returncode != 0:
        return {"error": (cp.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(cp.stdout.strip().splitlines()[-1])


def convert(kind: str, src: Path, dst: Path) -> Path:
    """Convert a dataset to the long format in a child process (keeps the parent small)."""
    cp = subprocess.run([sys.executable, __file__, "--convert", kind, str(src), str(dst)], capture_output=True, text=True,
                        cwd=ROOT, timeout=900, check=True)
    return Path(cp.stdout.strip().splitlines()[-1])


def prepare_drives(name: str, public: Path, dst: Path) -> Path:
    """Write one drive dataset's ``metrics.parquet`` and ``truth.json`` (the confirmed
    drives, read here, never by an importer) into ``dst``; returns ``dst``.

    ``perseus-cluster_A``: the public subset as it is; ``perseus-cluster_A-half0/1``:
    every other host of it (a held-out split); ``synthetic-*``: the clusters of
    :data:`faultlab.labeler.synthetic.CLUSTERS` (generated from their seeds)."""
    import pandas as pd

    from faultlab.labeler import synthetic

    dst.mkdir(parents=True, exist_ok=True)
    if name.startswith("perseus-cluster_A"):
        src = public / "perseus-cluster_A"
        with open(src / "slow_drives.csv", newline="") as fh:
            truth = sorted(f"{r['host_name']}/{r['disk_id']}" for r in csv.DictReader(fh))
        df = pd.read_parquet(src / "metrics.parquet")
        if name.endswith(("-half0", "-half1")):
            df = synthetic.half_hosts(df, int(name[-1]))
            hosts = set(df["host"].astype(str))
            truth = [t for t in truth if t.split("/", 1)[0] in hosts]
    else:
        from dataclasses import replace

        base, _, seed = name.partition("-s")
        spec = next(c for c in synthetic.CLUSTERS if c.name == base)
        if seed:  # a held-out seed of the same cluster
            spec = replace(spec, name=name, seed=int(seed))
        df, truth = synthetic.generate(spec)
    df.to_parquet(dst / "metrics.parquet", index=False)
    (dst / "truth.json").write_text(json.dumps(truth))
    return dst


#: the drive datasets, in the order printed
DRIVE_SETS = ("perseus-cluster_A", "perseus-cluster_A-half0", "perseus-cluster_A-half1",
              "synthetic-none", "synthetic-one", "synthetic-30pct",
              "synthetic-none-s7001", "synthetic-one-s7001", "synthetic-30pct-s7001")


def drive_figures(flagged: set, ranked: list[str], truth: set) -> str:
    """Drive-level precision / recall of a verdict and Acc@k of a ranking (Acc@k =
    confirmed drives in the top k / min(k, confirmed); k = 1 and k = |confirmed|)."""
    hit = len(flagged & truth)
    prec = f"{hit / len(flagged):.3f}" if flagged else "n/a"
    rec = f"{hit / len(truth):.3f}" if truth else "n/a"
    fig = f"verdict: {len(flagged)} fail-slow, precision {prec}, recall {rec} ({hit}/{len(truth)} confirmed)"
    if truth:
        k = len(truth)
        fig += (f"; ranking Acc@1 {float(ranked[0] in truth) if ranked else 0.0:.3f}, "
                f"Acc@{k} {sum(d in truth for d in ranked[:k]) / k:.3f}")
    else:
        fig += f"; false positives {len(flagged)}"
    return fig


def perseus_to_long(src: Path, dst: Path) -> Path:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(src / "metrics.parquet", columns=["host", "ts", "disk_id", "throughput", "latency"])
    host, disk = pc.cast(t["host"], pa.string()), pc.cast(t["disk_id"], pa.string())
    comp = pc.binary_join_element_wise(pa.scalar("drive:"), host, pa.scalar("/"), disk, "")
    out = pa.table({"component": comp, "peer_group": host, "timestamp": pc.cast(t["ts"], pa.float64()),
                    "metric": pa.array(["latency"] * t.num_rows), "value": t["latency"],
                    "load": pc.cast(t["throughput"], pa.float64())})
    f = dst / "perseus-long.parquet"
    pq.write_table(out, f)
    # the same without the load column: latency alone (a drive serving more throughput
    # than its peers has a higher latency, and latency alone cannot tell it from a slow one)
    pq.write_table(out.drop(["load"]), dst / "perseus-long-latency-only.parquet")
    return f


def trace_to_long(src: Path, dst: Path) -> Path:
    import pandas as pd

    t = pd.read_parquet(next(src.glob("trace*.parquet")), columns=["rank", "stage", "step", "optype", "duration"])
    t = t[t["optype"].astype(str).isin(["forward-compute", "backward-compute"])]
    g = t.groupby(["rank", "stage", "step"], observed=True)["duration"].sum().reset_index()
    df = pd.DataFrame({"component": "rank:" + g["rank"].astype(str), "peer_group": "stage:" + g["stage"].astype(str),
                       "timestamp": g["step"].astype(float), "metric": "compute_s", "value": g["duration"].astype(float)})
    f = dst / "trace-long.parquet"
    df.to_parquet(f)
    return f


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--public", default=os.environ.get("FAULTLAB_PUBLIC_DATA") or str(ROOT.parent / "shared" / "datasets" / "public"),
                    help="folder of the public traces (default: $FAULTLAB_PUBLIC_DATA, else ../shared/datasets/public)")
    ap.add_argument("--keep", default=None, help="keep the outputs (labels.parquet, whatif.json, components.parquet) under this folder")
    ap.add_argument("--child", nargs=3, metavar=("FORMAT", "PATH", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--convert", nargs=3, metavar=("KIND", "SRC", "DST"), help=argparse.SUPPRESS)
    ap.add_argument("--prepare", nargs=3, metavar=("NAME", "PUBLIC", "DST"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return 0
    if a.prepare:
        print(prepare_drives(a.prepare[0], Path(a.prepare[1]), Path(a.prepare[2])))
        return 0
    if a.convert:
        kind, src, dst = a.convert
        print((perseus_to_long if kind == "perseus" else trace_to_long)(Path(src), Path(dst)))
        return 0

    pub = Path(a.public)
    persd, std = pub / "perseus-cluster_A", pub / "straggler-trace-ST"
    if not persd.exists() and not std.exists():
        print(f"no public datasets under {pub}", file=sys.stderr)
        return 1
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="faultlab-public-"))
    work.mkdir(parents=True, exist_ok=True)
    ok = True
    rows = []
    details = []
    real: list[tuple[str, float, float]] = []  # (dataset importer, precision, recall) on the real cluster
    t_all = time.perf_counter()

    for name in DRIVE_SETS:
        if name.startswith("perseus") and not persd.exists():
            continue
        d = work / name
        cp = subprocess.run([sys.executable, __file__, "--prepare", name, str(pub), str(d)], capture_output=True,
                            text=True, cwd=ROOT, timeout=900)
        if cp.returncode != 0:
            rows.append((name, "-", None, None, None, None, "ERROR " + (cp.stderr.strip().splitlines() or ["prepare failed"])[-1]))
            ok = False
            continue
        truth = set(json.loads((d / "truth.json").read_text()))
        long_in = convert("perseus", d, d)
        for shown, fmt, path in (("perseus", "perseus", d), ("long", "long", long_in),
                                 ("long, no load", "long", long_in.with_name("perseus-long-latency-only.parquet"))):
            r = run_child(fmt, path, d / f"out.{shown.replace(', ', '-').replace(' ', '-')}")
            if "error" in r:
                rows.append((name, shown, None, None, None, None, "ERROR " + r["error"]))
                ok = False
                continue
            if fmt == "perseus":
                ranked = [x["drive"] for x in r["drive_rank"]]
                flagged = {x["drive"] for x in r["drive_rank"] if x["failslow"]}
            else:
                ranked = [c["component"].split(":", 1)[1] for c in r["component_rank"]]
                flagged = {c["component"].split(":", 1)[1] for c in r["component_rank"] if c["persistent"]}
            fig = drive_figures(flagged, ranked, truth)
            if name.startswith("perseus-cluster_A") and shown != "long, no load":
                hit = len(flagged & truth)
                real.append((f"{name} {shown}", hit / len(flagged) if flagged else 0.0, hit / len(truth)))
            if fmt == "perseus" and name == "perseus-cluster_A":
                ok &= truth <= flagged
                details.append(f"{name} Perseus ranking (top 6): " + "; ".join(
                    f"#{x['rank']} {x['drive']} share {x['share']:.2f} level {x['level']:.2f} (z {x['level_z']:.1f}) "
                    f"slowdown {x['slowdown']:.2f}{' FAIL-SLOW' if x['failslow'] else ''}{' [confirmed]' if x['drive'] in truth else ''}"
                    for x in r["drives"][:6]))
            if shown == "long" and name == "perseus-cluster_A":
                details.append(f"{name} long component ranking (top 6): " + "; ".join(
                    f"#{i + 1} {c['component']} level {c['level']:.2f} (z {c['level_z']:.1f}) labeled {c['fraction']:.3f}"
                    f"{' FAIL-SLOW' if c['persistent'] else ''}{' [confirmed]' if c['component'].split(':', 1)[1] in truth else ''}"
                    for i, c in enumerate(r["component_rank"][:6])))
            if shown == "long, no load":
                fig += " (latency alone, reference only)"
            elif name.startswith("perseus-cluster_A"):
                ok &= truth <= flagged  # every confirmed drive judged fail-slow
            rows.append((name, shown, r["runtime_s"], r["peak_rss_mb"], r["n_labels"], len(r["components"]), fig))
    if persd.exists():
        rows.append(("perseus-cluster_A", "straggler-trace", None, None, None, None, "n/a (not an operation trace)"))

    if std.exists():
        up = json.loads((std / "result-ST.json").read_text())
        ms_up = json.loads((std / "ms-ST.json").read_text()) if (std / "ms-ST.json").exists() else {}
        mw_up = json.loads((std / "mw-ST.json").read_text()) if (std / "mw-ST.json").exists() else {}
        S_up = up["blocking_slowdown"]
        long_in = convert("trace", std, work)
        for fmt, path in (("straggler-trace", std), ("long", long_in)):
            r = run_child(fmt, path, work / f"straggler-trace-ST.{fmt}")
            if "error" in r:
                rows.append(("straggler-trace-ST", fmt, None, None, None, None, "ERROR " + r["error"]))
                ok = False
                continue
            if fmt == "straggler-trace":
                wi = r["whatif"]
                S = wi["slowdown"]
                err = 100.0 * (S / S_up - 1.0)
                dec = wi["decomposition"]
                stage = max(dec["stage"], key=dec["stage"].get)
                stage_up = max(up["blocking_decompose_by_stage"], key=up["blocking_decompose_by_stage"].get)
                labeled_stages = [c for c in r["components"] if c.startswith("stage:")]
                fig = (f"S {S:.4f} vs upstream {S_up:.4f} ({err:+.2f}%), straggling stage {stage} "
                       f"(upstream {stage_up}), labeled {', '.join(r['components']) or '-'}")
                ok &= abs(err) < 3.0 and stage == "3" and labeled_stages == ["stage:3"]
                for dim, key in (("stage", "blocking_decompose_by_stage"), ("dp_rank", "blocking_decompose_by_dp_rank"),
                                 ("optype", "blocking_decompose_by_optype")):
                    keys = sorted(set(dec[dim]) | set(up[key]), key=lambda k: -(up[key].get(k) or 0))
                    details.append(f"ST S by {dim}: " + "; ".join(
                        f"{k} {dec[dim].get(k, float('nan')):.4f} vs {up[key].get(k, float('nan')):.4f}" for k in keys))
                details.append("ST S by rank (faultlab only): " + "; ".join(f"{k} {v:.4f}" for k, v in sorted(dec["rank"].items(), key=lambda kv: int(kv[0]))))
                details.append(f"ST measured/ideal {wi['slowdown_measured']:.4f}, launch slowdown {wi['launch_slowdown']:.4f} "
                               f"(upstream {up.get('launch_slowdown', float('nan')):.4f}); M_S {wi['ms']['share']:.4f} vs "
                               f"{ms_up.get('Ms', float('nan')):.4f}; M_W {wi['mw']['share']:.4f} vs {mw_up.get('Mw', float('nan')):.4f}")
            else:
                pers = [c["component"] for c in r.get("component_rank", []) if c["persistent"]]
                fig = (f"labeled {', '.join(r['components']) or 'nothing'} (per-rank compute against its stage's peers and "
                       f"its own history; a whole slow stage has no faster peer); persistent {', '.join(pers) or 'none'}")
            rows.append(("straggler-trace-ST", fmt, r["runtime_s"], r["peak_rss_mb"], r["n_labels"], len(r["components"]), fig))
        rows.append(("straggler-trace-ST", "perseus", None, None, None, None, "n/a (not drive telemetry)"))

    paid = pub / "alibaba-pai-minibatch"
    if paid.exists():
        r = run_child("pai-minibatch", paid, work / "alibaba-pai-minibatch")
        if "error" in r:
            rows.append(("alibaba-pai-minibatch", "pai-minibatch", None, None, None, None, "ERROR " + r["error"]))
            ok = False
        else:
            figs = []
            for job, v in sorted(r["jobs"].items()):
                lv = v["level_by_worker"]
                spread = f"worker levels {min(lv.values()):.2f}-{max(lv.values()):.2f}"
                figs.append(f"{job}: {v['n_labels']} label(s) on {', '.join(c.split('/')[-1] for c in v['labeled']) or 'nothing'}"
                            f", fail-slow {', '.join(v['failslow']) or 'none'} ({spread})")
            # the publisher's prose: job 2 steady offsets (no episode), job 3 several stragglers
            ok &= r["jobs"].get("job_2", {}).get("n_labels", 1) == 0
            rows.append(("alibaba-pai-minibatch", "pai-minibatch", r["runtime_s"], r["peak_rss_mb"], r["n_labels"],
                         len(r["components"]), "; ".join(figs)))
            details.append("alibaba-pai-minibatch labels: " + "; ".join(
                f"{c} {a:.0f}-{b:.0f} s {x:.2f}x" for c, a, b, x in r.get("label_list", [])))

    print(f"parent peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB (a floor of every child's)")
    print(f"{'dataset':20} {'importer':16} {'runtime':>9} {'peak MB':>8} {'labels':>7} {'comps':>6}  figures")
    for ds, fmt, rt, mem, nl, nc, fig in rows:
        rt_s = f"{rt:8.2f}s" if rt is not None else f"{'-':>9}"
        mem_s = f"{mem:8.0f}" if mem is not None else f"{'-':>8}"
        print(f"{ds:20} {fmt:16} {rt_s} {mem_s} {nl if nl is not None else '-':>7} {nc if nc is not None else '-':>6}  {fig}")
    print()
    for d in details:
        print(d)
    if real:
        met = all(p >= 0.95 and r >= 0.95 for _, p, r in real)
        print("\nreal cluster, drive level, target precision >= 0.95 and recall >= 0.95: "
              + ("met" if met else "NOT met") + " (" + "; ".join(f"{n} P {p:.3f} R {r:.3f}" for n, p, r in real) + ")")
    print(f"\ntotal {time.perf_counter() - t_all:.1f}s; outputs in {work}; checks {'passed' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
