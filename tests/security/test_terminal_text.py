"""Text another user wrote never reaches root's terminal as it is: no escape sequence,
no line of theirs.

Every string faultlab prints that someone else chose (a file or folder name in their
lease folder, a record's ``node``/``target``/``fault_type``, the gc agent's ``error``)
goes through ``faultlab.errors.printable``: a newline, ESC and the other unprintable
characters become ``?``. The other user is ``nobody`` (uid 65534, ``setpriv``); root
runs the real CLI.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from faultlab.report.synthetic import make_run
from tests.helpers import NOBODY_LEASES, SW_DATASET, fl, give_to_nobody, needs_root, sandboxed_root_beside_records
from faultlab import procid
from faultlab.errors import FaultlabError, printable
from tests.security.test_agent_files import GOOD_HEARTBEAT, _inject, fake_agent, nobody_folder  # noqa: F401 (fixtures)
from tests.security.test_link_writes import NOBODY, as_nobody

#: what another user writes: erase the line, go up one, return, then lines of theirs
EVIL = "\x1b[2K\x1b[1A\rforged: all clear\nfaultlab: note: nothing is in force\x1b]0;title\x07"


def _assert_clean(text: str) -> None:
    """No escape sequence, no carriage return, and no line that another user began."""
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text, repr(text)
    for line in text.splitlines():
        assert not line.startswith(("forged:", "faultlab: note: nothing is in force")), repr(text)


def test_printable_makes_any_text_one_plain_line():
    assert printable("eth0" + EVIL) == "eth0?[2K?[1A?forged: all clear?faultlab: note: nothing is in force?]0;title?"
    assert printable("a\u202eb\tc") == "a?b?c"  # a bidirectional override, a tab
    assert printable("x" * 10, 4) == "xxxx..." and printable("xxxx", 4) == "xxxx"
    assert printable(ValueError("bad\nvalue")) == "bad?value"
    err = FaultlabError("file x" + EVIL, field="f", fix="fix\x1b[0m it")
    assert "\x1b" not in str(err) and "\r" not in str(err) and "\n" not in str(err), repr(str(err))


@pytest.fixture
def users_fault(nobody_dir):
    """A fault of nobody's that names another user's text everywhere: its lease folder
    (named with a newline and ESC) holds a file whose name forges a line and the
    fault's record, whose ``node``, ``target`` and ``fault_type`` hold ``EVIL``; its
    watchdog (nobody's, holding the folder) sleeps. Yields the fault id."""
    fid = f"nic-{secrets.token_hex(3)}"
    folder = nobody_dir / f"leases{EVIL}"
    as_nobody("mkdir", "-m", "0755", str(folder))
    as_nobody("touch", str(folder / f"x{EVIL}.json"))
    deadline = int(time.time()) + 300
    wd = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sh", "-c",
                           'exec 3<"$1"; exec sh -c "sleep 300; :" faultlab-watchdog "$2" "$3" 3', "sh", str(folder), fid, str(deadline)],
                          start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.time() + 10
        while b"faultlab-watchdog" not in open(f"/proc/{wd.pid}/cmdline", "rb").read():
            assert time.time() < end, "the watchdog stand-in did not start"
            time.sleep(0.05)
        rec = folder / f"{fid}.json"
        rec.write_text(json.dumps({"fault_id": fid, "fault_type": f"nic-slow{EVIL}", "deadline_ts": deadline, "revert": [],
                                   "node": f"n1{EVIL}", "target": f"eth0{EVIL}", "uid": NOBODY, "created_ts": time.time(),
                                   "watchdog_pid": wd.pid, "watchdog_starttime": procid.starttime(wd.pid)}))
        os.chmod(rec, 0o644)
        os.chown(rec, NOBODY, NOBODY)
        yield fid
    finally:
        os.killpg(wd.pid, signal.SIGKILL)
        wd.wait()


@needs_root
@pytest.mark.parametrize("command", ["status", "status --json", "revert"])
def test_status_and_revert_print_other_users_text_as_plain_lines(users_fault, command):
    """Root's ``status`` (and its ``--json`` warnings) and ``revert ID`` of nobody's
    fault name nobody's fault, file and folder, each on one line of faultlab's with
    no escape sequence and no line of nobody's."""
    args = {"status": ["status"], "status --json": ["status", "--json"], "revert": ["revert", users_fault]}[command]
    cp = fl(*args)
    assert "Traceback" not in cp.stderr, cp.stderr
    _assert_clean(cp.stdout)
    _assert_clean(cp.stderr)
    text = cp.stdout + cp.stderr
    assert users_fault in text and "forged: all clear" in text, text  # named, but inside faultlab's lines
    if command == "status":
        line = next(ln for ln in cp.stdout.splitlines() if ln.startswith(users_fault))
        assert "eth0?[2K?[1A?forged" in line and "n1?[2K" in line, line
    if command == "revert":
        # a fault named by its id and not ended is an error saying who can end it
        assert cp.returncode == 1 and f"{users_fault}: NOT reverted" in cp.stdout, text


@needs_root
def test_the_gc_agents_error_is_one_plain_line_in_roots_verify_error(fake_agent, nobody_folder, no_residue):
    """The agent (as nobody) answers root's gc-storm with an error status whose
    ``error`` holds escape sequences and lines: root's one-line verify error quotes it
    with neither; the storm is reverted (exit 3)."""
    agent = fake_agent(GOOD_HEARTBEAT, json.dumps({"state": "error", "fault_id": "@FID@", "error": EVIL}))
    cp = _inject(agent.pid, nobody_folder)
    assert cp.returncode == 3, (cp.returncode, cp.stdout, cp.stderr[-2000:])
    _assert_clean(cp.stderr)
    errors = [ln for ln in cp.stderr.splitlines() if ln.startswith("faultlab: error:")]
    assert len(errors) == 1 and "agent: ?[2K?[1A?forged: all clear" in errors[0], cp.stderr


@pytest.fixture
def users_dataset(nobody_dir):
    """nobody's copy of faultlab-sw-v1 named with ``EVIL`` (as ``dataset list`` finds
    it), holding a file named with ``EVIL`` that its manifest does not list."""
    ds = nobody_dir / f"team{EVIL}"
    shutil.copytree(SW_DATASET, ds)
    give_to_nobody(ds)
    as_nobody("touch", str(ds / f"x{EVIL}"))
    return ds


@needs_root
def test_dataset_verify_and_list_print_names_as_plain_lines(users_dataset, nobody_dir):
    cp = fl("dataset", "verify", users_dataset)
    assert cp.returncode == 1 and "extra: x?[2K" in cp.stderr, cp.stderr[-800:]
    _assert_clean(cp.stdout + cp.stderr)
    cp = fl("dataset", "list", env={"FAULTLAB_DATASETS": str(nobody_dir)})
    assert cp.returncode == 0 and "team?[2K" in cp.stdout, cp.stdout + cp.stderr[-800:]
    _assert_clean(cp.stdout + cp.stderr)


def test_label_prints_peer_groups_and_components_as_plain_lines(tmp_path):
    """A run whose steps table names its peer group with ``EVIL``, and a long table
    whose components and peer group hold escapes (an OSC 52 clipboard write too)."""
    run = make_run(tmp_path / "run", ranks=4, duration_s=30, label=False)
    steps = pd.read_parquet(run / "steps.parquet")
    steps["peer_group"] = f"dp{EVIL}"
    steps.to_parquet(run / "steps.parquet")
    cp = fl("label", run, timeout=300)
    assert cp.returncode == 0 and "peer group dp?[2K" in cp.stdout, cp.stdout + cp.stderr[-800:]
    _assert_clean(cp.stdout + cp.stderr)
    rows = []
    for c in range(4):
        comp = f"node{c}{EVIL}" if c else "\x1b]52;c;ZWNobyBwd25lZAo=\x07node0"
        rows += [[comp, f"grp{EVIL}", t, "step_s", 1.0 + (2.0 if c == 0 and 40 <= t < 90 else 0.0) + 0.01 * ((t * 7 + c) % 5)]
                 for t in range(120)]
    pd.DataFrame(rows, columns=["component", "peer_group", "timestamp", "metric", "value"]).to_csv(tmp_path / "long.csv", index=False)
    cp = fl("label", "--import", "long", tmp_path / "long.csv", "--out", tmp_path / "imp", timeout=300)
    assert cp.returncode == 0 and "labeled:" in cp.stdout and "?]52;c;" in cp.stdout, cp.stdout + cp.stderr[-800:]
    _assert_clean(cp.stdout + cp.stderr)


@needs_root
def test_leaderboard_prints_dataset_names_of_a_submitted_file_as_plain_lines(users_dataset, tmp_path):
    """A leaderboard scored on nobody's dataset named with ``EVIL``: its table on stdout,
    and root's ``--verify`` of that file, whose dataset path the submitter chose, print
    the name with no escape."""
    cp = fl("leaderboard", "--dataset", users_dataset, "--detector", "constant", "--boot", "20", "--out", tmp_path / "out", timeout=300)
    assert cp.returncode == 0 and "team?[2K" in cp.stdout, cp.stdout + cp.stderr[-800:]
    _assert_clean(cp.stdout + cp.stderr)
    cp = fl("leaderboard", "--verify", tmp_path / "out" / "leaderboard.json", timeout=300)
    assert cp.returncode == 0 and "reproduced" in cp.stdout and "team?[2K" in cp.stdout, cp.stdout + cp.stderr[-800:]
    _assert_clean(cp.stdout + cp.stderr)


def test_score_and_dataset_info_print_a_datasets_fault_types_as_plain_text(tmp_path):
    """A dataset whose runs' fault type holds ``EVIL`` and rich markup (a hyperlink in
    root's terminal): ``score``'s breakdown by fault type and ``dataset info`` show it
    as plain text, the markup as it is."""
    from faultlab.datasets.build import build
    from faultlab.datasets.synthetic import make_run as make_labeled_run

    kind = f"[link=https://evil.example]cpu[/link]{EVIL}"
    for i in range(4):
        make_labeled_run(tmp_path / f"r{i}", f"r{i}", seed=i, fault_type=kind)
    ds = build([tmp_path / f"r{i}" for i in range(4)], "evil-kinds", tmp_path, test_fraction=0.5, seed=1)
    wide = {"COLUMNS": "400"}  # one table row a line
    cp = fl("score", "--dataset", ds, "--detector", "constant", "--boot", "20", env=wide, timeout=300)
    assert cp.returncode == 0 and "[link=https://evil.example]cpu[/link]?[2K" in cp.stdout, cp.stdout + cp.stderr[-800:]
    _assert_clean(cp.stdout + cp.stderr)
    cp = fl("dataset", "info", ds, env=wide)
    assert cp.returncode == 0 and "[link=https://evil.example]cpu[/link]?[2K" in cp.stdout, cp.stdout + cp.stderr[-800:]
    _assert_clean(cp.stdout + cp.stderr)


def test_a_runs_line_for_a_fault_not_injected_shows_the_errors_markup_as_it_is(monkeypatch):
    """A fault that fails to inject in ``faultlab run`` is one line quoting the error,
    which quotes what a node or the workload's agent wrote: rich markup there (a
    hyperlink) is shown as text, not made an escape sequence on root's terminal."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from faultlab import runner

    def refuse(*_a, **_k):
        raise FaultlabError("agent: [link=https://evil.example]click[/link] [reverse]x")

    monkeypatch.setattr(runner, "build_injector", lambda *a: None)
    buf = io.StringIO()
    d = runner._Due(SimpleNamespace(type="gc-storm", duration=5.0), 0, 1.0, None)
    res = SimpleNamespace(failed_faults=[])
    runner._start(d, [], [], None, SimpleNamespace(event=lambda *a, **k: None), res,
                  Console(file=buf, force_terminal=True, width=400), 0.0, SimpleNamespace(apply=refuse))
    out = buf.getvalue()
    assert "\x1b]8;" not in out and "\x1b[7m" not in out, repr(out)  # no hyperlink, no reverse video
    assert "[link=https://evil.example]click[/link] [reverse]x" in re.sub(r"\x1b\[[0-9;]*m", "", out), repr(out)  # colours aside


def test_label_prints_a_runs_long_peer_group_name_cut_and_in_time(tmp_path):
    """A run handed to root names its peer group with 200,000 characters: ``label``
    shows the name cut at ``errors.FIELD_CHARS`` and takes no longer for it (rich's
    highlighter, quadratic in a line's length, took minutes over such a line)."""
    from faultlab.errors import FIELD_CHARS

    run = make_run(tmp_path / "run", ranks=4, duration_s=30, label=False)
    steps = pd.read_parquet(run / "steps.parquet")
    steps["peer_group"] = "G" * 200_000
    steps.to_parquet(run / "steps.parquet")
    t = time.monotonic()
    cp = fl("label", run, timeout=600)
    took = time.monotonic() - t
    assert cp.returncode == 0, cp.stdout[-800:] + cp.stderr[-800:]
    line = next(ln for ln in cp.stdout.splitlines() if "peer group G" in ln)
    assert "G" * FIELD_CHARS + "..." in line and len(line) < 2 * FIELD_CHARS + 200, line[:300]
    assert took < 120, f"label took {took:.0f} s"


#: what JSON leaves as it is: a C1 control sequence introducer (U+009B, CSI in one
#: character, which xterm-like terminals act on) and a bidirectional override
C1_AND_BIDI = "\u009b2J\u009b31m\u202eforged"

# as nobody: a record whose text fields hold C1_AND_BIDI ($2); then root's status --json
_C1_THEN_STATUS_JSON = r"""
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import json, os, sys
fid = "cpu-00c1c1"
with open(os.path.join(sys.argv[1], fid + ".json"), "w") as f:
    json.dump({"fault_id": fid, "deadline_ts": 4102444800, "created_ts": 1, "fault_type": "cpu" + sys.argv[2],
               "node": "local" + sys.argv[2], "target": "pid:1" + sys.argv[2], "revert": ["true"]}, f)
' "$1" "$2"
shift 2
exec "$@" status --json
"""


def test_roots_status_json_prints_another_users_record_fields_in_ascii():
    """Root's ``status --json`` shows nobody's record fields JSON-escaped, all ASCII:
    rich's ``print_json`` wrote non-ASCII as it is, so a C1 control or a bidirectional
    override of nobody's reached root's terminal raw (``printable`` makes them ``?``
    in every plain line)."""
    cp = sandboxed_root_beside_records(0, ["sh", "-c", _C1_THEN_STATUS_JSON, "sh", NOBODY_LEASES, C1_AND_BIDI,
                                           sys.executable, "-P", "-m", "faultlab.cli"], timeout=300)
    assert cp.returncode == 0, (cp.returncode, cp.stdout[-1000:], cp.stderr[-1000:])
    assert cp.stdout.isascii(), [c for c in cp.stdout if not c.isascii()]
    row = next(r for r in json.loads(cp.stdout) if r["fault_id"] == "cpu-00c1c1")
    assert row["target"] == "pid:1" + C1_AND_BIDI, row  # the same text, escaped
