"""faultlab.labeler: where and when was a training job really slowed, and by what?

Pipeline (per run), after SlowSight's two views and the OSDI'25 what-if analysis:

1. :mod:`~faultlab.labeler.views.temporal`: each series against its own trailing
   robust baseline (the job step time; each rank's compute_s);
2. :mod:`~faultlab.labeler.views.peer`: each rank's compute_s against its peer group's
   median at the same step;
3. :mod:`~faultlab.labeler.whatif`: job time with the stragglers removed
   (:mod:`~faultlab.labeler.analysis` holds the three for a run);
4. :mod:`~faultlab.labeler.fusion`: flags -> intervals -> rank / job labels
   (:mod:`~faultlab.labeler.intervals`, :mod:`~faultlab.labeler.intermittent`);
   :mod:`~faultlab.labeler.views.starved`: the host peer view (run delay);
5. :mod:`~faultlab.labeler.reconcile`: labels x injections -> source, fault_id, cause.

Under them: :mod:`~faultlab.labeler.config` (settings), :mod:`~faultlab.labeler.grid`
(the step x rank grid), :mod:`~faultlab.labeler.stats` (the robust statistics) and
:mod:`~faultlab.labeler.labelrows` (label rows).

Public API: :class:`LabelerConfig`, :func:`label`, :func:`label_run`, :func:`read_steps`,
:func:`faultlab.labeler.whatif.whatif`, :func:`faultlab.labeler.reconcile.reconcile`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from faultlab import safefs, schema, steptable, workdirs
from faultlab.errors import BadInput
from faultlab.labeler import cluster, outofcore, reconcile, whatif
from faultlab.labeler.analysis import Analysis, analyze
from faultlab.labeler.config import LabelerConfig, labeler_config
from faultlab.labeler.fusion import fuse
from faultlab.labeler.grid import StepGrid
from faultlab.labeler.labelrows import empty_labels, typed_labels
from faultlab.labeler.hostcause import attach_host_evidence
from faultlab.labeler.localize import localize
from faultlab.labeler.views.starved import METRIC, starved_labels
from faultlab.rundir import RunDir, write_together
from faultlab.schema import json_safe
from faultlab.steps import check_recorded_steps, check_steps

__all__ = ["Analysis", "LabelerConfig", "StepGrid", "analyze", "fuse", "label", "label_run", "read_steps"]


def _span(steps: pd.DataFrame) -> tuple[float, float] | None:
    """``(first t_start, last t_start + step_s)`` of the steps (unix s): the training
    time, or None when there is none."""
    if not len(steps) or "t_start" not in steps.columns:
        return None
    t, d = steps["t_start"], steps["step_s"] if "step_s" in steps.columns else None
    if (isinstance(t.dtype, np.dtype) and t.dtype.kind == "f"
            and (d is None or (isinstance(d.dtype, np.dtype) and d.dtype.kind == "f"))):  # plain floats: numpy
        tv = t.to_numpy()
        with np.errstate(invalid="ignore"):
            lo = np.nanmin(tv) if not np.isnan(tv).all() else np.nan
            ends = tv + d.to_numpy() if d is not None else tv
            hi = np.nanmax(ends) if not np.isnan(ends).all() else np.nan
        return (float(lo), float(hi)) if np.isfinite(lo) and np.isfinite(hi) else None
    t = pd.to_numeric(steps["t_start"], errors="coerce")
    end = t + pd.to_numeric(steps["step_s"], errors="coerce") if "step_s" in steps.columns else t
    lo, hi = t.min(), end.max()
    return (float(lo), float(hi)) if np.isfinite(lo) and np.isfinite(hi) else None


def label(steps: pd.DataFrame, injections: pd.DataFrame | None = None, *, config: LabelerConfig | dict | None = None,
          host: pd.DataFrame | None = None, peer_groups: dict | None = None) -> pd.DataFrame:
    """Label the slow intervals of one or more runs and reconcile them with injections.

    Method: SlowSight-style temporal view + peer view, fused into intervals, with the
    OSDI'25 what-if step time telling a job-wide slowdown from one a straggler
    explains (see :mod:`faultlab.labeler.fusion`), then reconciled with the ground
    truth (see :mod:`faultlab.labeler.reconcile`).

    Args:
        steps: the ``steps`` table (faultlab.schema.STEPS: run_id, rank, node,
            peer_group, step, t_start [unix s], compute_s, comm_s, step_s [s]); one row
            per rank per step. Several run_ids are labeled run by run. String columns
            may be ``str``/object or categorical (as :func:`read_steps` gives them).
        injections: the ``injections`` table (faultlab.schema.INJECTIONS), may be None
            or empty. Rows are matched to their run by ``run_id``; a row without a
            run_id applies to every run given.
        config: :class:`LabelerConfig` or a dict of its fields (defaults when None).
        host: the ``host`` table, optional; with per-peer TCP metrics it localizes
            job-wide slowdowns (``culprit`` in a job label's evidence, see
            :mod:`faultlab.labeler.localize`); with CPU metrics an observed label's
            evidence says what the host showed (``host``, see
            :mod:`faultlab.labeler.hostcause`); with ``proc_run_delay_s_per_s`` a rank
            whose threads wait for a CPU far longer than its peers' while the job
            slows is its label (views ``host+temporal``, see
            :mod:`faultlab.labeler.views.starved`).
        peer_groups: ``{component or rank number: group}`` or None: the ranks' peer
            groups; without it the steps' ``peer_group`` when it holds more than one,
            else the groups discovered from the ranks' typical local time
            (:mod:`faultlab.labeler.peergroups`).

    Returns:
        labels frame with the faultlab.schema.LABELS columns (``run_id`` filled;
        ``start_step``/``end_step`` nullable Int64), sorted by run_id, start_ts,
        component. Deterministic: the same input gives the same frame.

    Raises:
        BadInput naming the field: a missing column (``steps``) or a bad config value;
        a bad value in ``steps`` (``rank``/``step`` null, fractional or no number;
        text in a number column; a negative or infinite ``compute_s``/``comm_s``/
        ``step_s``; ``t_start`` missing everywhere or not increasing with ``step``
        for a rank: see :meth:`StepGrid.from_steps`); in ``injections`` a missing
        column, a ``start_ts``/``end_ts`` that is no number, or an ``end_ts`` before
        its ``start_ts`` (see :func:`faultlab.labeler.reconcile.reconcile`).
    """
    return attach_host_evidence(localize(_label(steps, injections, labeler_config(config), host, peer_groups)[0], host),
                                host, span=_span(steps))


def _label(steps: pd.DataFrame, injections: pd.DataFrame | None, cfg: LabelerConfig,
           host: pd.DataFrame | None = None, peer_groups: dict | None = None) -> tuple[pd.DataFrame, dict]:
    """:func:`label`, also returning ``{run_id: Analysis}`` of the runs with steps.
    ``host`` feeds the host peer view (:mod:`faultlab.labeler.views.starved`)."""
    if host is not None and len(host) and "metric" in host.columns:
        host = host[host["metric"].astype(str) == METRIC]  # the rows the host peer view reads

    check_steps(steps)
    inj = injections
    parts = []
    analyses: dict = {}
    run_ids = sorted({str(r) for r in pd.unique(steps["run_id"]) if not pd.isna(r)})
    if not run_ids:
        run_ids = [""]
    single = len(run_ids) == 1
    if not single:  # one pass over the run_id column, then a row selection per run
        codes, uniques = pd.factorize(steps["run_id"], sort=False)
        ustr = np.asarray([str(u) for u in uniques], dtype=object)
    for rid in run_ids:
        if single:
            s = steps
        else:
            s = steps.iloc[np.flatnonzero(np.isin(codes, np.flatnonzero(ustr == rid)))]
        an = analyze(StepGrid.from_steps(s), cfg, peer_groups=peer_groups) if len(s) else None
        del s
        if an is not None:
            analyses[rid] = an
        parts.append(_label_analysis(an, rid, inj, cfg, host))
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_labels(), analyses
    res = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return typed_labels(res.reset_index(drop=True)), analyses


def _label_analysis(an: Analysis | None, rid: str, inj: pd.DataFrame | None, cfg: LabelerConfig,
                    host: pd.DataFrame | None) -> pd.DataFrame:
    """The labels of one run from its analysis (None: no steps): fusion, the host peer
    view (``host``: its run-delay rows), reconciliation with ``inj``."""
    labels = fuse(an) if an is not None else empty_labels()
    if an is not None and host is not None and len(host):
        labels = starved_labels(an, _of_run(host, rid), labels)
    # an injection of another run is not this run's cause; one without a run_id
    # applies to every run given
    run_inj = _of_run(inj, rid) if inj is not None and len(inj) else inj
    out = reconcile.reconcile(labels, run_inj, analysis=an, config=cfg)
    if len(out) and rid:
        out["run_id"] = rid
    return out


def _of_run(table: pd.DataFrame, rid: str) -> pd.DataFrame:
    """The rows of run ``rid`` (all rows when the table has no ``run_id`` or ``rid``
    is empty; rows without a run_id belong to every run)."""
    if not rid or "run_id" not in table.columns:
        return table
    r = table["run_id"]
    return table[r.isna() | (r.map(str) == rid) | (r.map(str) == "")]


def read_steps(path: str | os.PathLike, max_rows: int | None = None) -> pd.DataFrame:
    """Read a run's ``steps`` table the lean way, for labeling: ``steps.parquet`` or a
    partitioned ``steps/`` folder (:func:`faultlab.steptable.read_lean`, the one
    reader: the STEPS columns the labeler uses, ``run_id``/``node``/``peer_group`` as
    categoricals; with 20.5M rows (1,024 ranks x 20,000 steps) a 0.9 GiB frame and a
    1.4 GiB peak, where ``pq.read_table(path).to_pandas()`` makes a 1.8 GiB frame and
    peaks at 3.4-3.7 GiB, perf/labeler_throughput.py).

    Raises:
        BadInput naming the file (field ``steps.parquet``) when it is not a readable
        Parquet file (corrupt, truncated, unreadable), or the table when its files hold
        more than ``max_rows`` rows as they are read (:func:`faultlab.steptable.over_rows`).
    """
    return steptable.read_lean(path, max_rows)


def label_run(run_dir: str | os.PathLike, *, config: LabelerConfig | dict | None = None, out_of_core: bool | None = None,
              scheduler: str | None = None, client=None, progress=None,
              peer_groups: dict | None = None) -> pd.DataFrame:
    """Label one run directory: read ``steps`` (with :func:`read_steps` when
    ``steps.parquet`` or ``steps/`` exists, else the raw telemetry through
    :class:`faultlab.rundir.RunDir`) and ``injections``, write ``labels.parquet`` and
    ``whatif.json`` (the :func:`~faultlab.labeler.whatif.whatif` dict plus the config
    used, and under ``peer_groups`` the groups the peer view used:
    :meth:`faultlab.labeler.peergroups.PeerGroups.summary`, each group's members and
    its typical local time against the fastest group's, the persistent difference
    between groups that is heterogeneity, not a fail-slow label), append a
    ``labeled`` event to ``events.jsonl``, and return the labels frame.
    ``peer_groups`` is :func:`label`'s.

    A stored table of :data:`faultlab.labeler.outofcore.IN_MEMORY_ROWS` rank-steps or
    more (or any, with ``out_of_core=True``; never, with False) is labeled out of
    core on Dask (:mod:`faultlab.labeler.outofcore`: the scheduler at ``scheduler``
    or ``$DASK_SCHEDULER_ADDRESS``, else an embedded LocalCluster; or ``client``, a
    ``dask.distributed.Client`` the caller keeps open), with the same labels;
    ``progress(done, total, what)`` is called as its blocks finish.

    The two files are written together (:func:`faultlab.rundir.write_together`): both
    to temporary files first, then renamed; when one cannot be written, neither is
    changed. Bad input is found before anything is written.

    Raises:
        BadInput: field ``PATH`` when ``run_dir`` is no run directory (it has neither
        ``steps.parquet`` nor a ``telemetry/`` folder: nothing is written into it);
        the file's name when ``steps.parquet``, ``injections.parquet``,
        ``host.parquet`` or ``meta.json`` cannot be read (corrupt, truncated, not a
        JSON object); ``telemetry/steps-*.jsonl`` or the column for bad raw
        records (:meth:`faultlab.rundir.RunDir.read_raw_steps`); the column for a bad
        value in the steps (a missing column, a null or fractional ``rank``/``step``,
        text in a number column, a negative or infinite duration, ``t_start`` missing
        everywhere or not increasing with ``step``: see
        :meth:`StepGrid.from_steps`) or in the injections (``end_ts`` before
        ``start_ts``: see :func:`faultlab.labeler.reconcile.reconcile`); a bad config
        value.
        OSError when ``labels.parquet`` or ``whatif.json`` cannot be written (neither
        is changed then), or ``events.jsonl`` cannot be appended to (after both are
        written).
    """
    cfg = labeler_config(config)
    rd = RunDir(run_dir)
    p = steptable.steps_source(rd.path) or rd.table_path("steps")
    if p.is_symlink():  # a dangling one would relabel from telemetry/ without a word; a live one points elsewhere
        raise BadInput(f"{p} is a symbolic link", field="steps.parquet",
                       fix="a run directory holds its own steps.parquet; copy the file in, or remove the link to rebuild it from telemetry/")
    if not p.exists() and not rd.telemetry_dir().is_dir():
        what = "has no steps.parquet and no telemetry/ folder" if rd.path.is_dir() else "does not exist"
        raise BadInput(f"{rd.path} is not a run directory: it {what}", field="PATH",
                       fix="give a run directory made by faultlab run or faultlab demo")
    run_id = rd.run_id  # reads meta.json: a bad one is named before any work
    if p.exists() and (out_of_core or (out_of_core is None and steptable.count_rows(p) >= outofcore.IN_MEMORY_ROWS)):
        return _label_run_out_of_core(rd, p, cfg, scheduler, client, progress, peer_groups)
    # the files read may hold more than the count that chose memory: their owner may grow them meanwhile
    limit = outofcore.IN_MEMORY_ROWS if out_of_core is None else None
    steps = read_steps(p, limit) if p.exists() else rd.read_table("steps", max_rows=limit)  # a fresh frame of our own
    check_recorded_steps(steps, (p if p.exists() else rd.telemetry_dir()).name)
    injections = rd.read_table("injections")
    if len(steps) and "run_id" in steps.columns and steps["run_id"].isna().any():
        steps["run_id"] = steps["run_id"].astype(object).fillna(run_id)
    host = rd.read_table("host")
    delay = host[host["metric"].astype(str) == METRIC] if len(host) else host
    del host  # the whole table is not held while labeling
    labels, analyses = _label(steps, injections, cfg, delay, peer_groups)
    del delay
    host = rd.read_table("host")
    labels = attach_host_evidence(localize(labels, host), host, span=_span(steps))
    del host
    if len(labels):
        labels["run_id"] = labels["run_id"].where(labels["run_id"].astype(str) != "", run_id)
    if len(steps) and len(analyses) == 1 and steps["run_id"].nunique() <= 1:
        an = next(iter(analyses.values()))
        wi = whatif.whatif_grid(an.grid)
        wi["peer_groups"] = an.groups.summary([an.grid.component(j) for j in range(an.grid.R)])
        del an
    else:
        wi = {"method": "osdi25-whatif-dp", "run_id": run_id, "slowdown": float("nan"), "per_rank": {},
              "actual_s": 0.0, "simulated_s": 0.0, "n_steps": 0}
    del analyses, steps
    return _write_labels(rd, labels, wi, cfg)


def _write_labels(rd: RunDir, labels: pd.DataFrame, wi: dict, cfg: LabelerConfig) -> pd.DataFrame:
    """Write ``labels.parquet`` and ``whatif.json`` together, journal ``labeled``."""
    wi["labeler_config"] = cfg.to_dict()
    table = schema.to_table("labels", labels)
    text = json.dumps(json_safe(wi), indent=2, sort_keys=True)
    write_together(rd.path, {"labels.parquet": lambda tmp: pq.write_table(table, tmp),
                             "whatif.json": lambda tmp: tmp.write_text(text)})
    rd.event("labeled", n_labels=int(len(labels)), whatif_slowdown=json_safe(wi["slowdown"]))
    return labels


def _work_folder(run: Path) -> str:
    """A fresh 0700 work folder for the out-of-core labeler's memory maps: inside the
    run folder when that is a trusted folder (:func:`faultlab.safefs.check_dir`:
    every component from ``/`` root's or the caller's, closed to others, no symlink),
    so that workers of a scheduler on other hosts see it; else in the caller's
    temporary folder (``$TMPDIR``, else ``/tmp``). The maps are created and opened by
    path, by workers in other processes: in a folder another user owns, they could
    rename the work folder away and link its name to a folder of theirs whose map
    names link to any file, which root would then truncate and overwrite. The folders
    of labelers that were killed and are gone are removed first (:mod:`faultlab.workdirs`)."""
    try:
        safefs.check_dir(run.absolute())
    except (safefs.UntrustedPath, OSError):
        parent, prefix = tempfile.gettempdir(), "faultlab-label-"
    else:
        parent, prefix = str(run), ".label-"
    workdirs.sweep(parent, prefix)
    return workdirs.make(parent, prefix)


def _label_run_out_of_core(rd: RunDir, path, cfg: LabelerConfig, scheduler: str | None, client, progress,
                           peer_groups: dict | None) -> pd.DataFrame:
    """:func:`label_run` of a stored steps table out of core (:mod:`.outofcore`): the
    analysis on Dask, its arrays memory maps in a work folder (:func:`_work_folder`,
    removed after), then the same fusion, reconciliation and outputs."""
    run_id = rd.run_id
    injections = rd.read_table("injections")
    host = rd.read_table("host")
    delay = host[host["metric"].astype(str) == METRIC] if len(host) else host
    del host
    outofcore.check_blocks(path)  # a block no worker may read is refused before a cluster starts
    own = client is None
    if own:
        client, embedded = cluster.client_for(scheduler)
    work = _work_folder(rd.path)
    # removing the maps frees their page cache, a second a few GB: file by file on threads
    # of their own, while the cluster closes and the labels are written
    remover = threading.Thread(target=_remove_work, args=(work,), daemon=True)
    try:
        try:
            an, span = outofcore.analyze_out_of_core(path, cfg, workdir=work, client=client, progress=progress,
                                                    peer_groups=peer_groups)
            rid = an.grid.run_id or run_id
            labels = _label_analysis(an, rid, injections, cfg, delay)
            labels = typed_labels(labels.reset_index(drop=True)) if len(labels) else empty_labels()
            host = rd.read_table("host")
            labels = attach_host_evidence(localize(labels, host), host, span=span)
            del host
            if len(labels):
                labels["run_id"] = labels["run_id"].where(labels["run_id"].astype(str) != "", run_id)
            wi = an.whatif
            wi["peer_groups"] = an.groups.summary([an.grid.component(j) for j in range(an.grid.R)])
            del an
        finally:  # the maps are read no more, labeled or not
            remover.start()
            if own:
                cluster.close(client, embedded)
        return _write_labels(rd, labels, wi, cfg)
    finally:
        remover.join()


def _remove_work(work: str) -> None:
    """Remove the out-of-core labeler's work folder ``work`` (made by
    :func:`_work_folder`, 0700): its files at once, each on a thread of its own (the
    kernel frees each map's page cache as it goes, a core's worth of work a few GB a
    second), then the folder."""
    try:
        names = os.listdir(work)
    except OSError:
        names = []
    threads = [threading.Thread(target=_unlink_quietly, args=(os.path.join(work, n),), daemon=True) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shutil.rmtree(work, ignore_errors=True)


def _unlink_quietly(path: str) -> None:
    """Remove the file ``path`` (a folder or a missing file: left to the rmtree after)."""
    try:
        os.unlink(path)
    except OSError:
        pass


__all__ = [
    "Analysis",
    "LabelerConfig",
    "StepGrid",
    "analyze",
    "fuse",
    "label",
    "label_run",
    "read_steps",
    "reconcile",
    "whatif",
    "fusion",
    "peer",
    "temporal",
]
