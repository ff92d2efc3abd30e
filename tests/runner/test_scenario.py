"""Scenario and campaign files: malformed ones are refused before anything starts,
naming file, line and field; campaigns are deterministic in their seed; a runner
killed with SIGKILL leaves a readable, incomplete run and no faults."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from faultlab.errors import BadInput
from faultlab.scenario import Campaign, Scenario, load
from faultlab.runner import TESTBED_LEASE_S
from tests.helpers import EXAMPLE_CAMPAIGN, FL, REPO, end_leases_now, fl, fl_many, needs_root, one_line_error, residue


GOOD = """\
name: t
testbed: {backend: netns, nodes: 4}
workload: {kind: ddp, duration: 60s}
faults:
  - type: nic-slow
    node: n2
    at: 12s
    duration: 10s
    params: {rate: 50mbit}
  - type: cpu-contention
    rank: 1
    at: 30s
    duration: 10s
    params: {cpu_fraction: 0.3}
"""

BAD = [
    # (what to replace in GOOD, with what, expected line, expected field fragment, message fragment)
    ("nodes: 4", "nodes: four", 2, "testbed.nodes", "integer"),
    ("type: nic-slow", "type: nic-slo", 5, "faults[0].type", "unknown fault type"),
    ("duration: 10s\n    params: {rate", "duration: -10s\n    params: {rate", 8, "faults[0].duration", "negative"),
    ("duration: 10s\n    params: {rate", "duration: 10\n    params: {rate", 8, "faults[0].duration", "no unit"),
    ("node: n2", "node: n9", 6, "faults[0].node", "does not exist"),
    ("rank: 1", "rank: 7", 11, "faults[1].rank", "does not exist"),
    ("{rate: 50mbit}", "{rate: 100 mbps}", 9, "faults[0].params.rate", "space before its unit"),
    ("{rate: 50mbit}", "{rate: 50mbit, colour: red}", 9, "faults[0].params", "unknown parameter"),
    ("{cpu_fraction: 0.3}", "{cpu_fraction: 1.7}", 14, "faults[1].params.cpu_fraction", "outside"),
    ("at: 30s", "at: 55s", 12, "faults[1].at", "after the run"),
    ("workload: {kind: ddp, duration: 60s}", "workload: {kind: ddp, duration: 60s, batchsize: 3}", 3, "workload.batchsize", "unknown field"),
    ("    at: 12s\n", "", 5, "faults[0]", "exactly one of at"),
    ("rank: 1", "node: n1", 10, "faults[1]", "give rank"),
]


def _write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_scenario_loads(tmp_path):
    sc = load(_write(tmp_path, GOOD))
    assert isinstance(sc, Scenario) and sc.faults[0].duration == 10.0 and sc.faults[1].options() == {"--cpu-fraction": "0.3"}


@pytest.mark.parametrize("old,new,line,field,msg", BAD, ids=[b[3] + ":" + b[4] for b in BAD])
def test_malformed_scenario_names_file_line_field(tmp_path, old, new, line, field, msg):
    assert old in GOOD
    p = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(BadInput) as e:
        load(p)
    text = str(e.value)
    assert text.startswith(f"{p}:{line}: {field}"), text
    assert msg in text, text


def test_overlapping_same_kind_faults_on_one_target_are_refused(tmp_path):
    extra = "  - type: cpu-contention\n    rank: 1\n    at: 35s\n    duration: 10s\n    params: {cpu_fraction: 0.5}\n"
    p = _write(tmp_path, GOOD + extra)
    with pytest.raises(BadInput, match=r"s.yaml:15: faults\[2\]: overlaps faults\[1\]"):
        load(p)
    # another kind on the same rank at the same time is fine
    ok = extra.replace("cpu-contention", "process-pause").replace("{cpu_fraction: 0.5}", "{pause: 100ms, period: 500ms}")
    assert len(load(_write(tmp_path, GOOD + ok, "ok.yaml")).faults) == 3


def test_repeat_that_overlaps_itself_is_refused(tmp_path):
    p = _write(tmp_path, GOOD.replace("    at: 12s\n", "    at: 12s\n    repeat: {every: 5s, times: 3}\n"))
    with pytest.raises(BadInput, match="repeat.every"):
        load(p)


def test_cli_validate_exit_2_one_line_and_nothing_started(tmp_path):
    before = residue()
    p = _write(tmp_path, GOOD.replace("node: n2", "node: n9"))
    for argv in (["scenario", "validate", str(p)], ["run", str(p), "--out", str(tmp_path / "out")]):
        cp = subprocess.run([*FL, *argv], capture_output=True, text=True, timeout=60)
        assert cp.returncode == 2, cp.stderr
        assert cp.stderr.count("\n") == 1 and f"{p}:6: faults[0].node" in cp.stderr
    assert not (tmp_path / "out").exists()
    assert residue() == before


def test_yaml_syntax_error_names_line(tmp_path):
    p = _write(tmp_path, GOOD.replace("nodes: 4}", "nodes: 4"))
    with pytest.raises(BadInput, match=r"s.yaml:\d+: not valid YAML"):
        load(p)


def test_schema_is_json_schema():
    cp = subprocess.run([*FL, "scenario", "schema"], capture_output=True, text=True, timeout=60)
    sch = json.loads(cp.stdout)
    assert sch["type"] == "object" and {"testbed", "workload", "faults"} <= set(sch["properties"])


def test_examples_are_valid():
    files = sorted((REPO / "examples").glob("*.yaml"))
    assert files
    for f in files:
        load(f)


CAMPAIGN = """\
name: c
seed: 42
runs: 20
base:
  testbed: {backend: netns, nodes: 4}
  workload: {duration: 60s}
faults_per_run: [1, 3]
start: [5s, 40s]
duration: [5s, 15s]
types:
  nic-slow: {weight: 1, params: {rate: {low: 10mbit, high: 100mbit}}}
  cpu-contention: {weight: 2, params: {cpu_fraction: {low: 0.2, high: 0.6}}}
  process-pause: {params: {pause: [100ms, 200ms], period: [500ms]}}
"""


def test_campaign_same_seed_same_schedule_and_valid(tmp_path):
    p = _write(tmp_path, CAMPAIGN, "c.yaml")
    c = load(p)
    assert isinstance(c, Campaign)
    a = [s.model_dump() for s in c.scenarios()]
    b = [s.model_dump() for s in load(p).scenarios()]
    assert a == b and len(a) == 20
    other = [s.model_dump() for s in load(_write(tmp_path, CAMPAIGN.replace("seed: 42", "seed: 43"), "d.yaml")).scenarios()]
    assert other != a
    n_faults = sum(len(s["faults"]) for s in a)
    assert 20 <= n_faults <= 60
    cp1 = subprocess.run([*FL, "campaign", str(p), "--dry-run", "--json"], capture_output=True, text=True, timeout=60)
    cp2 = subprocess.run([*FL, "campaign", str(p), "--dry-run", "--json"], capture_output=True, text=True, timeout=60)
    assert cp1.returncode == 0 and cp1.stdout == cp2.stdout and len(json.loads(cp1.stdout)) == 20


@needs_root
def test_sigkill_of_runner_leaves_readable_incomplete_run_and_no_faults(tmp_path):
    """The runner is killed with SIGKILL while a fault is in force: the run directory
    stays readable and says incomplete; the fault's lease ends it and the testbed's
    lease removes the namespaces."""
    sc = GOOD.replace("duration: 60s", "duration: 40s").replace("at: 12s", "at: 3s").replace("duration: 10s\n    params: {rate", "duration: 6s\n    params: {rate")
    p = _write(tmp_path, sc)
    out = tmp_path / "run"
    before = residue()
    env = dict(os.environ)
    proc = subprocess.Popen([*FL, "run", str(p), "--out", str(out), "--no-label"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + 120
    injected = False
    while time.time() < deadline and not injected:
        if (out / "events.jsonl").exists():
            injected = any(json.loads(l)["event"] == "inject" for l in (out / "events.jsonl").read_text().splitlines() if l.strip())
        time.sleep(0.2)
    assert injected, proc.stdout.read() if proc.poll() is not None else "no inject"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    from faultlab.rundir import RunDir

    rd = RunDir(out)
    assert rd.meta["complete"] is False
    steps = rd.read_table("steps")
    assert len(steps) > 0 and steps["rank"].nunique() == 4
    assert any(e["event"] == "inject" for e in rd.events())
    inj = rd.read_table("injections")
    assert len(inj) >= 1 and inj.iloc[0].fault_type == "nic-slow" and inj.iloc[0].status in ("expired", "reverted")
    # the fault ends by its lease (6 s + 15 s grace after the inject), the testbed by its
    # own (TESTBED_LEASE_S after the runner last renewed it; its teardown ends the ranks):
    # each lease still there is checked to end within that by itself, then moved to now
    ids = end_leases_now(TESTBED_LEASE_S + 1)
    assert any(i.startswith("testbed-") for i in ids), ids
    end = time.time() + 150
    while time.time() < end and residue() != before:
        time.sleep(1)
    assert residue() == before, {k: residue()[k] - before[k] for k in before}


def test_campaign_spacing_keeps_faults_apart(tmp_path):
    text = CAMPAIGN.replace("faults_per_run: [1, 3]", "faults_per_run: [2, 2]\nspacing: 3s")
    c = load(_write(tmp_path, text, "s.yaml"))
    assert c.spacing == 3.0
    scs = c.scenarios()
    assert [s.model_dump() for s in scs] == [s.model_dump() for s in c.scenarios()]
    n = 0
    for s in scs:
        spans = sorted((f.at, f.at + f.duration) for f in s.faults)
        n += len(spans)
        for (a0, b0), (a1, b1) in zip(spans, spans[1:]):
            assert a1 >= b0 + 3.0, spans
    assert n >= 30
    # without spacing the same campaign overlaps faults somewhere
    loose = load(_write(tmp_path, CAMPAIGN.replace("faults_per_run: [1, 3]", "faults_per_run: [2, 2]"), "l.yaml")).scenarios()
    assert any(
        a1 < b0 for s in loose for (a0, b0), (a1, b1) in zip(*(lambda sp: (sp, sp[1:]))(sorted((f.at, f.at + f.duration) for f in s.faults)))
    )


SPACINGS = [("-2s", "negative"), ("3", "no unit")]


@pytest.fixture(scope="module")
def bad_spacings(tmp_path_factory) -> list:
    """``scenario validate`` of the campaign with each spacing of SPACINGS, run once (one child process)."""
    d = tmp_path_factory.mktemp("spacing")
    files = [_write(d, CAMPAIGN.replace("faults_per_run: [1, 3]", f"faults_per_run: [1, 3]\nspacing: {value}"), f"b{i}.yaml")
             for i, (value, _) in enumerate(SPACINGS)]
    return fl_many([["scenario", "validate", str(p)] for p in files])


@pytest.mark.parametrize("i", range(len(SPACINGS)), ids=[f"{v}-{w}" for v, w in SPACINGS])
def test_campaign_bad_spacing(bad_spacings, i):
    cp, word = bad_spacings[i], SPACINGS[i][1]
    assert cp.returncode == 2 and "spacing" in cp.stderr and word in cp.stderr.lower(), cp.stderr


NOT_UTF8_COMMANDS = [["scenario", "validate"], ["run"], ["campaign", "--dry-run"]]


@pytest.fixture(scope="module")
def not_utf8_refusals(tmp_path_factory) -> list:
    """Each command of NOT_UTF8_COMMANDS given a scenario that is not UTF-8, run once (one child process)."""
    p = tmp_path_factory.mktemp("utf8") / "s.yaml"
    p.write_bytes(b"name: x\xff\xfe\nseed: 0\n")
    return fl_many([[*command, str(p)] for command in NOT_UTF8_COMMANDS])


@pytest.mark.parametrize("i", range(len(NOT_UTF8_COMMANDS)), ids=[" ".join(c) for c in NOT_UTF8_COMMANDS])
def test_scenario_not_utf8(not_utf8_refusals, i):
    one_line_error(not_utf8_refusals[i], "SCENARIO", "UTF-8")


DAMAGED = [b"[1, 2", b"\xff\xfe", b"[1, 2]", b'{"runs": 3}', b'{"runs": [1]}', b'{"runs": [{"schedule": 5}]}']


@pytest.fixture(scope="module")
def damaged_campaigns(tmp_path_factory) -> list[tuple[Path, subprocess.CompletedProcess]]:
    """For each content of DAMAGED: a campaign folder whose campaign.json holds it, and
    ``campaign --runs 0:1`` into that folder, run once (all in one child process)."""
    outs = []
    for i, content in enumerate(DAMAGED):
        outs.append(tmp_path_factory.mktemp(f"camp{i}"))
        (outs[-1] / "campaign.json").write_bytes(content)
    return list(zip(outs, fl_many([["campaign", str(EXAMPLE_CAMPAIGN), "--runs", "0:1", "--out", str(out)] for out in outs])))


@pytest.mark.parametrize("i", range(len(DAMAGED)), ids=[repr(c)[2:-1] for c in DAMAGED])
def test_damaged_campaign_json_is_one_line_before_anything_runs(damaged_campaigns, i):
    """``campaign --runs A:B`` into a folder whose campaign.json is damaged: one line
    naming campaign.json, exit 2, before a run starts (no run folder made), never a
    JSONDecodeError / AttributeError."""
    out, cp = damaged_campaigns[i]
    one_line_error(cp, "campaign.json")
    assert sorted(p.name for p in out.iterdir()) == ["campaign.json"]


def test_bad_runs_range_makes_no_campaign_folder(tmp_path):
    """``--runs 1:0`` is refused before the --out folder is made."""
    one_line_error(fl("campaign", str(EXAMPLE_CAMPAIGN), "--runs", "1:0", "--out", str(tmp_path / "c")), "--runs")
    assert not (tmp_path / "c").exists()


def test_node_groups_make_rank_args_and_bad_ones_are_named(tmp_path):
    """A node group gives its ranks --compute-repeat and, with labels, their declared
    peer group; a node that does not exist, a node in two groups and a compute_repeat
    on a pipeline are named with the field."""
    tb = ("testbed:\n  backend: local\n  nodes: 4\n  node_groups:\n"
          "    - {nodes: [2, 3], compute_repeat: 2, labels: {gpu: v100, role: learner}}\n    - {nodes: [0], compute_repeat: 1}\n")
    sc = load(_write(tmp_path, "name: h\n" + tb + "workload: {kind: ddp, duration: 20s}\n"))
    assert sc.testbed.rank_args() == {r: ["--compute-repeat", "2", "--peer-group", "gpu=v100,role=learner"] for r in (2, 3)}
    for old, new, field in (("nodes: [2, 3]", "nodes: [2, 4]", "testbed.node_groups[0].nodes"),
                            ("nodes: [0]", "nodes: [3]", "testbed.node_groups[1].nodes"),
                            ("kind: ddp", "kind: pipeline, stages: 4", "testbed.node_groups[0].compute_repeat")):
        text = ("name: h\n" + tb + "workload: {kind: ddp, duration: 20s}\n").replace(old, new)
        with pytest.raises(BadInput, match=re.escape(field)):
            load(_write(tmp_path, text, "bad.yaml"))
