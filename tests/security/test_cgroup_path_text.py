"""The workload's user names the cgroups of a subtree of theirs (systemd delegates
``user@UID.service`` on cgroup v2; an admin may on v1), and root's cpu-contention and
io-slow read the target's cgroup path from ``/proc/PID/cgroup`` and put it in the plan
(``faultlab inject --dry-run`` prints it) and in the lines root runs. A path with a
character that is not printable (ESC, a C1 control, a bidirectional override) is
refused in one line naming ``--target``: ``cgroups.clean_home`` refused only NUL, tab,
CR and LF, and the dry run printed the user's escape sequences raw on root's terminal.

Real: nobody's sleep in a cgroup nobody named, in a folder of this host's cgroup v1
cpu hierarchy that root gave nobody; root's ``faultlab inject --dry-run`` (read-only)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from faultlab.errors import Refused
from faultlab.injectors.cgroups import clean_home
from tests.helpers import needs_root
from tests.security.test_link_writes import NOBODY

V1_CPU = Path("/sys/fs/cgroup/cpu")

#: erase the line, go up one, then a line of nobody's; a window title (OSC)
EVIL = "w\x1b]0;title\x07\x1b[2K\x1b[1Aforged: nothing in force"


@pytest.mark.parametrize("name", [EVIL, "a\x9b31mred", "a\u202egnp.exe", "a\x7f"])
def test_a_cgroup_path_with_a_character_that_is_not_printable_is_refused(name):
    with pytest.raises(Refused) as e:
        clean_home(f"/user.slice/{name}")
    assert e.value.field == "--target"
    assert "\x1b" not in str(e.value) and "\x9b" not in str(e.value) and "\u202e" not in str(e.value)
    assert clean_home("/user.slice/user-1000.slice/app-ünïcode name.scope") == "/user.slice/user-1000.slice/app-ünïcode name.scope"


@needs_root
@pytest.mark.skipif(not (V1_CPU / "cpu.cfs_quota_us").exists(), reason="needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
def test_roots_dry_run_on_a_target_in_a_cgroup_its_user_named_with_escapes_prints_none(tmp_path):
    """nobody's target sits in ``.../EVIL``: root's ``inject --dry-run`` of a
    cpu-contention on it is refused in one line naming ``--target``, and no ESC,
    C1 control or line of nobody's reaches root's terminal."""
    deleg = V1_CPU / f"fltest-cgtext-{secrets.token_hex(3)}"
    deleg.mkdir()
    target = None
    try:
        os.chown(deleg, NOBODY, NOBODY)
        for f in ("cgroup.procs", "tasks"):
            os.chown(deleg / f, NOBODY, NOBODY)
        nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        subprocess.run([*nobody, "mkdir", str(deleg / EVIL)], check=True)
        target = subprocess.Popen([*nobody, "sleep", "600"])
        subprocess.run([*nobody, "sh", "-c", 'echo "$1" > "$2"', "sh", str(target.pid), str(deleg / EVIL / "cgroup.procs")], check=True)
        assert EVIL in Path(f"/proc/{target.pid}/cgroup").read_text()
        cp = subprocess.run([sys.executable, "-P", "-m", "faultlab.cli", "inject", "--dry-run", "--type", "cpu-contention",
                             "--cpu-fraction", "0.5", "--target", str(target.pid), "--duration", "5s"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
        text = cp.stdout + cp.stderr
        assert "\x1b" not in text and "\x07" not in text, repr(text)
        assert not any(ln.startswith("forged:") for ln in text.splitlines()), repr(text)
        assert cp.returncode != 0 and "--target" in cp.stderr and "not a clean path" in cp.stderr, repr(text)
    finally:
        if target is not None:
            target.kill()
            target.wait()
        for d in (deleg / EVIL, deleg):
            if d.exists():
                d.rmdir()
