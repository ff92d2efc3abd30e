"""The CLI as a user drives it: bad input gets one line naming the field, exit 2, and
nothing applied; dry-run prints the exact commands; inject/status/revert round trip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlab.datasets.synthetic import make_run
from faultlab.nodes.testbed import NetnsTestbed
from tests.helpers import (
    EXAMPLE_CAMPAIGN,
    EXAMPLES,
    FAULT_QDISC,
    FL,
    ROOT,
    SW_DATASET,
    as_nobody,
    faultlab_procs,
    fl,
    fl_many,
    left_since,
    needs_root,
    nobody_env,
    one_line_error,
    residue,
    state,
)



BAD = [
    # (argv, field named in the error)
    (["inject", "--type", "nic-slo", "--rate", "50mbit"], "--type"),
    (["inject", "--type", "gpu-clock-cap"], "--clock-mhz"),
    (["inject", "--type", "gpu-cap"], "--type"),
    (["inject", "--type", "nic-slow", "--rate", "100 mbps", "--target", "lo"], "--rate"),
    (["inject", "--type", "nic-slow", "--rate", "100", "--target", "lo"], "--rate"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit/s", "--target", "lo"], "--rate"),
    (["inject", "--type", "nic-slow", "--rate", "-5mbit", "--target", "lo"], "--rate"),
    (["inject", "--type", "nic-slow", "--rate", "fast", "--target", "lo"], "--rate"),
    (["inject", "--type", "nic-slow", "--rate", "1bit", "--target", "lo"], "--rate"),
    (["inject", "--type", "nic-slow", "--target", "lo"], "--rate"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--target", "nosuchif0"], "--target"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--cpu-fraction", "0.3", "--target", "lo"], "--cpu-fraction"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--node", "netns:fl-no-such-ns"], "--node"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--node", "ssh:"], "--node"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--node", ""], "--node"),
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "1.5", "--target", "12345"], "--cpu-fraction"),
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "0", "--target", "12345"], "--cpu-fraction"),
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "-0.2", "--target", "12345"], "--cpu-fraction"),
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "30%", "--target", "12345"], "--cpu-fraction"),
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "0.3"], "--target"),
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "0.3", "--target", "abc"], "--target"),
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "0.3", "--target", "4194303"], "--target"),
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "0.3", "--target", "-5"], "--target"),
    (["inject", "--type", "cpu-contention", "--rate", "50mbit", "--cpu-fraction", "0.3", "--target", "12345"], "--rate"),
    (["inject", "--type", "process-pause", "--pause", "200ms", "--target", "12345"], "--period"),
    (["inject", "--type", "process-pause", "--pause", "2s", "--period", "1s", "--target", "12345"], "--pause"),
    (["inject", "--type", "process-pause", "--pause", "200", "--period", "1s", "--target", "12345"], "--pause"),
    (["inject", "--type", "process-pause", "--pause", "200ms", "--period", "1s", "--target", "1,2"], "--target"),
    (["inject", "--type", "process-pause", "--pause", "200ms", "--period", "1s", "--target", "4194303"], "--target"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--target", "lo", "--duration", "30"], "--duration"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--target", "lo", "--duration", "-30s"], "--duration"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--target", "lo", "--duration", "0s"], "--duration"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--target", "lo", "--duration", "30 parsecs"], "--duration"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--target", "lo", "--duration", "30x"], "--duration"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--target", "lo", "--grace", "soon"], "--grace"),
    (["revert"], "FAULT_ID"),
    (["demo", "--nodes", "0"], "--nodes"),  # exited 1 (a new user's run found it)
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "0.3", "--target", "1"], "--target"),
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "0.3", "--target", "١"], "--target"),
    (["inject", "--type", "cpu-contention", "--cpu-fraction", "5e-324", "--target", "12345"], "--cpu-fraction"),
    (["inject", "--type", "nic-slow", "--rate", "５０mbit", "--target", "lo"], "--rate"),
    (["inject", "--type", "nic-slow", "--rate", "5" + "0" * 400 + "mbit", "--target", "lo"], "--rate"),
    (["inject", "--type", "nic-slow", "--rate", "50mbit", "--target", "lo", "--duration", "99999999999999999999h"], "--duration"),
    # a fault id is TYPE-HEX: a path or a typo is refused, never looked up
    (["revert", "../../etc/x"], "FAULT_ID"),
    (["revert", "nic-3F9A1C"], "FAULT_ID"),
    (["revert", "nic-3f9a1c;true"], "FAULT_ID"),
    (["revert", "nic-"], "FAULT_ID"),
    # typer's own usage errors (ranges, types, unknown options): one line too
    (["run", "--repeat", "0", "examples/quickstart.yaml"], "--repeat"),
    (["run", "--repeat", "many", "examples/quickstart.yaml"], "--repeat"),
    (["inject", "--type", "nic-slow", "--no-such-flag"], "--no-such-flag"),
    (["run"], "SCENARIO"),
]


def _fault_ids() -> set[str]:
    """The fault ids ``faultlab status`` shows now: a test compares them with what it
    saw at its start, since status reports every fault on the machine (another
    session's, or an orphan a killed run left) and not only this test's."""
    return {r["fault_id"] for r in json.loads(fl("status", "--json").stdout)}


@pytest.fixture(scope="module")
def refusals() -> tuple[dict[tuple, subprocess.CompletedProcess], dict[str, set]]:
    """Every command line of BAD run once through faultlab's entry point (in one child
    process), and what faultlab objects the batch left behind (a ``left_since``)."""
    before = residue()
    done = fl_many([argv for argv, _ in BAD])
    return {tuple(cp.args[len(FL):]): cp for cp in done}, left_since(before)


@pytest.mark.parametrize("argv,field", BAD, ids=[" ".join(a[:1] + a[2:5]) + f" [{f}]" for a, f in BAD])
def test_bad_input_one_line_names_field_exit_2_nothing_applied(refusals, argv, field):
    done, left = refusals
    cp = done[tuple(argv)]
    assert cp.returncode == 2, (cp.returncode, cp.stdout, cp.stderr)
    lines = [l for l in cp.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, cp.stderr
    assert lines[0].startswith("faultlab: error: ") and field in lines[0], lines[0]
    assert not left, f"a refused command left faultlab state behind: {left}"


def test_dry_run_prints_exact_commands_and_applies_nothing():
    before = residue()
    cp = fl("inject", "--type", "nic-slow", "--node", "local", "--target", "lo", "--rate", "50mbit", "--dry-run", "--json")
    assert cp.returncode == 0, cp.stderr
    plan = json.loads(cp.stdout)
    h = "f" + plan["fault_id"].split("-")[-1][:3] + ":"
    assert plan["inject"][0] == f"tc qdisc add dev lo root handle {h} tbf rate 50000000bit burst 31250 latency 100ms"
    assert any("mirred egress redirect dev flifb" in c for c in plan["inject"])
    assert plan["revert"][-1] == f"tc qdisc del dev lo root handle {h}"
    assert residue() == before


@needs_root
def test_inject_status_revert_round_trip_on_netns(testbed2):
    ns = testbed2.nodes[0].netns
    before = _fault_ids()
    cp = fl("inject", "--type", "nic-slow", "--node", f"netns:{ns}", "--rate", "20mbit", "--duration", "60s", "--detach", "--json")
    assert cp.returncode == 0, cp.stderr
    info = json.loads(cp.stdout)
    fid = info["fault_id"]
    assert info["verify"]["ok"]
    st = [r for r in json.loads(fl("status", "--json").stdout) if r["fault_id"] not in before]
    assert [r["fault_id"] for r in st] == [fid] and st[0]["watchdog_alive"]
    # a second cap on the same interface is refused, exit 3, and the first stays
    cp2 = fl("inject", "--type", "nic-slow", "--node", f"netns:{ns}", "--rate", "10mbit", "--duration", "10s")
    assert cp2.returncode == 3 and "already has a faultlab nic-slow" in cp2.stderr
    rv = fl("revert", fid, "--json")
    assert rv.returncode == 0 and json.loads(rv.stdout)[0]["fault_id"] == fid
    q = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "fleth0"], capture_output=True, text=True).stdout
    assert not FAULT_QDISC.search(q) and "ingress" not in q
    # reverting again is a no-op success
    again = fl("revert", fid)
    assert again.returncode == 0 and "no fault" in again.stdout
    assert _fault_ids() == before


def test_foreground_inject_reverts_on_sigterm(busy_loop):
    before = _fault_ids()
    p = subprocess.Popen([*FL, "inject", "--type", "process-pause", "--target", str(busy_loop.pid), "--pause", "100ms", "--period", "300ms", "--duration", "60s", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while time.time() < deadline and _fault_ids() == before:
        time.sleep(0.2)
    assert _fault_ids() > before, "fault in force"
    p.terminate()
    out, err = p.communicate(timeout=20)
    assert json.loads(out)["status"] == "reverted", err
    assert _fault_ids() == before
    time.sleep(0.4)
    assert open(f"/proc/{busy_loop.pid}/stat").read().rpartition(")")[2].split()[0] != "T"


def test_doctor_reports_every_type_and_leaves_nothing():
    before = residue()
    cp = fl("doctor", "--json")
    assert cp.returncode == 0, cp.stderr
    rep = json.loads(cp.stdout)
    assert {"nic-slow", "cpu-contention", "process-pause", "gpu-clock-cap", "gpu-power-cap", "gc-storm", "io-slow", "mem-bw"} <= set(rep["types"])
    assert all(r["why"] for r in rep["types"].values())
    if os.geteuid() == 0:
        assert rep["types"]["nic-slow"]["ok"]
        netem = rep["types"]["nic-slow --delay/--loss"]
        assert netem["ok"] or "netem" in netem["why"]
    assert residue() == before
    assert "flprb" not in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout


@needs_root
def test_without_net_admin_a_clear_eperm_error_never_false_success(testbed2):
    ns = testbed2.nodes[0].netns
    before = _fault_ids()
    cp = subprocess.run(["setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin", *FL, "inject", "--type", "nic-slow",
                         "--node", f"netns:{ns}", "--rate", "10mbit", "--duration", "5s"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 3, (cp.stdout, cp.stderr)
    assert "CAP_NET_ADMIN" in cp.stderr and "EPERM" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1
    q = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "fleth0"], capture_output=True, text=True).stdout
    assert not FAULT_QDISC.search(q)
    assert _fault_ids() == before


TYPO_NODES = ["netns:fl-no-such-ns", "fl-bare", "ssh:gpu-07", "a,b"]


@pytest.fixture(scope="module")
def typo_refusals() -> dict[str, subprocess.CompletedProcess]:
    """``inject --type nic-slowww --node NODE`` for each NODE of TYPO_NODES (all in one
    child process)."""
    done = fl_many([["inject", "--type", "nic-slowww", "--node", n, "--rate", "5mbit", "--dry-run"] for n in TYPO_NODES])
    return dict(zip(TYPO_NODES, done))


@pytest.mark.parametrize("node", TYPO_NODES)
def test_unknown_type_is_named_before_the_node(typo_refusals, node):
    """A typo in --type is the error named whatever --node says (`--type bogus --node
    netns:x` names the type, not only the missing namespace)."""
    cp = typo_refusals[node]
    lines = [l for l in cp.stderr.splitlines() if l.strip()]
    assert cp.returncode == 2 and len(lines) == 1, cp.stderr
    assert lines[0].startswith("faultlab: error: --type: unknown fault type 'nic-slowww'"), lines[0]
    assert "nic-slow," in lines[0]


def test_ssh_node_on_the_command_line_points_at_the_inventory():
    cp = fl("inject", "--type", "nic-slow", "--node", "ssh:gpu-07", "--rate", "5mbit", "--dry-run")
    lines = [l for l in cp.stderr.splitlines() if l.strip()]
    assert cp.returncode == 2 and len(lines) == 1, cp.stderr
    assert lines[0].startswith("faultlab: error: --node: ") and "--inventory" in lines[0], lines[0]


def test_usage_error_names_the_option_and_its_range_in_one_line():
    cp = fl("run", "--repeat", "0", "examples/quickstart.yaml")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1, cp.stderr
    assert cp.stderr.startswith("faultlab: error: --repeat: ") and "greater than or equal to 1" in cp.stderr, cp.stderr
    assert "\u256d" not in cp.stderr and "Usage:" not in cp.stderr  # no box, no usage block


@pytest.mark.parametrize("params,field,words", [
    ("{}", "params.rate", ["params.rate", "params.delay", "params.loss"]),
    ("{cpu_fraction: 0.3}", "params.cpu_fraction", ["params.rate"]),
])
def test_scenario_validate_hints_in_the_files_own_words(tmp_path, params, field, words):
    """Hints name the scenario's fields (params.rate), never the CLI flags (--rate)."""
    p = tmp_path / "s.yaml"
    p.write_text("name: t\ntestbed: {nodes: 2}\nworkload: {duration: 30s}\nfaults:\n"
                 f"  - {{type: nic-slow, node: n1, at: 5s, duration: 5s, params: {params}}}\n")
    cp = fl("scenario", "validate", str(p))
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1, cp.stderr
    assert f"faults[0].{field}:" in cp.stderr and all(w in cp.stderr for w in words) and "--" not in cp.stderr.split(":", 3)[-1], cp.stderr


def test_scenario_validate_pause_hint_gives_field_values(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: t\ntestbed: {nodes: 2}\nworkload: {duration: 30s}\nfaults:\n"
                 "  - {type: process-pause, rank: 1, at: 5s, duration: 5s, params: {pause: 2s, period: 1s}}\n")
    cp = fl("scenario", "validate", str(p))
    assert cp.returncode == 2 and "pause: 200ms" in cp.stderr and "period: 1s" in cp.stderr and "--period" not in cp.stderr, cp.stderr


# -- the bad-input corpus, privileges: another user against root's faults ------------------
# (lease-folder faults: read-only, full tmpfs, another user's, symlink, writable by others,
# root's folder as nobody: tests/lifecycle/test_fault_always_ends.py, test_unusable_lease_folder_* and
# test_as_nobody_*; a deleted or truncated record: test_lost_or_corrupt_record_*)

PRIV_BAD = [
    # (argv as nobody, with {fid} root's fault, {pid} root's busy process, {ns} a netns; words in the one line)
    (["revert", "{fid}"], ["{fid}", "another user"]),
    (["revert", "--all"], ["{fid}", "another user"]),
    (["recover"], ["{fid}", "another user"]),
    (["inject", "--type", "cpu-contention", "--target", "{pid}", "--cpu-fraction", "0.3", "--duration", "30s"], ["EPERM", "as root"]),
    (["inject", "--type", "process-pause", "--target", "{pid}", "--pause", "100ms", "--period", "300ms", "--duration", "30s"], ["{pid}"]),
    (["inject", "--type", "nic-slow", "--node", "netns:{ns}", "--rate", "10mbit", "--duration", "30s"], ["CAP_NET_ADMIN"]),
]


@pytest.fixture(scope="module")
def roots_fault():
    """One of root's faults in force for every command line of PRIV_BAD: a detached
    cpu-contention on a busy process of root's, beside a two-node netns testbed; yields
    (fault id, that process's PID, a namespace of the testbed). Reverted after (it must
    still be in force then), the process ended and the testbed taken down."""
    if not ROOT:
        pytest.skip("needs root (namespaces, qdiscs, cgroups)")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    tb, fid = None, None
    try:
        tb = NetnsTestbed(2).up()
        cp = fl("inject", "--type", "cpu-contention", "--target", str(busy.pid), "--cpu-fraction", "0.5", "--duration", "300s",
                "--detach", "--json")
        assert cp.returncode == 0, cp.stderr
        fid = json.loads(cp.stdout)["fault_id"]
        yield fid, busy.pid, tb.nodes[0].netns
        rv = fl("revert", fid)
        fid = None
        assert rv.returncode == 0 and "reverted" in rv.stdout, rv.stdout + rv.stderr
    finally:
        if fid is not None:
            fl("revert", fid)
        busy.kill()
        busy.wait()
        if tb is not None:
            assert tb.down() == []


@needs_root
@pytest.mark.parametrize("argv,words", PRIV_BAD, ids=[" ".join(a[:3]) for a, _ in PRIV_BAD])
def test_another_user_against_roots_faults_one_line_nothing_applied(argv, words, roots_fault, nobody_dir):
    """As nobody, with one of root's faults in force: a one-line error naming what is
    wrong, non-zero exit, no traceback; the host's faultlab state is exactly as before
    (root's fault still in force, nothing of nobody's applied) and no process is left."""
    fid, pid, ns = roots_fault
    env = nobody_env(nobody_dir)
    fill = {"{fid}": fid, "{pid}": str(pid), "{ns}": ns}

    def sub(x: str) -> str:
        for k, v in fill.items():
            x = x.replace(k, v)
        return x

    before = state(env["FAULTLAB_LEASE_DIR"])
    assert f"lease file {fid}.json" in before, before  # root's fault is in force
    r = as_nobody([*FL, *map(sub, argv)], env)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert len(lines) == 1 and lines[0].startswith("faultlab: error: "), r.stderr
    assert all(sub(w) in lines[0] for w in words), lines[0]
    assert state(env["FAULTLAB_LEASE_DIR"]) == before
    assert not faultlab_procs(env["FAULTLAB_LEASE_DIR"]) and not list((nobody_dir / "leases").glob("*"))
    assert open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[0] != "T"


def _unwritable(tmp_path, kind: str) -> Path:
    if kind == "proc":
        return Path("/proc/faultlab-nope/x")
    (tmp_path / "afile").write_text("x")
    return tmp_path / "afile" / "x"


QUICK = EXAMPLES / "quickstart.yaml"
UNWRITABLE = [(command, kind) for command in ("export", "build", "run", "campaign") for kind in ("proc", "under-a-file")]


@pytest.fixture(scope="module")
def unwritable_refusals(tmp_path_factory) -> list[tuple[Path, subprocess.CompletedProcess]]:
    """For each (command, kind) of UNWRITABLE: the output folder that cannot be made,
    and the command writing there, run once (all in one child process, from two
    synthetic runs made once)."""
    runs = [str(make_run(tmp_path_factory.mktemp("runs") / f"r{i}", f"r{i}", seed=i)) for i in range(2)]
    bads, argvs = [], []
    for command, kind in UNWRITABLE:
        bads.append(_unwritable(tmp_path_factory.mktemp(f"{command}-{kind}"), kind))
        argvs.append({"export": ["dataset", "export", str(SW_DATASET), "--out", str(bads[-1])],
                      "build": ["dataset", "build", *runs, "--name", "ds", "--out", str(bads[-1])],
                      "run": ["run", str(QUICK), "--backend", "local", "--out", str(bads[-1])],
                      "campaign": ["campaign", str(EXAMPLE_CAMPAIGN), "--runs", "0:1", "--out", str(bads[-1])]}[command])
    return list(zip(bads, fl_many(argvs)))


@pytest.mark.parametrize("i", range(len(UNWRITABLE)), ids=[f"{c}-{k}" for c, k in UNWRITABLE])
def test_unwritable_output_folder_is_one_line(unwritable_refusals, i):
    """An output folder that cannot be made (dataset export --out, dataset build
    --out, run --out, campaign --out): one line naming the option, exit 2,
    nothing made (no FileNotFoundError / NotADirectoryError traceback)."""
    bad, cp = unwritable_refusals[i]
    one_line_error(cp, "--out", "cannot make")
    assert not bad.exists()


def test_doctor_never_calls_sys_remote_exec_available(monkeypatch):
    """doctor never calls sys.remote_exec "available" for gc-storm, even on a node whose
    Python has it: starting the agent that way is not built (injectors/gc.py refuses
    it). The node's Python facts are set to a Python 3.14 with sys.remote_exec (no such
    interpreter on this machine: this stands in for one); the rest of diagnose runs
    for real on this host."""
    from faultlab import doctor
    from faultlab.nodes import LocalNode

    monkeypatch.setattr(doctor, "_python_facts", lambda node: {"python": "3.14.0", "nvml": False, "sys_remote_exec": True})
    why = doctor.diagnose(LocalNode("local"))["types"]["gc-storm"]["why"]
    assert "available" not in why, why
    assert "in-workload agent" in why and "only" in why and "sys.remote_exec" in why, why
