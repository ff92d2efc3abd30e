"""A command root runs as the workload's user holds neither root's terminal nor its environment.

gc-storm runs its inject and revert lines as the control folder's owner (``setpriv``).
That process is the owner's: they may attach to it (ptrace, same uid) and make it do
anything their own uid may, with what it inherited. Started from root's interactive
``faultlab inject``, it inherited root's terminal as its stdin and as its controlling
terminal (root's session), so its owner could push a command into root's shell with
TIOCSTI, run as root once faultlab returned (shown with gdb in the red team's notes);
its ``/proc/PID/environ``, which its owner reads, held root's whole environment; and
its ``/proc/PID/cwd`` was root's working folder, through which its owner opened files
below a 0700 folder of root's.

Here root's ``faultlab inject --type gc-storm`` runs on a real pseudo-terminal (its
controlling terminal), nobody owns the control folder and a stand-in agent that takes
1.5 s to end the storm, so the revert line runs as nobody that long. While it runs,
the test reads that process's ``/proc``: it must have no controlling terminal (stat
field 7, ``tty_nr``, is 0), no descriptor open on root's terminal, none of the
environment root's faultlab ran with, and ``/`` as its working folder (root's stands
in the test's folder).
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import subprocess
import termios
import threading
import time

import pytest

from faultlab import procid
from faultlab.injectors import gc
from faultlab.nodes import LocalNode
from tests.helpers import FL, needs_root
from tests.security.test_agent_files import FAKE_AGENT, GOOD_HEARTBEAT, GOOD_STATUS, NOBODY, nobody_folder  # noqa: F401 (fixture)

pytestmark = needs_root

#: the stand-in agent, ending its storm 1.5 s after the command is withdrawn
SLOW_AGENT = FAKE_AGENT.replace('rm -f "$d/$me.gc-storm.status.json"\n', 'sleep 1.5; rm -f "$d/$me.gc-storm.status.json"\n')
assert SLOW_AGENT != FAKE_AGENT
STOP_MARK = b'"$1".tmp.*; i=0'  # gc.STOP_SH, the revert line that waits for the agent


ROOT_TOKEN = "root-secret-of-the-test"


def _as_nobody_lines() -> dict[int, tuple[int, list[str], bytes, str]]:
    """{PID: (tty_nr, descriptor targets, environ, working folder)} of nobody's processes running the revert line."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != NOBODY or STOP_MARK not in open(f"/proc/{name}/cmdline", "rb").read():
                continue
            fields = procid.stat_fields(open(f"/proc/{name}/stat", "rb").read().decode())
            fds = [os.readlink(f"/proc/{name}/fd/{n}") for n in os.listdir(f"/proc/{name}/fd")]
            environ = open(f"/proc/{name}/environ", "rb").read()
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        found[int(name)] = (int(fields[4]), fds, environ, cwd)  # fields from state (stat field 3): tty_nr is field 7
    return found


def test_a_line_run_as_the_workload_user_has_no_part_of_roots_terminal_environment_or_folder(nobody_folder):  # noqa: F811
    agent = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sh", "-c", SLOW_AGENT, "sh",
                              str(nobody_folder), GOOD_HEARTBEAT, GOOD_STATUS, GOOD_HEARTBEAT], stdout=subprocess.PIPE, text=True)
    master, slave = os.openpty()
    tty = os.ttyname(slave)
    seen: dict[int, tuple[int, list[str], bytes, str]] = {}
    try:
        assert agent.stdout.readline().strip() == "ready"
        env = dict(os.environ, FAULTLAB_AGENT_DIR=str(nobody_folder), ROOT_TOKEN=ROOT_TOKEN)
        root = subprocess.Popen([*FL, "inject", "--type", "gc-storm", "--target", str(agent.pid), "--gc-rate", "50",
                                 "--garbage-mb", "1", "--duration", "1s"], stdin=slave, stdout=slave, stderr=slave, env=env,
                                start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0), cwd=nobody_folder.parent)
        os.close(slave)
        out = bytearray()
        drain = threading.Thread(target=lambda: _drain(master, out), daemon=True)
        drain.start()
        end = time.time() + 120
        while root.poll() is None and time.time() < end:
            seen.update(_as_nobody_lines())
            time.sleep(0.01)
        assert root.wait(5) == 0, out.decode(errors="replace")[-2000:]
        drain.join(5)
    finally:
        agent.kill()
        agent.wait()
        os.close(master)
    assert seen, "the revert line never ran as nobody (no process of nobody's ran gc.STOP_SH)"
    for pid, (tty_nr, fds, environ, cwd) in seen.items():
        assert tty_nr == 0, f"nobody's process {pid} has root's terminal as its controlling terminal (tty_nr {tty_nr})"
        assert tty not in fds, f"nobody's process {pid} holds root's terminal {tty}: {fds}"
        assert ROOT_TOKEN.encode() not in environ, f"nobody's process {pid} has root's environment: {environ[:300]!r}"
        assert environ.split(b"\0")[0].startswith(b"PATH="), environ[:300]
        assert cwd == "/", f"nobody's process {pid} stands in root's working folder {cwd}"


def _drain(fd: int, out: bytearray) -> None:
    while True:
        try:
            b = os.read(fd, 65536)
        except OSError:
            return
        if not b:
            return
        out += b


@pytest.mark.parametrize("data", [b"", b"x"])
def test_node_run_gives_no_stdin_but_its_input(data):
    """``Node.run``'s command reads ``/dev/null``, or the input it is given: never this
    process's stdin (a terminal, for an interactive faultlab)."""
    r, w = os.pipe()
    os.write(w, b"the caller's stdin\n")
    os.close(w)
    saved = os.dup(0)
    os.dup2(r, 0)
    try:
        cp = LocalNode("local").run(["cat"], input=data or None, timeout=10)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(r)
    assert cp.stdout == data.decode()


KEY_NAME = "faultlab-test-root-session-key"


def _root_session_keyring() -> None:
    """In the child (preexec): a login session's keyring as pam_keyinit makes one,
    holding a key of root's (keyctl(2) through ctypes, x86_64/aarch64 numbers)."""
    import ctypes
    import platform

    libc = ctypes.CDLL(None, use_errno=True)
    keyctl = gc.KEYCTL_NR[platform.machine()]
    add_key = {"x86_64": 248, "aarch64": 217, "riscv64": 217}[platform.machine()]
    assert libc.syscall(keyctl, 1, b"_ses") > 0  # KEYCTL_JOIN_SESSION_KEYRING
    assert libc.syscall(add_key, b"user", KEY_NAME.encode(), b"secret", 6, -3) > 0  # into @s


@pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "aarch64", "riscv64"), reason="keyctl numbers known here")
def test_a_line_run_as_the_workload_user_possesses_no_key_of_roots(tmp_path):
    """Keys are their possessor's whatever its uid: a line run as nobody from a root
    shell whose session keyring holds a key must not see it (``/proc/keys`` lists the
    keys a process may view: root's key only to a possessor of root's keyring)."""
    inj = gc.GcStorm(LocalNode("local"), os.getpid(), 5, 1, 10, agent_dir=str(tmp_path))
    argv = inj._as_owner(("sh", "-c", "cat /proc/keys"), NOBODY, NOBODY)
    cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, preexec_fn=_root_session_keyring)
    assert cp.returncode == 0, cp.stderr
    mine = subprocess.run(["cat", "/proc/keys"], capture_output=True, text=True, preexec_fn=_root_session_keyring).stdout
    assert KEY_NAME in mine, "the key was not made (the test's own check)"
    assert KEY_NAME not in cp.stdout, f"nobody's line possesses root's session key: {cp.stdout}"


def test_a_line_cut_by_a_signal_is_killed_and_its_readers_end_clean():
    """A revert line cut by what a signal handler raises (a third Ctrl-C hands the fault
    to its lease) is killed at once, as ``subprocess.run`` kills it, and a child of it
    that still holds the pipes (a line run as another user may leave one) makes no
    reader thread fail: the readers close the pipes themselves once it is gone (the
    chaos test saw a thread's traceback on faultlab's stderr)."""
    import signal
    import threading

    from faultlab.nodes.base import run_bounded

    class Cut(Exception):
        pass

    def cut(*_):
        raise Cut()

    failed = []
    old_hook, threading.excepthook = threading.excepthook, failed.append
    old = signal.signal(signal.SIGALRM, cut)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        t0 = time.monotonic()
        with pytest.raises(Cut):
            run_bounded(["sh", "-c", "sleep 4 & exec sleep 60"], input=None, timeout=120, limit=1000)
        assert time.monotonic() - t0 < 30, "the cut line was waited for, not killed"
        assert wait_for_readers(8), "the reader threads did not end once the pipes' last holder did"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        threading.excepthook = old_hook
    assert not failed, [str(a.exc_value) for a in failed]


def wait_for_readers(timeout: float) -> bool:
    """Whether every thread running ``run_bounded``'s reader has ended within ``timeout`` s."""
    import threading

    end = time.time() + timeout
    while time.time() < end:
        if not [t for t in threading.enumerate() if "take" in t.name]:
            return True
        time.sleep(0.1)
    return False


def test_a_line_run_as_the_workload_user_takes_their_own_group_not_the_folders(nobody_folder):  # noqa: F811
    """nobody's control folder has group shadow, as a folder made inside a setgid folder
    of that group has (whoever makes it, in shadow or not): root's revert line runs as
    nobody with nobody's own group, never with shadow (it ran with gid 42)."""
    shadow = grp.getgrnam("shadow").gr_gid
    os.chown(nobody_folder, NOBODY, shadow)
    agent = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sh", "-c", SLOW_AGENT, "sh",
                              str(nobody_folder), GOOD_HEARTBEAT, GOOD_STATUS, GOOD_HEARTBEAT], stdout=subprocess.PIPE, text=True)
    gids: dict[int, str] = {}
    try:
        assert agent.stdout.readline().strip() == "ready"
        root = subprocess.Popen([*FL, "inject", "--type", "gc-storm", "--target", str(agent.pid), "--gc-rate", "50", "--garbage-mb", "1",
                                 "--duration", "1s"], env=dict(os.environ, FAULTLAB_AGENT_DIR=str(nobody_folder)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        end = time.time() + 120
        while root.poll() is None and time.time() < end:
            for pid in _as_nobody_lines():
                try:
                    gids[pid] = next(ln for ln in open(f"/proc/{pid}/status") if ln.startswith("Gid:"))
                except (OSError, StopIteration):
                    pass
            time.sleep(0.01)
        _, err = root.communicate(timeout=30)
        assert root.returncode == 0, err[-2000:]
    finally:
        agent.kill()
        agent.wait()
    assert gids, "the revert line never ran as nobody"
    own = pwd.getpwuid(NOBODY).pw_gid
    for pid, line in gids.items():
        assert line.split()[1:] == [str(own)] * 4, f"nobody's process {pid} runs with {line.strip()}, not nobody's group {own}"
