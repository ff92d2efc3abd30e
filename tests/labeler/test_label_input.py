"""Bad input to the labeler (``faultlab label RUN_DIR``, ``label``, ``label_run``,
``--import``): one line naming the field and the fix, exit 2, nothing half-written.

No root, no namespaces: pure files and subprocesses of the CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab.errors import BadInput
from faultlab.labeler import StepGrid, label, label_run
from faultlab.labeler import importers
from faultlab.rundir import RunDir
from tests.labeler.test_importers import long_frame, pipeline_trace, write_trace
from tests.labeler.test_labeler import injection, simulate, step_time
from tests.helpers import fl, fl_many, one_line_error



def field_error(cp: subprocess.CompletedProcess, field: str) -> str:
    """The one-line refusal (exit 2) of a CLI run, which names ``field`` first."""
    line = one_line_error(cp)
    assert line.startswith(f"faultlab: error: {field}: "), line
    return line


@pytest.fixture(scope="module")
def steps() -> pd.DataFrame:
    return simulate(straggler=(1, 100, 200, 2.0), n_steps=240)


def make_run(path: Path, steps: pd.DataFrame | None, *, raw_parquet: bool = False, inj: list | None = None) -> Path:
    """A run directory as faultlab run leaves it (meta.json, telemetry/, steps.parquet);
    ``raw_parquet`` writes ``steps`` as given, without the STEPS schema's casts."""
    rd = RunDir.create(path, run_id=path.name, scenario={"name": "t"})
    if steps is not None:
        if raw_parquet:
            pq.write_table(pa.Table.from_pandas(steps, preserve_index=False), rd.table_path("steps"))
        else:
            rd.write_table("steps", steps)
    if inj is not None:
        rd.write_table("injections", pd.DataFrame(inj))
    return path


def outputs(path: Path) -> dict[str, bytes]:
    return {n: (path / n).read_bytes() for n in ("labels.parquet", "whatif.json") if (path / n).is_file()}


# -- 1. what the CLI says about an unreadable or malformed run ---------------------------


def _corrupt(p: Path, steps):
    make_run(p, steps)
    (p / "steps.parquet").write_bytes(b"not parquet at all")


def _truncated(p: Path, steps):
    make_run(p, steps)
    d = (p / "steps.parquet").read_bytes()
    (p / "steps.parquet").write_bytes(d[: len(d) // 2])


def _bad_meta(p: Path, steps):
    make_run(p, steps)
    (p / "meta.json").write_text("{not json")


def _raw_telemetry(p: Path, steps, drop=None, **set_):
    make_run(p, None)
    s = steps.drop(columns=[drop]) if drop else steps.copy()
    for k, v in set_.items():
        s[k] = v(s)
    with open(p / "telemetry" / "steps-0.jsonl", "w") as f:
        for rec in s.to_dict("records"):
            f.write(json.dumps(rec) + "\n")


def _parquet_with(p: Path, steps, **set_):
    s = steps.copy()
    for k, v in set_.items():
        s[k] = v(s)
    make_run(p, s, raw_parquet=True)


def _nullable_step(s):
    v = s["step"].astype("Int64")
    v.iloc[7] = pd.NA
    return v


BAD_RUNS = {
    "corrupt steps.parquet": (_corrupt, "steps.parquet"),
    "truncated steps.parquet": (_truncated, "steps.parquet"),
    "invalid meta.json": (_bad_meta, "meta.json"),
    "raw telemetry without comm_s": (lambda p, s: _raw_telemetry(p, s, drop="comm_s"), "telemetry/steps-*.jsonl"),
    "raw telemetry rank r0": (lambda p, s: _raw_telemetry(p, s, rank=lambda d: "r" + d["rank"].astype(str)), "rank"),
    "rank r0": (lambda p, s: _parquet_with(p, s, rank=lambda d: "r" + d["rank"].astype(str)), "rank"),
    "text in compute_s": (lambda p, s: _parquet_with(p, s, compute_s=lambda d: d["compute_s"].astype(str).where(
        d["step"] != 50, "slow")), "compute_s"),
    "nullable step with NA": (lambda p, s: _parquet_with(p, s, step=_nullable_step), "step"),
    # each of these would be labeled silently, exit 0, with wrong labels
    "t_start in milliseconds": (lambda p, s: _parquet_with(p, s, t_start=lambda d: d["t_start"] * 1e3), "t_start"),
    "t_start in nanoseconds": (lambda p, s: _parquet_with(p, s, t_start=lambda d: (d["t_start"] * 1e9).astype("int64")),
                               "t_start"),
    "a (rank, step) recorded twice": (lambda p, s: make_run(p, pd.concat([s, s.iloc[:100]]), raw_parquet=True), "step"),
    "a negative rank": (lambda p, s: _parquet_with(p, s, rank=lambda d: d["rank"].where(d["step"] != 9, -1)), "rank"),
}


#: refused by label only: score and report say "no step telemetry" of their own (field RUN_DIR)
def _linked_steps(p: Path, steps, dangling: bool):
    make_run(p, steps)
    real = p.parent / "elsewhere.parquet"
    (p / "steps.parquet").rename(real)
    if dangling:
        real.unlink()
    (p / "steps.parquet").symlink_to(real)


LABEL_BAD_RUNS = {**BAD_RUNS, "steps.parquet with no row": (lambda p, s: make_run(p, s.iloc[:0], raw_parquet=True), "steps"),
                  # a dangling link was passed over for telemetry/ without a word
                  "steps.parquet a dangling link": (lambda p, s: _linked_steps(p, s, True), "steps.parquet"),
                  "steps.parquet a link": (lambda p, s: _linked_steps(p, s, False), "steps.parquet")}


@pytest.fixture(scope="module")
def label_refusals(steps, tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """For each case of LABEL_BAD_RUNS: its run directory (in a folder of its own) and
    ``faultlab label`` run on it, all in one child process through faultlab's entry point."""
    runs = {}
    for i, case in enumerate(sorted(LABEL_BAD_RUNS)):
        runs[case] = tmp_path_factory.mktemp(f"label-{i}") / "run"
        LABEL_BAD_RUNS[case][0](runs[case], steps)
    done = fl_many([["label", str(run)] for run in runs.values()])
    return {case: (run, cp) for (case, run), cp in zip(runs.items(), done)}


@pytest.mark.parametrize("case", sorted(LABEL_BAD_RUNS))
def test_cli_label_bad_run_is_one_line_exit_2_nothing_written(label_refusals, case):
    run, cp = label_refusals[case]
    field_error(cp, LABEL_BAD_RUNS[case][1])
    assert not (run / "labels.parquet").exists() and not (run / "whatif.json").exists()
    assert not list(run.glob("*.tmp"))


def test_cli_label_refuses_a_folder_that_is_no_run_directory(tmp_path):
    d = tmp_path / "notes"
    d.mkdir()
    (d / "notes.txt").write_text("hi")
    line = field_error(fl("label", str(d)), "PATH")
    assert "run directory" in line and "faultlab run" in line
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]  # nothing written into it
    with pytest.raises(BadInput) as ei:
        label_run(d)
    assert ei.value.field == "PATH"
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]


def test_a_killed_run_with_only_raw_telemetry_is_still_labeled(tmp_path, steps):
    run = tmp_path / "run"
    _raw_telemetry(run, steps)
    lab = label_run(run)
    assert lab["component"].tolist() == ["rank:1"]


# -- 2. rank and step must be integers -------------------------------------------------


def test_null_rank_is_bad_input_not_a_fake_rank(steps):
    s = steps.astype({"rank": "float64"})
    s.loc[s.index[:5], "rank"] = np.nan
    with pytest.raises(BadInput) as ei:
        label(s)
    assert ei.value.field == "rank" and "null" in str(ei.value)
    s = steps.astype({"rank": "Int64"})
    s.loc[s.index[3], "rank"] = pd.NA
    with pytest.raises(BadInput) as ei:
        StepGrid.from_steps(s)
    assert ei.value.field == "rank"


def test_fractional_step_is_bad_input_integral_floats_are_fine(steps):
    s = steps.astype({"step": "float64", "rank": "float64"})
    ok = StepGrid.from_steps(s)  # whole numbers as floats: the same grid
    ref = StepGrid.from_steps(steps)
    assert np.array_equal(ok.steps, ref.steps) and np.array_equal(ok.ranks, ref.ranks)
    s.loc[s.index[10], "step"] = 2.5
    with pytest.raises(BadInput) as ei:
        label(s)
    assert ei.value.field == "step" and "2.5" in str(ei.value)


# -- 3. durations and start times --------------------------------------------------------


@pytest.mark.parametrize("col", ["step_s", "compute_s", "comm_s"])
@pytest.mark.parametrize("bad", [-0.5, np.inf, -np.inf])
def test_negative_or_infinite_durations_are_named(steps, col, bad):
    s = steps.copy()
    s.loc[s["step"].between(50, 60), col] = bad
    with pytest.raises(BadInput) as ei:
        label(s)
    assert ei.value.field == col


def test_nan_durations_stay_allowed_as_missing(steps):
    s = steps.copy()
    s.loc[(s["rank"] == 2) & s["step"].between(10, 20), ["compute_s", "comm_s", "step_s"]] = np.nan
    assert label(s)["component"].tolist() == ["rank:1"]


def test_t_start_all_missing_or_going_back_is_named(steps):
    s = steps.copy()
    s["t_start"] = np.nan
    with pytest.raises(BadInput) as ei:
        label(s)
    assert ei.value.field == "t_start"
    s = steps.copy()
    s.loc[(s["rank"] == 2) & s["step"].between(150, 160), "t_start"] -= 100
    with pytest.raises(BadInput) as ei:
        label(s)
    assert ei.value.field == "t_start" and "must increase with step for each rank" in str(ei.value)
    assert "rank 2" in str(ei.value) and "step 150" in str(ei.value)
    s.loc[(s["rank"] == 2) & (s["step"] == 150), "t_start"] = np.nan  # going back across a missing value
    with pytest.raises(BadInput, match="rank 2 starts step 151"):
        label(s)
    # rows in any order, a missing start time: no error
    s = steps.sample(frac=1.0, random_state=3).copy()
    s.loc[s.index[:20], "t_start"] = np.nan
    assert label(s)["component"].tolist() == ["rank:1"]


# -- 4. outputs are all or nothing ---------------------------------------------------------


@pytest.mark.parametrize("blocked", ["labels.parquet", "whatif.json"])
def test_label_run_outputs_all_or_nothing(tmp_path, steps, blocked):
    """An output that cannot be written (a folder where the file goes) leaves every
    output as it was, and no temporary behind."""
    run = make_run(tmp_path / "run", steps)
    label_run(run)
    before = outputs(run)
    # relabel with an injection: labels.parquet would change
    RunDir(run).write_table("injections", pd.DataFrame(
        [injection("f1", "cpu-contention", "n0", "rank:1", step_time(steps, 100), step_time(steps, 200))]))
    (run / blocked).unlink()
    before.pop(blocked)
    (run / blocked).mkdir()
    with pytest.raises(OSError):
        label_run(run)
    assert outputs(run) == before
    assert [p.name for p in run.glob("*.tmp")] + [p.name for p in run.glob(".*.tmp")] == []
    line = field_error(fl("label", str(run)), "PATH")
    assert "cannot write" in line
    assert outputs(run) == before
    (run / blocked).rmdir()
    lab = label_run(run)
    assert lab.fault_id.dropna().tolist() == ["f1"] and set(outputs(run)) == {"labels.parquet", "whatif.json"}


def test_write_together_is_all_or_nothing_and_removes_only_its_own_temp_files(tmp_path):
    from faultlab.rundir import write_together

    (tmp_path / "b.tmp").mkdir()  # not ours: kept
    (tmp_path / "a").write_text("old")

    def fail(t):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_together(tmp_path, {"a": lambda t: t.write_text("new"), "b": fail})
    assert (tmp_path / "a").read_text() == "old" and (tmp_path / "b.tmp").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b.tmp"]
    (tmp_path / "b").mkdir()  # a target that is a folder: refused before anything is written
    with pytest.raises(IsADirectoryError):
        write_together(tmp_path, {"a": lambda t: t.write_text("new"), "b": lambda t: t.write_text("new")})
    assert (tmp_path / "a").read_text() == "old"


def test_import_outputs_all_or_nothing_and_no_stale_whatif(tmp_path):
    out = tmp_path / "out"
    trace = importers.import_path("straggler-trace", write_trace(tmp_path, pipeline_trace(slow={(1, 1): 1.6})))
    importers.write_outputs(trace, out)
    assert {p.name for p in out.iterdir()} == {"labels.parquet", "whatif.json", "import.json"}
    f = tmp_path / "tele.csv"
    long_frame().to_csv(f, index=False)
    long = importers.import_path("long", f)
    # components.parquet cannot be written: labels.parquet must stay the trace's
    before = (out / "labels.parquet").read_bytes()
    (out / "components.parquet").mkdir()
    with pytest.raises(OSError):
        importers.write_outputs(long, out)
    assert (out / "labels.parquet").read_bytes() == before and (out / "whatif.json").exists()
    line = field_error(fl("label", "--import", "long", str(f), "--out", str(out)), "--out")
    assert "cannot write" in line and (out / "labels.parquet").read_bytes() == before
    (out / "components.parquet").rmdir()
    # re-used folder: the trace's whatif.json must not survive the long import
    written = importers.write_outputs(long, out)
    assert set(written) == {"labels.parquet", "components.parquet", "import.json"}
    assert {p.name for p in out.iterdir()} == {"labels.parquet", "components.parquet", "import.json"}
    importers.write_outputs(trace, out)
    assert {p.name for p in out.iterdir()} == {"labels.parquet", "whatif.json", "import.json"}


# -- 5. injections ---------------------------------------------------------------------------


def test_injection_ending_before_it_starts_is_named(steps):
    inj = pd.DataFrame([injection("f1", "cpu-contention", "n0", "rank:1", step_time(steps, 120), step_time(steps, 100))])
    with pytest.raises(BadInput) as ei:
        label(steps, inj)
    assert ei.value.field == "end_ts" and "f1" in str(ei.value)
    inj.loc[0, "end_ts"] = np.nan  # an unknown end (revert failed): no error
    assert "f1" in label(steps, inj).fault_id.tolist()


def test_injection_on_a_rank_not_in_the_run_is_not_measured_on_others(steps):
    inj = pd.DataFrame([injection("f9", "cpu-contention", "n0", "rank:99", step_time(steps, 100), step_time(steps, 200))])
    lab = label(steps, inj)
    row = lab[lab.fault_id == "f9"].iloc[0]
    assert row.component == "rank:99" and row.source == "injected-unmanifested"
    assert np.isnan(row.slowdown)  # not the job's ratio as if measured
    ev = json.loads(row.evidence)
    assert ev["target_in_run"] is False and "not in the run" in ev["reason"] and ev["measured_ratio"] is None
    assert ev["run_ranks"] == {"n": 4, "min": 0, "max": 3}


# -- 6. the long importer and upstream answer-file names ------------------------------------


@pytest.mark.parametrize("name", ["ms-latency.csv", "mw-disk.csv", "result-2024.csv"])
def test_long_reads_a_user_file_given_by_name_whatever_its_name(tmp_path, name):
    f = tmp_path / name
    long_frame().to_csv(f, index=False)
    assert importers.import_path("long", f).labels["component"].tolist() == ["c2"]
    # in a folder the same name is skipped as an upstream answer file, and the error says so
    with pytest.raises(BadInput) as ei:
        importers.import_path("long", tmp_path)
    assert ei.value.field == "PATH" and "answer" in str(ei.value) and name in str(ei.value)


def test_long_still_refuses_the_perseus_answer_file(tmp_path):
    f = tmp_path / "slow_drives.csv"
    long_frame().to_csv(f, index=False)
    with pytest.raises(BadInput, match="answer"):
        importers.import_path("long", f)


@pytest.fixture(scope="module")
def score_report_refusals(steps, tmp_path_factory) -> dict[tuple[str, str], tuple[Path, list[str], subprocess.CompletedProcess]]:
    """For each case of BAD_RUNS and each of ``score --run`` and ``report``: a run
    directory of its own with an empty labels table, the names in it before, and the
    command run on it, all in one child process through faultlab's entry point."""
    from faultlab import schema

    made, argvs = {}, []
    for i, case in enumerate(sorted(BAD_RUNS)):
        for command in ("score", "report"):
            run = tmp_path_factory.mktemp(f"{command}-{i}") / "run"
            BAD_RUNS[case][0](run, steps)
            RunDir(run).write_table("labels", schema.empty("labels"))
            made[(case, command)] = (run, sorted(p.name for p in run.iterdir()))
            argvs.append(["score", "--detector", "peer-median", "--boot", "0", "--run", str(run), "--out", str(run.parent / "s.json")]
                         if command == "score" else ["report", str(run)])
    return {key: (*made[key], cp) for key, cp in zip(made, fl_many(argvs))}


@pytest.mark.parametrize("command", ["score", "report"])
@pytest.mark.parametrize("case", sorted(BAD_RUNS))
def test_cli_score_and_report_refuse_a_bad_run_as_label_does(score_report_refusals, case, command):
    """What ``faultlab label`` refuses, ``score --run`` and ``report`` refuse the same
    way: one line, exit 2, never a traceback (a text ``rank`` included)."""
    run, before, cp = score_report_refusals[(case, command)]
    field_error(cp, BAD_RUNS[case][1])
    assert sorted(p.name for p in run.iterdir()) == before and not (run.parent / "s.json").exists()
