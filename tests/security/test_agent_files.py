"""What the workload's user writes into the gc-storm control folder never steers root.

The agent's heartbeat and status files are written by the workload's user, who may
put anything in them. Here that user is nobody (``setpriv``) and owns the control
folder; a stand-in agent (``sh`` and coreutils, as nobody) writes garbage where the
real agent writes its files: not JSON, wrong types, NaN and infinity, integers too
large for a float, huge strings, a list instead of an object. Root's ``faultlab
inject --type gc-storm`` (probe, verify, revert) must then say one line naming the
file and the field (never a traceback), exit with its documented code and say what
is left. On the agent's side, a garbage command file written by its own user gets
an error status that root's schema accepts, and the agent keeps running.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from faultlab import procid
from faultlab.benchmarks import agent as agent_mod
from faultlab.injectors import gc as gc_mod
from faultlab.lifecycle.lease import load_leases
from faultlab.nodes import LocalNode
from tests.helpers import FL, as_nobody, needs_root

pytestmark = needs_root

NOBODY = 65534
HUGE_INT = "1" + "0" * 400
HUGE_STR = "x" * 100_000

# The stand-in agent, run as nobody: $1 the control folder, $2 its heartbeat, $3 the
# status it writes once a command is there, $4 the heartbeat it writes once the
# command is withdrawn (before it removes the status, as the agent does). In each,
# @PID@, @START@, @NOW@ and @FID@ (the command's fault id) are filled in.
FAKE_AGENT = procid.STAT_SH + r"""
d=$1; me=$$; fid=
proc_stat "$me"
put() { t=$(mktemp "$d/.fake.XXXXXX") && printf '%s\n' "$2" > "$t" && chmod 644 "$t" && mv -f "$t" "$d/$1"; }
fill() { printf '%s' "$1" | sed "s/@FID@/$fid/g; s/@PID@/$me/g; s/@START@/$ps_start/g; s/@NOW@/$(date +%s)/g"; }
put "$me.agent" "$(fill "$2")"
echo ready
while [ ! -e "$d/$me.gc-storm.json" ]; do sleep 0.05; done
fid=$(sed -n 's/.*"fault_id": "\([a-z]*-[0-9a-f]*\)".*/\1/p' "$d/$me.gc-storm.json")
put "$me.gc-storm.status.json" "$(fill "$3")"
while [ -e "$d/$me.gc-storm.json" ]; do sleep 0.05; done
put "$me.agent" "$(fill "$4")"
rm -f "$d/$me.gc-storm.status.json"
echo done
exec sleep 600
"""

HEARTBEAT = {"pid": "@PID@", "starttime": "@START@", "python": "3.11.7", "agent_version": 1, "started_ts": "@NOW@",
             "heartbeat_ts": "@NOW@", "storms_done": 0, "last_storm": None}
STATUS = {"state": "running", "fault_id": "@FID@", "rate_per_s": 50.0, "garbage_mb": 1.0, "deadline_ts": "@NOW@",
          "objects_per_burst": 16384, "started_ts": "@NOW@", "bursts": 1, "burst_s_total": 0.01, "burst_s_max": 0.01,
          "collect_s_total": 0.01, "collect_s_max": 0.01, "gc_s_total": 0.01, "elapsed_s": 0.05, "stalled_fraction": 0.2,
          "achieved_rate_per_s": 50.0, "pid": "@PID@", "updated_ts": "@NOW@"}
LAST_STORM = dict(STATUS, state="ended", end="revoked", ended_ts="@NOW@")


def _json(obj, **raw: str) -> str:
    """``obj`` as JSON with the @...@ placeholders unquoted (numbers) and the ``raw``
    keys set to raw JSON text (``NaN``, a 400-digit integer...)."""
    text = json.dumps({k: v for k, v in obj.items() if k not in raw})
    for k in ("@PID@", "@START@", "@NOW@"):
        text = text.replace(f'"{k}"', k)
    return text[:-1] + "".join(f', "{k}": {v}' for k, v in raw.items()) + "}"


GOOD_HEARTBEAT = _json(HEARTBEAT)
GOOD_STATUS = _json(STATUS)
GOOD_FINAL = _json(HEARTBEAT, last_storm=_json(LAST_STORM))

#: (heartbeat text, the field the warning names; None: the file as a whole)
BAD_HEARTBEATS = {
    "not-json": ('{"pid": @PID@, "heartbeat_ts": ', None),
    "wrong-type": (_json(HEARTBEAT, heartbeat_ts='"now"'), "heartbeat_ts"),
    "nan": (_json(HEARTBEAT, heartbeat_ts="NaN"), "heartbeat_ts"),
    "infinity": (_json(HEARTBEAT, heartbeat_ts="-Infinity"), "heartbeat_ts"),
    "huge-int": (_json(HEARTBEAT, heartbeat_ts=HUGE_INT), "heartbeat_ts"),
    "huge-string": (_json(HEARTBEAT, python=json.dumps(HUGE_STR)), "python"),
    "list": ("[@PID@, @NOW@]", None),
    "unknown-key": (_json(HEARTBEAT, run_as='"root"'), "run_as"),
}
BAD_STATUSES = {
    "not-json": ('{"fault_id": "@FID@", "bursts": ', None),
    "wrong-type": (_json(STATUS, bursts='"many"'), "bursts"),
    "nan": (_json(STATUS, stalled_fraction="NaN"), "stalled_fraction"),
    "infinity": (_json(STATUS, elapsed_s="Infinity"), "elapsed_s"),
    "huge-int": (_json(STATUS, bursts=HUGE_INT), "bursts"),
    "huge-string": (_json(STATUS, state='"error"', error=json.dumps(HUGE_STR)), "error"),
    "list": ('[{"fault_id": "@FID@", "bursts": 1}]', None),
}
BAD_LAST_STORMS = {
    "huge-int": (_json(HEARTBEAT, last_storm=_json(LAST_STORM, stalled_fraction=HUGE_INT)), "last_storm.stalled_fraction"),
    "nan": (_json(HEARTBEAT, last_storm=_json(LAST_STORM, stalled_fraction="NaN")), "last_storm.stalled_fraction"),
    "list": (_json(HEARTBEAT, last_storm="[1, 2]"), "last_storm"),
}


@pytest.fixture
def nobody_folder():
    """A control folder owned by nobody (0700) under a root folder nobody may enter."""
    base = Path(tempfile.mkdtemp(prefix="fl-agentfiles-"))
    os.chmod(base, 0o755)
    d = base / "agents"
    d.mkdir(mode=0o700)
    os.chown(d, NOBODY, NOBODY)
    try:
        yield d
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def fake_agent(nobody_folder):
    """Start the stand-in agent as nobody with (heartbeat, status, final heartbeat);
    it is killed by its PID afterwards."""
    started = []

    def start(heartbeat: str, status: str = GOOD_STATUS, final: str = GOOD_HEARTBEAT) -> subprocess.Popen:
        p = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sh", "-c", FAKE_AGENT, "sh",
                              str(nobody_folder), heartbeat, status, final], stdout=subprocess.PIPE, text=True)
        started.append(p)
        assert p.stdout.readline().strip() == "ready"
        return p

    yield start
    for p in started:
        p.kill()
        p.wait()


def _inject(pid: int, folder: Path, duration: str = "3s") -> subprocess.CompletedProcess:
    """Root's ``faultlab inject --json`` of a gc-storm on ``pid`` (stdout: the JSON
    record; stderr: only warnings and errors)."""
    env = dict(os.environ, FAULTLAB_AGENT_DIR=str(folder))
    return subprocess.run([*FL, "inject", "--type", "gc-storm", "--target", str(pid), "--gc-rate", "50", "--garbage-mb", "1",
                           "--duration", duration, "--json"], capture_output=True, text=True, timeout=120, env=env)


def _assert_names(line: str, path: Path, field: str | None) -> None:
    assert str(path) in line, line
    if field is not None:
        assert field in line, line
    assert len(line) < 600, f"a line of {len(line)} characters"


def _no_fault_left(folder: Path, pid: int) -> None:
    assert not load_leases(LocalNode("local")), "a lease is left"
    assert not agent_mod.command_path(folder, pid).exists(), "the command file is left"


@pytest.mark.parametrize("kind", sorted(BAD_HEARTBEATS))
def test_a_bad_heartbeat_is_refused_in_one_line(kind, fake_agent, nobody_folder, no_residue):
    """Exit 3 (refused), one line naming the heartbeat and its field; nothing applied."""
    text, field = BAD_HEARTBEATS[kind]
    agent = fake_agent(text)
    cp = _inject(agent.pid, nobody_folder)
    assert "Traceback" not in cp.stderr, cp.stderr
    assert cp.returncode == 3, (cp.returncode, cp.stdout, cp.stderr[-2000:])
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    _assert_names(lines[0], agent_mod.heartbeat_path(nobody_folder, agent.pid), field)
    _no_fault_left(nobody_folder, agent.pid)


@pytest.mark.parametrize("kind", sorted(BAD_STATUSES))
def test_a_bad_status_is_one_warning_and_never_confirms_the_storm(kind, fake_agent, nobody_folder, no_residue):
    """The status fails the schema: one warning line naming it and its field, verify
    does not confirm the storm, the revert runs, exit 3 with the line saying it was
    reverted (nothing is left)."""
    text, field = BAD_STATUSES[kind]
    agent = fake_agent(GOOD_HEARTBEAT, text)
    cp = _inject(agent.pid, nobody_folder)
    assert "Traceback" not in cp.stderr, cp.stderr[-3000:]
    assert cp.returncode == 3, (cp.returncode, cp.stdout, cp.stderr[-2000:])
    lines = cp.stderr.strip().splitlines()
    warnings = [ln for ln in lines if "warning" in ln]
    assert len(warnings) == 1, lines
    _assert_names(warnings[0], agent_mod.status_path(nobody_folder, agent.pid), field)
    assert len(lines) == 2 and "was reverted" in lines[-1], lines
    assert agent.stdout.readline().strip() == "done", "the revert never withdrew the command"
    _no_fault_left(nobody_folder, agent.pid)


@pytest.mark.parametrize("kind", sorted(BAD_LAST_STORMS))
def test_a_bad_final_summary_is_one_warning_and_the_revert_still_ends_clean(kind, fake_agent, nobody_folder, no_residue):
    """A storm confirmed by a good status, then a heartbeat whose ``last_storm`` fails
    the schema: the fault is reverted (exit 0, ``reverted``), with one warning line
    naming the heartbeat and the field; the summary is not taken as a measurement."""
    text, field = BAD_LAST_STORMS[kind]
    agent = fake_agent(GOOD_HEARTBEAT, GOOD_STATUS, text)
    cp = _inject(agent.pid, nobody_folder, "1s")
    assert "Traceback" not in cp.stderr, cp.stderr[-3000:]
    assert cp.returncode == 0, (cp.returncode, cp.stdout, cp.stderr[-2000:])
    assert json.loads(cp.stdout)["status"] == "reverted", cp.stdout[-2000:]
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and "warning" in lines[0], lines
    _assert_names(lines[0], agent_mod.heartbeat_path(nobody_folder, agent.pid), field)
    _no_fault_left(nobody_folder, agent.pid)


def test_good_files_confirm_and_revert_without_a_warning(fake_agent, nobody_folder, no_residue):
    """The stand-in agent's good files pass: the storm is confirmed and reverted, and
    nothing is said on stderr (so the warnings above come from the garbage)."""
    agent = fake_agent(GOOD_HEARTBEAT, GOOD_STATUS, GOOD_FINAL)
    cp = _inject(agent.pid, nobody_folder, "1s")
    assert cp.returncode == 0 and cp.stderr == "", (cp.returncode, cp.stdout, cp.stderr[-2000:])
    _no_fault_left(nobody_folder, agent.pid)


# -- the agent's side: a garbage command file of its own user -------------------------

AGENT_RUN = r"""
import json, os, sys, time
from faultlab.benchmarks import agent
d, body = sys.argv[1], sys.argv[2]
a = agent.start(d)
pid = os.getpid()
cmd, st, hb = agent.command_path(d, pid), agent.status_path(d, pid), agent.heartbeat_path(d, pid)
tmp = cmd.with_name("." + cmd.name + ".new")
tmp.write_text(body)
os.replace(tmp, cmd)
end = time.time() + 10
while time.time() < end and not st.exists():
    time.sleep(0.02)
status = st.read_text() if st.exists() else None
beat0 = json.loads(hb.read_text())["heartbeat_ts"]
time.sleep(1.5)
beat1 = json.loads(hb.read_text())["heartbeat_ts"]
alive = a.alive()
os.unlink(cmd)
end = time.time() + 10
while time.time() < end and st.exists():
    time.sleep(0.02)
gone = not st.exists()
agent.stop()
print(json.dumps({"status": status, "alive": alive, "beating": beat1 > beat0, "status_gone": gone}))
"""

FID = "gc-abc123"
COMMAND = {"fault_id": FID, "rate_per_s": 5.0, "garbage_mb": 1.0, "deadline_ts": "@NOW@"}
#: (command text, the field the agent's error names; None: the file as a whole)
BAD_COMMANDS = {
    "not-json": ('{"fault_id": "gc-abc123", ', None),
    "wrong-type": (_json(COMMAND, rate_per_s='"fast"'), "rate_per_s"),
    "nan": (_json(COMMAND, garbage_mb="NaN"), "garbage_mb"),
    "infinity": (_json(COMMAND, deadline_ts="Infinity"), "deadline_ts"),
    "huge-int": (_json(COMMAND, deadline_ts=HUGE_INT), "deadline_ts"),
    "huge-string": (_json(COMMAND, fault_id=json.dumps(HUGE_STR)), "fault_id"),
    "list": ('["gc-abc123", 5, 1]', None),
    "unknown-key": (_json(COMMAND, shell='"rm -rf /"'), "shell"),
}


@pytest.mark.parametrize("kind", sorted(BAD_COMMANDS))
def test_agent_answers_a_bad_command_with_an_error_status_and_keeps_running(kind, nobody_folder):
    """The agent (as nobody) reads a garbage command its own user wrote: it writes an
    error status naming the field, which root's schema accepts, starts no storm, keeps
    its heartbeat going and removes the status once the command is withdrawn."""
    text, field = BAD_COMMANDS[kind]
    text = text.replace("@NOW@", str(int(time.time()) + 60))
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "FAULTLAB_AGENT_DIR": str(nobody_folder)}
    cp = as_nobody([sys.executable, "-c", AGENT_RUN, str(nobody_folder), text], env=env, timeout=60)
    assert cp.returncode == 0, cp.stderr[-3000:]
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    assert out["alive"] and out["beating"] and out["status_gone"], out
    assert out["status"] is not None, "no status: the agent said nothing about the command"
    status = json.loads(out["status"])
    assert status["state"] == "error", {k: str(v)[:80] for k, v in status.items()}
    assert len(status["error"]) < 300 and (field is None or field in status["error"]), status["error"][:300]
    assert status.get("fault_id") in (None, FID)
    assert gc_mod.check_agent_file(gc_mod.StormStatus, out["status"], "status")[1] is None
    assert not list(nobody_folder.iterdir())
