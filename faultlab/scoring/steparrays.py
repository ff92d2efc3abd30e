"""Numpy arrays of a run's steps table, converted once and shared by every built-in
detector and the metrics of that run.

Why: on pandas 3 a string column (``peer_group``, ``run_id``) is Arrow-backed, and
grouping, sorting or building ``"rank:N"`` strings through pandas costs more than a
detector's arithmetic. :func:`step_arrays` does that work once per steps frame: while
:func:`shared` is active (``faultlab.scoring.api`` holds it around each run) the
arrays of the last frame seen are reused by identity; outside it each call converts
afresh (a caller that changes a frame in place between calls gets fresh arrays).
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

import numpy as np
import pandas as pd

_SCOPE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("faultlab_step_arrays", default=None)


@dataclass(frozen=True)
class StepArrays:
    """The columns of one steps frame (n rows, in the frame's order).

    ``rank``, ``step`` int64; ``t_start``, ``t_end`` (= ``t_start + step_s``) unix s;
    ``step_s``, ``compute_s``, ``dataloader_s`` (NaN or a missing column read as 0) s;
    ``peer`` int64 codes of ``peer_group`` (as text); ``names`` the sorted distinct
    ``"rank:N"`` names (string order, as pandas sorts them), ``comp`` each row's code
    into ``names`` and ``component`` its name (object array); ``run_id`` the first
    row's run_id ("" without one)."""

    n: int
    rank: np.ndarray
    step: np.ndarray
    t_start: np.ndarray
    t_end: np.ndarray
    step_s: np.ndarray
    compute_s: np.ndarray
    dataloader_s: np.ndarray
    peer: np.ndarray
    names: np.ndarray
    comp: np.ndarray
    component: np.ndarray
    run_id: str

    def rank_names(self) -> list[str]:
        """``"rank:N"`` of every rank, by rank number (the order detectors list them)."""
        return ["rank:" + str(r) for r in np.unique(self.rank)]


def _convert(steps: pd.DataFrame) -> StepArrays:
    rank = steps["rank"].to_numpy().astype(np.int64, copy=False)
    t_start = steps["t_start"].to_numpy(np.float64)
    step_s = steps["step_s"].to_numpy(np.float64)
    dl = steps["dataloader_s"].to_numpy(np.float64) if "dataloader_s" in steps.columns else np.zeros(len(steps))
    ranks, inv = np.unique(rank, return_inverse=True)
    rank_names = np.array(["rank:" + str(r) for r in ranks], dtype=object)
    order = np.argsort(rank_names.astype(str), kind="mergesort")  # string order: rank:10 before rank:2
    names = rank_names[order]
    code_of_rank = np.empty(len(ranks), np.int64)
    code_of_rank[order] = np.arange(len(ranks))
    comp = code_of_rank[inv].reshape(-1)
    peer, _ = pd.factorize(steps["peer_group"].astype(str), sort=True)
    rid = steps["run_id"] if "run_id" in steps.columns else None
    return StepArrays(
        n=len(steps), rank=rank, step=steps["step"].to_numpy().astype(np.int64, copy=False), t_start=t_start,
        t_end=(steps["t_start"] + steps["step_s"]).to_numpy(np.float64), step_s=step_s,
        compute_s=steps["compute_s"].to_numpy(np.float64), dataloader_s=np.where(np.isnan(dl), 0.0, dl),
        peer=np.asarray(peer, np.int64), names=names, comp=comp, component=names[comp],
        run_id=str(rid.iloc[0]) if rid is not None and len(steps) else "",
    )


def step_arrays(steps: pd.DataFrame) -> StepArrays:
    """The :class:`StepArrays` of ``steps`` (STEPS columns ``rank``, ``step``,
    ``t_start``, ``step_s``, ``compute_s``, ``peer_group``; ``dataloader_s`` and
    ``run_id`` optional). Inside :func:`shared`, the same frame object gets the same
    arrays. Raises KeyError for a missing required column."""
    scope = _SCOPE.get()
    if scope is None:
        return _convert(steps)
    last = scope.get("steps")
    if last is not None and last[0] is steps and last[1] == len(steps):
        return last[2]
    arr = _convert(steps)
    scope["steps"] = (steps, len(steps), arr)  # one slot: replay's growing frames never pile up
    return arr


def memo(owner, key: str, steps: pd.DataFrame, make):
    """``make()`` computed once per (``owner``, ``key``, steps frame) inside
    :func:`shared` (``detect`` and ``scores`` of one detector on one run share it);
    outside it, computed on every call. One slot per owner and key."""
    scope = _SCOPE.get()
    if scope is None:
        return make()
    slot = (id(owner), key)
    last = scope.get(slot)
    if last is not None and last[0] is steps and last[1] == len(steps) and last[2] is owner:
        return last[3]
    val = make()
    scope[slot] = (steps, len(steps), owner, val)
    return val


@contextlib.contextmanager
def shared():
    """Share conversions (:func:`step_arrays`, :func:`memo`) inside the block; they are
    dropped when it ends (one run's scoring: memory does not grow with runs)."""
    tok = _SCOPE.set({})
    try:
        yield
    finally:
        _SCOPE.reset(tok)
