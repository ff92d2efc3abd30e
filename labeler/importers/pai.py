"""The ``pai-minibatch`` importer: Alibaba PAI per-worker mini-batch times
(alibaba/clusterdata ``cluster-trace-gpu-v2020/mini-batch-time/``, as published), read
as a long-format frame (:func:`read_pai`) and labeled as ``long`` (:func:`import_pai`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from faultlab import inputfile
from faultlab.errors import BadInput
from faultlab.labeler.config import make_config
from faultlab.labeler.importers.common import ImportResult, SkipCount, numbers_or_refuse
from faultlab.labeler.importers.long import LongConfig, label_each_run


PAI_COLUMNS = ("worker", "time", "batch_time_norm")


def read_pai(path: str | Path) -> pd.DataFrame:
    """Per-worker mini-batch times of PAI training jobs as alibaba/clusterdata publishes
    them, as a long-format frame.

    The input (``cluster-trace-gpu-v2020/mini-batch-time/job_N_norm.csv``: an unnamed
    index, ``worker``, ``gpu`` (percent of one GPU requested), ``time`` (s from the
    job's start), ``batch_time_norm`` (the mini-batch time normalized to 0-1000 per job:
    a duration, larger is slower)). The frame: ``component`` ``worker:N``,
    ``peer_group`` the job (its workers do the same work), ``timestamp`` = ``time``,
    ``metric`` ``batch_time_norm``, ``run_id`` the job. ``path`` is one file or a folder
    of ``job_*.csv`` files (every job; each job its own peer group).

    Raises BadInput naming the file for a missing file or column."""
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p} does not exist", field="PATH")
    files = sorted(p.glob("job_*.csv")) if p.is_dir() else [p]
    if not files:
        raise BadInput(f"{p} holds no job_*.csv file", field="PATH",
                       fix="give alibaba/clusterdata's mini-batch-time folder or one job_N_norm.csv")
    parts, jobs = [], {}
    for f in files:
        try:
            with inputfile.open_data(f, "PATH", below=p if p.is_dir() else None) as fh:  # no link, FIFO or device
                d = pd.read_csv(fh)
        except BadInput:
            raise
        except Exception as e:
            raise BadInput(f"{f} could not be read ({type(e).__name__}: {e})", field="PATH") from None
        missing = [c for c in PAI_COLUMNS if c not in d.columns]
        if missing:
            raise BadInput(f"{f.name} misses column(s) {', '.join(missing)}", field="pai-minibatch",
                           fix="a PAI mini-batch file has columns worker, gpu, time, batch_time_norm")
        job = f.name.split(".")[0].replace("_norm", "")
        if job in jobs:
            raise BadInput(f"{jobs[job].name} and {f.name} are both job {job}", field="PATH",
                           fix="keep one file per job in the folder (job_N_norm.csv as published)")
        jobs[job] = f
        for col, fix in (("time", "seconds from the job's start"), ("batch_time_norm", "a number, larger is slower")):
            numbers_or_refuse(d[col], d[col].notna().to_numpy(), field=col, where=f.name, fix=fix,
                              at=lambda i: f"at CSV line {i + 2}")
        parts.append(pd.DataFrame({"component": "worker:" + d["worker"].astype(str), "peer_group": job,
                                   "timestamp": d["time"], "metric": "batch_time_norm",
                                   "value": d["batch_time_norm"], "run_id": job}))
    df = pd.concat(parts, ignore_index=True)
    df.attrs["source"] = str(p)
    return df


def import_pai(path: str | Path, config: LongConfig | dict | None = None) -> ImportResult:
    """Import PAI mini-batch times (:func:`read_pai`) and label them like any long-format
    input (:func:`label_long_components`, the same defaults): each job separately
    (``run_id`` the job; a worker's ``component`` is ``JOB/worker:N`` when the input
    holds several jobs).

    A worker steadily slower than its peers by less than the peer threshold (1.3x) is no
    episode; a straggler episode is a peer (or temporal) label.

    Returns:
        :class:`ImportResult` (format ``pai-minibatch``): labels of every job, the
        components summary of every job (``run_id`` column added), ``info`` per job.
    """
    cfg = make_config(LongConfig, config)
    df = read_pai(path)
    jobs = sorted(pd.unique(df["run_id"]).tolist())
    skips = SkipCount(len(df))
    labels, comps = label_each_run(df, cfg, jobs[0], skips, prefix=len(jobs) > 1)
    per = {}
    for job in jobs:
        lab = labels[labels["run_id"].astype(str) == job] if len(labels) else labels
        comp = comps[comps["run_id"] == job]
        per[job] = {"n_labels": int(len(lab)), "labeled": sorted(set(lab["component"].astype(str))),
                    "failslow": comp.loc[comp["persistent"], "component"].tolist(),
                    "level_by_worker": {str(r.component): round(float(r.level), 4) for r in comp.itertuples()}}
    info = {"n_rows": int(len(df)), "source": df.attrs["source"], "jobs": per, "config": cfg.to_dict(),
            "skipped": skips.to_dict(), "skipped_line": skips.line()}
    return ImportResult(format="pai-minibatch", labels=labels, whatif=None, info=info,
                        components=comps)
