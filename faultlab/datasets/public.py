"""Public collections as datasets: ``faultlab dataset build --import FORMAT PATH`` reads
a public trace with faultlab's importer of that format (``faultlab label --import``,
every format of :data:`faultlab.importformats.REGISTRY`) and maps it onto the dataset
tables, with what the source says about itself.

What each format becomes (:func:`import_collection`):

- ``straggler-trace`` (StragglerAnalysis, OSDI'25): one run; its operations summed per
  rank and step into ``steps`` (t_start = the step's first operation, compute_s = its
  compute operations, comm_s = its communication, step_s = first start to last end;
  peer group = pipeline stage). The importer labels a pipeline stage (``stage:S``) over
  a range of steps; the dataset gives that label to each rank of the stage
  (``rank:R``, the stage kept in ``evidence``) with the time of those steps, so that
  ``step_labels`` and scoring, which judge ranks, see it.
- ``perseus`` (Perseus, FAST'23, drives as components): one run per host (a host's
  drives are one peer group); ``host`` holds each drive (node ``HOST/DRIVE``) with the
  metrics ``latency`` (the upstream unit) and ``throughput_bytes_per_s``.
- ``pai-minibatch`` (Alibaba PAI, alibaba/clusterdata): one run per job file; ``host``
  holds each worker (node ``worker:N``) with the metric ``batch_time_norm``.
- ``long`` (generic long format): one run per ``run_id``; ``host`` holds each component
  with its metrics as given.

Beside the tables: faultlab's other import outputs (``whatif.json``, ``drives.json``,
``components.parquet``) in ``import/``; the source's own truth files and its license
(:data:`PROVENANCE`) copied unchanged into ``upstream/``. No absolute path of the
machine that built it is written (the source is named by its folder's name).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from faultlab import inputfile, schema
from faultlab.errors import BadInput
from faultlab.importformats import REGISTRY
from faultlab.labeler.importers import import_path, read_long, read_pai
from faultlab.labeler.importers.perseus import read_samples
from faultlab.labeler.importers.trace import read_trace
from faultlab.rundata import RunData
from faultlab.schema import json_safe

#: per format of a public source: what one run is, where it is published, its license (the dataset's),
#: how to cite it, the upstream truth files copied into ``upstream/`` (globs in the
#: source folder), what that truth is and how faultlab's labels relate to it
PROVENANCE: dict[str, dict] = {
    "pai-minibatch": {
        "run": "one training job (its workers are one peer group; node `worker:N`)",
        "paper": "AntMan: Dynamic Scaling on GPU Clusters for Deep Learning", "authors": "Wencong Xiao et al.", "venue": "OSDI 20", "year": 2020,
        "source": "Alibaba PAI GPU cluster trace, mini-batch times (cluster-trace-gpu-v2020/mini-batch-time)",
        "url": "https://github.com/alibaba/clusterdata/tree/master/cluster-trace-gpu-v2020",
        "license": "cc-by-4.0",
        "citation": "@inproceedings{xiao2020antman,\n  title     = {AntMan: Dynamic Scaling on GPU Clusters for Deep Learning},\n"
                    "  author    = {Xiao, Wencong and others},\n  booktitle = {14th USENIX Symposium on Operating Systems Design and Implementation (OSDI 20)},\n"
                    "  year      = {2020}\n}",
        "truth_files": (),
        "truth": "No labels as data. The publisher's prose: job 2, \"the variation seems stable during the training process, but "
                 "different workers have different mini-batch times\" (steady per-worker offsets, no straggler episode); job 3, "
                 "\"there could be multiple stragglers\".",
        "relation": "faultlab's `pai-minibatch` importer labels each job as any long-format input (the peer and temporal views, "
                    "the same defaults as everywhere): a label is an episode of one worker slower than its peer group "
                    "(`source` observed; nothing was injected). Judge them against the publisher's prose and the series.",
        "metrics": {"batch_time_norm": ("0-1000, normalized per job by the publisher (a duration: larger is slower)",
                                        "the worker's mini-batch time; `ts` is seconds from the job's start, not unix time")},
    },
    "perseus": {
        "run": "one host (its drives are one peer group; a drive is a component, node `HOST/DRIVE`)",
        "paper": "Perseus: A Fail-Slow Detection Framework for Cloud Storage Systems", "authors": "Ruiming Lu et al.", "venue": "FAST 23", "year": 2023,
        "source": "Perseus fail-slow drive dataset, cluster A, as redistributed by ucare-uchicago/kratos-failslow (data/cluster_A)",
        "url": "https://github.com/ucare-uchicago/kratos-failslow",
        "license": "mit",
        "citation": "@inproceedings{lu2023perseus,\n  title     = {Perseus: A Fail-Slow Detection Framework for Cloud Storage Systems},\n"
                    "  author    = {Lu, Ruiming and others},\n  booktitle = {21st USENIX Conference on File and Storage Technologies (FAST 23)},\n"
                    "  year      = {2023}\n}",
        "truth_files": ("slow_drives.csv",),
        "truth": "`upstream/slow_drives.csv`: the drives operators confirmed fail-slow (which drive, not when).",
        "relation": "faultlab's `perseus` importer (after Perseus: latency judged against throughput among a host's drives) labels "
                    "the slow periods of each drive its verdict judges fail-slow (`component` drive:HOST/DRIVE, `source` observed); "
                    "`import/drives.json` holds the verdict and ranking of every drive. Compare the labeled drives with the "
                    "confirmed ones; the upstream truth says nothing of when.",
        "metrics": {"latency": ("the upstream unit (larger is slower)", "the drive's latency"),
                    "throughput_bytes_per_s": ("bytes/s", "the drive's throughput")},
    },
    "straggler-trace": {
        "run": "one training job (rank-steps summed from its operations; peer group = pipeline stage)",
        "paper": "Understanding Stragglers in Large Model Training Using What-if Analysis", "authors": "Jinkun Lin et al.", "venue": "OSDI 25", "year": 2025,
        "source": "StragglerAnalysis sample trace ST (a production training job)",
        "url": "https://github.com/ByteDance-Seed/StragglerAnalysis",
        "license": "apache-2.0",
        "citation": "@inproceedings{lin2025stragglers,\n  title     = {Understanding Stragglers in Large Model Training Using What-if Analysis},\n"
                    "  author    = {Lin, Jinkun and others},\n  booktitle = {19th USENIX Symposium on Operating Systems Design and Implementation (OSDI 25)},\n"
                    "  year      = {2025}\n}",
        "truth_files": ("result-*.json", "ms-*.json", "mw-*.json"),
        "truth": "`upstream/result-*.json`: the upstream tool's what-if analysis (per-step actual and ideal times, the "
                 "slowdown and its decomposition by DP rank, stage and operation type); `upstream/ms-*.json`, "
                 "`upstream/mw-*.json`: the paper's M_S (stage imbalance) and M_W (individual worker) metrics.",
        "relation": "faultlab's `straggler-trace` importer recomputes the what-if slowdown (`import/whatif.json`) and labels the "
                    "stage that it blames (`stage:S`); here that label is given to each rank of the stage. The upstream result "
                    "is the what-if truth to compare the slowdown and its decomposition with.",
        "metrics": {},
    },
}

#: import outputs of faultlab written into ``import/`` (besides the labels)
IMPORT_OUTPUTS = ("whatif.json", "drives.json", "components.parquet")


@dataclass
class Collection:
    """A public trace ready to be built into a dataset.

    Attributes:
        runs: the runs (:class:`faultlab.rundata.RunData`), in order.
        files: further files of the dataset, ``{relative path: bytes}`` (``import/``,
            ``upstream/``).
        provenance: :data:`PROVENANCE`'s entry of the format (None for ``long``) with
            ``format`` and ``folder`` (the source folder's name) added.
    """

    runs: list[RunData]
    files: dict[str, bytes] = field(default_factory=dict)
    provenance: dict | None = None


def import_collection(fmt: str, path: str | Path) -> Collection:
    """Import the public trace at ``path`` (a file or folder) with the importer of
    ``fmt`` and map it onto dataset runs (the module docstring says how).

    Raises BadInput naming ``--import`` for a format that is not in the registry, or
    what the importer raises for bad input."""
    if fmt not in REGISTRY:
        raise BadInput(f"unknown format {fmt!r}", field="--import", fix="one of " + ", ".join(REGISTRY))
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    col = MAPPERS[fmt](path)
    for run in col.runs:  # the source named by its folder's name: no build machine's path in the dataset
        run.meta = {"source": folder.name, "format": fmt, "complete": True, "campaign": folder.name, "scenario": run.run_id}
    prov = PROVENANCE.get(fmt)
    if prov is not None:
        col.provenance = {**prov, "format": fmt, "folder": folder.name}
        for pattern in (*prov["truth_files"], "LICENSE"):
            for f in sorted(folder.glob(pattern)):
                col.files[f"upstream/{f.name}"] = _upstream_file(f, folder)
    col.files = {k: _scrub(v, path) for k, v in col.files.items()}
    return col


def _upstream_file(f: Path, folder: Path) -> bytes:
    """The bytes of the source's file ``f`` (its license, an answer file), read with no
    link below ``folder``, only when a regular file of at most ``inputfile.JSON_BYTES``
    (:func:`faultlab.inputfile.open_data`): a link another user leaves in a trace
    folder never copies a file of root's into the dataset. Raises BadInput naming it."""
    with inputfile.open_data(f, "--import", below=folder, limit=inputfile.JSON_BYTES) as fh:
        data = fh.read(inputfile.JSON_BYTES + 1)
    if len(data) > inputfile.JSON_BYTES:
        raise BadInput(f"{f} grew past {inputfile.JSON_BYTES} bytes while read", field="--import", fix="give the trace as published")
    return data


def _scrub(data: bytes, path: Path) -> bytes:
    """``data`` with the source's path (as given, absolute and resolved) replaced by its
    folder's name (``FOLDER/FILE`` for a file); Parquet files are left as they are (they
    hold no path)."""
    if data[:4] == b"PAR1":
        return data
    folder = path if path.is_dir() else path.parent
    subs = {str(p): folder.name for p in (folder.resolve(), folder.absolute(), folder)}
    if not path.is_dir():
        subs.update({str(p): f"{folder.name}/{path.name}" for p in (path.resolve(), path.absolute(), path)})
    for old in sorted((k for k in subs if k not in (".", "")), key=len, reverse=True):
        data = data.replace(old.encode(), subs[old].encode())
    return data


def _outputs(res, run_col: str | None = None) -> dict[str, bytes]:
    """faultlab's import outputs of ``res`` (an ImportResult) as ``import/`` files."""
    out: dict[str, bytes] = {}
    docs = dict(res.extra)
    if res.whatif is not None:
        docs["whatif.json"] = res.whatif
    for name, doc in docs.items():
        if name in IMPORT_OUTPUTS:
            out[f"import/{name}"] = json.dumps(json_safe(doc), indent=2, sort_keys=True).encode()
    if res.components is not None and len(res.components):
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(res.components, preserve_index=False), buf, compression="zstd")
        out["import/components.parquet"] = buf.getvalue()
    return out


def _host_frame(run_id: str, node, ts, metric: str, value) -> pd.DataFrame:
    return pd.DataFrame({"run_id": run_id, "node": node, "ts": np.asarray(ts, np.float64), "metric": metric,
                         "value": np.asarray(value, np.float64)})


def _run(run_id: str, labels: pd.DataFrame, *, steps=None, host=None) -> RunData:
    lab = labels.assign(run_id=run_id) if len(labels) else schema.empty("labels")
    return RunData(run_id, schema.empty("steps") if steps is None else steps, schema.empty("host") if host is None else host,
                   lab.reset_index(drop=True), schema.empty("injections"), {})


def _trace(path: Path) -> Collection:
    res = import_path("straggler-trace", path)
    tr, _, _ = read_trace(path)
    run_id = str(res.labels["run_id"].iloc[0]) if len(res.labels) else path.name
    comm = tr["optype"].str.contains("send|recv|all-reduce|all-gather|reduce-scatter", regex=True)
    tr = tr.assign(end=tr["start_ts"] + tr["duration"], comp=tr["duration"].where(~comm, 0.0), com=tr["duration"].where(comm, 0.0))
    st = tr.groupby(["rank", "step"], sort=True).agg(dp=("dp_rank", "first"), stage=("stage", "first"), t_start=("start_ts", "min"),
                                                      t_end=("end", "max"), compute_s=("comp", "sum"), comm_s=("com", "sum")).reset_index()
    steps = pd.DataFrame({"run_id": run_id, "rank": st["rank"].astype("int32"), "node": "dp" + st["dp"].astype(str) + "-pp" + st["stage"].astype(str),
                          "peer_group": "stage" + st["stage"].astype(str), "step": st["step"].astype("int64"), "t_start": st["t_start"],
                          "compute_s": st["compute_s"], "comm_s": st["comm_s"], "step_s": st["t_end"] - st["t_start"],
                          "gc_s": float("nan"), "tokens": float("nan"), "dataloader_s": float("nan")})
    return Collection([_run(run_id, _stage_labels_to_ranks(res.labels, st), steps=steps)], _outputs(res))


def _stage_labels_to_ranks(labels: pd.DataFrame, st: pd.DataFrame) -> pd.DataFrame:
    """Each ``stage:S`` label of ``labels`` as one label per rank of stage S
    (``rank:R``, kind ``rank``), its time the first start and last end of its steps
    on that rank (``st``: per rank and step, ``stage``, ``t_start``, ``t_end``); other
    labels as they are."""
    rows = []
    for lab in labels.to_dict("records"):
        comp = str(lab["component"])
        if not comp.startswith("stage:"):
            rows.append(lab)
            continue
        stage = int(comp.split(":", 1)[1])
        lo, hi = lab["start_step"], lab["end_step"]
        for rank, g in st[st["stage"] == stage].groupby("rank"):
            g = g[(g["step"] >= lo) & (g["step"] <= hi)]
            if len(g):
                rows.append({**lab, "component": f"rank:{int(rank)}", "component_kind": "rank",
                             "start_ts": float(g["t_start"].min()), "end_ts": float(g["t_end"].max())})
    return pd.DataFrame(rows, columns=labels.columns) if rows else labels.iloc[:0]


def _perseus(path: Path) -> Collection:
    res = import_path("perseus", path)
    s = read_samples(path)
    node = np.array(s.drive_names, dtype=object)[s.drive]  # HOST/DRIVE, as the labels' drive:HOST/DRIVE
    host_of = np.array([str(n).split("/", 1)[0] for n in node], dtype=object)
    base = str(res.labels["run_id"].iloc[0]) if len(res.labels) else (s.clusters[0] if s.clusters and s.clusters[0] else "perseus")
    lab_host = res.labels["component"].astype(str).str.removeprefix("drive:").str.split("/").str[0] if len(res.labels) else pd.Series([], dtype=object)
    runs = []
    for h in sorted(set(host_of)):
        keep = host_of == h
        rid = f"{base}-{h}"
        host = pd.concat([_host_frame(rid, node[keep], s.ts[keep], "latency", s.latency[keep]),
                          _host_frame(rid, node[keep], s.ts[keep], "throughput_bytes_per_s", s.throughput[keep])], ignore_index=True)
        runs.append(_run(rid, res.labels[(lab_host == h).to_numpy()] if len(res.labels) else res.labels, host=host))
    return Collection(runs, _outputs(res))


def _pai(path: Path) -> Collection:
    files = sorted(path.glob("job_*.csv")) if path.is_dir() else [path]
    if not files:
        raise BadInput(f"{path} holds no job_*.csv file", field="PATH", fix="give alibaba/clusterdata's mini-batch-time folder or one job_N_norm.csv")
    runs, out, comps = [], {}, []
    for f in files:  # one job a run: its workers are one peer group
        res = import_path("pai-minibatch", f)
        d = read_pai(f)
        job = str(d["run_id"].iloc[0])
        runs.append(_run(job, res.labels, host=_host_frame(job, d["component"], d["timestamp"], "batch_time_norm", d["value"])))
        if res.components is not None:
            comps.append(res.components.assign(run_id=job))
    if comps:
        res.components = pd.concat(comps, ignore_index=True)
        out = _outputs(res)
    return Collection(runs, out)


def _long(path: Path) -> Collection:
    res = import_path("long", path)
    d = read_long(path)
    default = str(res.labels["run_id"].iloc[0]) if len(res.labels) else Path(path).stem
    rid = d["run_id"].astype(str) if "run_id" in d.columns else pd.Series(default, index=d.index)
    runs = []
    for r in sorted(set(rid)):
        g = d[rid == r]
        host = pd.concat([_host_frame(r, m["component"], m["timestamp"], str(name), m["value"]) for name, m in g.groupby("metric")],
                         ignore_index=True)
        lab = res.labels[res.labels["run_id"].astype(str) == r] if len(res.labels) else res.labels
        if len(lab):  # a file of several runs names its components RUN/component: here the run is the run
            lab = lab.assign(component=lab["component"].astype(str).str.removeprefix(f"{r}/"))
        runs.append(_run(r, lab, host=host))
    return Collection(runs, _outputs(res))


#: format -> its mapper onto dataset runs (every format of the registry has one)
MAPPERS = {"straggler-trace": _trace, "perseus": _perseus, "pai-minibatch": _pai, "long": _long}
