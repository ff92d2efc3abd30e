"""``faultlab score``: score a detector on a dataset or on run directories, and gate
a CI on it (registered in faultlab/cli.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape as rich_escape
from rich.table import Table

from faultlab import safefs
from faultlab.cliopts import refuse_together
from faultlab.errors import BadInput, FaultlabError, printable

# Lazy imports: the CLI imports this module to register ``faultlab score``; scoring
# (pandas, numpy) is imported inside the command, so ``faultlab --help`` stays fast.

TABLE_METRICS = (
    ("window_precision", "window P"), ("window_recall", "window R"), ("window_f1", "window F1"),
    ("window_f1_point_adjusted", "window F1 point-adjusted (inflated: Kim et al. AAAI'22)"), ("window_mcc", "window MCC"),
    ("event_precision", "event P"), ("event_recall", "event R"), ("event_f1", "event F1"),
    ("range_precision", "range P"), ("range_recall", "range R"), ("range_f1", "range F1"),
    ("precision", "component P"), ("recall", "component R"), ("f1", "component F1"), ("mcc", "component MCC"),
    ("acc_at_1", "Acc@1"), ("acc_at_k", "Acc@k"), ("auc_pr", "AUC-PR"), ("vus_pr", "VUS-PR"),
    ("latency_median_s", "latency median (s)"), ("latency_p95_s", "latency p95 (s)"),
    ("false_alarms_per_component_hour", "false alarms / component-h"), ("unmanifested_alarmed_share", "unmanifested faults alarmed"),
)


def parse_params(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings to a dict of texts (typed later by the detector's declared
    parameters: :func:`faultlab.scoring.lookup.typed_params`). Raises BadInput (field
    ``--param``) for an item without ``=``."""
    out = {}
    for it in items or []:
        key, eq, val = it.partition("=")
        if not eq or not key.strip():
            raise BadInput(f"{it!r} is not KEY=VALUE", field="--param", fix="e.g. --param threshold=2.0")
        out[key.strip()] = val
    return out


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.3f}"


def _ci(c, n_runs: int = 2) -> str:
    """``[lo, hi]``; ``n/a (1 run)`` for fewer than 2 runs; ``-`` for an undefined one."""
    if n_runs < 2:
        return "n/a (1 run)"
    if not c or c[0] is None or (isinstance(c[0], float) and math.isnan(c[0])):
        return "-"
    return f"[{c[0]:.3f}, {c[1]:.3f}]"


def _plain(text) -> str:
    """``text`` as one plain line in a rich table: unprintable characters ``?``
    (:func:`errors.printable`), rich markup shown as it is, never interpreted."""
    return rich_escape(printable(text))


def print_result(res: dict, con: Console) -> None:
    # the source and the groups (a dataset's fault types) are whoever made the dataset's names: plain text only
    t = Table(title=_plain(f"{res['detector']} on {res['source'] or 'runs'} ({res['split']} split, {res['n_runs']} runs, {res['mode']})"))
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_column("95% CI (bootstrap over runs)")
    for key, label in TABLE_METRICS:
        m = res["metrics"].get(key)
        if m is not None:
            t.add_row(label, _fmt(m["value"]), _ci(m["ci"], res["n_runs"]))
    con.print(t)
    if res.get("by"):
        b = Table(title=f"by {res['by_key']} (label-side figures)")
        for c in ("group", "labels", "event R", "window R", "range R", "Acc@1", "latency median (s)"):
            b.add_column(c)
        for g, d in res["by"].items():
            m = d["metrics"]
            b.add_row(_plain(g), str(d["n_labels"]), *(f"{_fmt(m[k]['value'])} {_ci(m[k]['ci'], res['n_runs'])}" if k in m else "-"
                                                  for k in ("event_recall", "window_recall", "range_recall", "acc_at_1", "latency_median_s")))
        con.print(b)


def score_cmd(
    ctx: typer.Context,
    detector: str = typer.Option(..., "--detector", help="a built-in name, an entry point of group faultlab.detectors, or module:Class"),
    param: List[str] = typer.Option([], "--param", metavar="KEY=VALUE", help="a detector parameter (repeatable); typed as the detector's constructor declares it (threshold: float reads 2 as 2.0, a str parameter keeps 7 as \"7\"); an unannotated one reads as YAML (2, 0.5, true, text)"),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="a dataset folder (faultlab dataset build; ./NAME for one in the working folder), or a name from faultlab dataset list"),
    run: List[Path] = typer.Option([], "--run", help="a labeled run directory (repeatable)"),
    split: str = typer.Option("test", "--split", help="test (the default: fit on train, score test) | train | all (no fitting); run directories are always all"),
    mode: str = typer.Option("offline", "--mode", help="offline (whole run at once) | replay (online, a clock; measures latency)"),
    by: str = typer.Option("fault_type", "--by", help="breakdown of label-side figures: fault_type | source | none"),
    window: str = typer.Option("10s", "--window", help="cell width of the window-level metrics"),
    tick: str = typer.Option("1s", "--tick", help="replay clock step"),
    boot: int = typer.Option(1000, "--boot", min=0, help="bootstrap resamples for the 95% CIs (0: none)"),
    seed: int = typer.Option(0, "--seed", help="seed of the bootstrap"),
    as_json: bool = typer.Option(False, "--json", help="the result as one JSON object on stdout (what --out writes): each metric's value and 95% CI over runs, the settings and the breakdown"),
    out_file: Optional[Path] = typer.Option(None, "--out", help="write the result as JSON (the --baseline of a later run)"),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="a previous --out file: exit 1 if a metric dropped by more than --max-drop"),
    max_drop: float = typer.Option(0.02, "--max-drop", help="allowed drop per metric (absolute, in the metric's unit)"),
    metric: List[str] = typer.Option([], "--metric", help="metric the gate judges (repeatable; default event_f1 window_f1 window_mcc range_f1 vus_pr acc_at_1)"),
    allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help="compare with a baseline scored on another dataset, split, mode, window, tick or parameters (refused by default, exit 2); the output says so"),
    verify: bool = typer.Option(False, "--verify", help="check the dataset's files against its MANIFEST.sha256 first, exit 2 naming a changed or missing file (the default)"),
    no_verify: bool = typer.Option(False, "--no-verify", help="score the dataset as it is, without checking it against its MANIFEST.sha256"),
):
    """Score a detector against labels: window, event, range-based and component
    P/R/F1/MCC, Acc@k, AUC-PR/VUS-PR, latency (replay) and false alarms, each with a
    95% bootstrap CI over runs; optionally gate on a previous score."""
    from faultlab.scoring import gate
    from faultlab.scoring.api import score_dataset, score_runs
    from faultlab.scoring.lookup import typed_params
    from faultlab.rundata import iter_run_dirs
    from faultlab.units import parse_duration

    refuse_together(ctx, {"--verify": verify, "--no-verify": no_verify})
    verify = not no_verify
    con = Console(stderr=as_json, highlight=False)
    try:
        if (dataset is None) == (not run):
            raise BadInput("give one of --dataset DIR or --run RUN_DIR ...", field="--dataset/--run")
        params = typed_params(detector, parse_params(param))
        kw = dict(params=params, mode=mode, by=by, window_s=parse_duration(window, "--window"), tick_s=parse_duration(tick, "--tick"),
                  n_boot=boot, seed=seed)
        if dataset is not None:
            res = score_dataset(detector, dataset, split=split, verify=verify, **kw)
        else:
            if split != "test" and split != "all":
                raise BadInput(f"unknown split {split!r}", field="--split", fix="test or all")
            res = score_runs(detector, iter_run_dirs(run), split="all", source=", ".join(map(str, run)), **kw)
        d = res.to_dict()
        base = gate.load_baseline(baseline) if baseline else None
        allowed = gate.require_comparable(d, base, baseline, allow_mismatch) if base else []
        verdicts = gate.compare(d, base, max_drop, metric) if base else []
        if base is not None:
            d["gate"] = gate.verdict(verdicts, baseline, max_drop, allowed)
    except FaultlabError as e:
        print(f"faultlab: error: {e}", file=sys.stderr)
        raise typer.Exit(e.exit_code)
    if out_file:
        d_out = {k: v for k, v in d.items() if k != "gate"}  # a score, the baseline of a later run: not this run's verdict
        try:  # no link followed: the folder opened from / component by component, a fresh file renamed over the name
            with safefs.open_dir_nofollow(out_file.parent, create=True) as folder:
                folder.write_atomic(safefs.check_name(out_file.name), json.dumps(d_out, indent=2), 0o644)
        except safefs.UntrustedPath as e:
            print(f"faultlab: error: --out: {e}", file=sys.stderr)
            raise typer.Exit(2)
        except OSError as e:
            print(f"faultlab: error: --out: cannot write {out_file} ({e.strerror or e}) (give a writable path, e.g. scores.json)", file=sys.stderr)
            raise typer.Exit(2)
    if as_json:
        print(json.dumps(d, indent=2))
    else:
        print_result(d, con)
    if base is not None:
        err = Console(stderr=True, soft_wrap=True, highlight=False)  # one verdict per line, never folded at the terminal width
        if allowed:
            # what differs quotes the baseline file's fields (split, mode, source, parameters): printable only
            err.print(printable(f"gate: compared despite a mismatch (--allow-mismatch): {'; '.join(allowed)}"), markup=False, highlight=False)
        dropped = [v for v in verdicts if v.status == "dropped"]
        for v in verdicts:
            err.print(v.line(), markup=False, highlight=False)
        if dropped:
            err.print(f"gate FAILED: {', '.join(v.metric for v in dropped)} dropped by more than {max_drop:g} against {baseline}", markup=False)
            raise typer.Exit(1)
        better = [v.metric for v in verdicts if v.status == "improved"]
        err.print(f"gate passed against {baseline}" + (f"; improved: {', '.join(better)}" if better else "; no metric dropped by more than " + f"{max_drop:g}"), markup=False)


def register(app: typer.Typer) -> None:
    """Add ``score`` to the faultlab CLI."""
    app.command("score")(score_cmd)
