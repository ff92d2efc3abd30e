"""Lease watchdogs: the detached ``sh`` that carries a fault's revert lines and
deadline (its script, in the form for this host and for an ssh node), and finding the
live ones on this host by their argv (``sh -c ... faultlab-watchdog ID DEADLINE FD
LINES...``), with their owner, start time, lease folder and controller."""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from faultlab import procid
from faultlab.lifecycle.record import LEASE_ID

#: the name of the watchdog's ``$0``, how it is found in /proc
WATCHDOG_NAME = "faultlab-watchdog"
#: the watchdog's environment names its controller, "PID STARTTIME" (clock ticks since
#: boot, 0 when unknown), so a fault whose record was lost is still known to be held
#: by a live controller (``faultlab recover`` leaves it alone)
CONTROLLER_ENV = "FAULTLAB_CONTROLLER"
#: a whole number read from a process's argv or ``/proc`` (a watchdog's deadline in unix
#: seconds, a PID): ASCII digits, at most 12 (``str.isdigit`` also takes ``²``, which no
#: ``int`` or ``float`` reads, and any number of digits)
WHOLE_NUMBER = re.compile(r"^[1-9][0-9]{0,11}$")

#: how long the watchdog lets one revert line run (s) before it kills it (SIGKILL, with
#: ``timeout``) and goes on: a line may run as another user (gc-storm's runs as the
#: target's), who can stop or hang it, and must not hold the watchdog and the record
#: for ever
LINE_TIMEOUT_S = 60
#: how long past its deadline a live watchdog may still be running its lines before
#: ``status`` calls it stuck and ``recover`` stops it (s): one line's bound plus slack
OVERDUE_S = LINE_TIMEOUT_S + 15

# The watchdog's body, shared by the local and the remote form: $rec the record, $renew
# the renewed-deadline file, $dl the deadline, "$@" the revert lines. It runs the lines
# at the deadline (or on SIGUSR1) whether or not the record is still there, each under
# ``timeout -s KILL LINE_TIMEOUT_S`` (sh -c alone where coreutils' timeout is missing)
# with its stdin from /dev/null.
_WATCHDOG_LOOP = r"""
run_line() {
  if command -v timeout >/dev/null 2>&1; then timeout -s KILL {LINE_S} sh -c "$1"; else sh -c "$1"; fi
}
while [ "$fire" = 0 ]; do
  new=$(cat "$renew" 2>/dev/null)
  case "$new" in
    [1-9]*) case "$new" in *[!0-9]*|?????????????*) ;; *) dl="$new" ;; esac ;;
  esac
  now=$(date +%s)
  [ "$now" -ge "$dl" ] && break
  left=$(( dl - now ))
  [ "$left" -gt 5 ] && left=5
  sleep "$left" </dev/null & sp=$!
  wait "$sp"
  kill "$sp" 2>/dev/null
done
for line in "$@"; do run_line "$line" </dev/null >/dev/null 2>&1; done
rm -f "$rec" "$renew"
drop_temporaries
""".replace("{LINE_S}", str(LINE_TIMEOUT_S))

# Positional args: $1 lease id, $2 deadline (unix s), $3 the number of the inherited
# descriptor of the lease folder, $4... revert lines (each shlex.join-ed). A renewed
# deadline is read through the descriptor, digits only (1-12, no leading zero: never
# octal, never an expression), so `$(( ))` only ever sees a plain number. faultlab
# passes the folder as the watchdog's stdin (descriptor 0): every revert line runs with
# stdin from /dev/null, so no line inherits it (a line may run as another user, who
# must not reach root's lease folder through it; sh names descriptors 0-9 only, so one
# of a higher number could not be closed for the lines).
WATCHDOG_SH = r"""
trap '' HUP INT
fire=0
trap 'fire=1' USR1
id="$1"; dl="$2"; d="/dev/fd/$3"; shift 3
rec="$d/$id.json"; renew="$d/$id.deadline"
# what a controller killed mid-write left (safefs.write_atomic: .NAME.<hex>.tmp)
drop_temporaries() { rm -f -- "$d/.$id.json."HEX12.tmp "$d/.$id.deadline."HEX12.tmp; }
""".replace("HEX12", "[0-9a-f]" * 12) + _WATCHDOG_LOOP


# The watchdog of a lease on a remote (ssh) node, where no descriptor can be passed:
# $1 record path, $2 deadline, $3... revert lines.
REMOTE_WATCHDOG_SH = r"""
trap '' HUP INT
fire=0
trap 'fire=1' USR1
rec="$1"; dl="$2"; shift 2
renew="${rec%.json}.deadline"
# what a controller cut off mid-write left (SshNode.write_file: NAME.tmp.<pid>)
drop_temporaries() { rm -f -- "$rec.tmp."[0-9]* "$renew.tmp."[0-9]*; }
""" + _WATCHDOG_LOOP


@dataclass
class Watchdog:
    """A live lease watchdog found in /proc."""

    pid: int
    uid: int
    fault_id: str
    deadline_ts: int
    lines: list[str]
    starttime: str
    folder: str | None = None  # its lease folder (readable only for its owner and root)
    controller: tuple[int, int] | None = None  # (PID, start time) of the faultlab that started it
    same_ns: bool = True  # it runs in this process's PID namespace (not a container's)

    def controller_alive(self) -> bool:
        """Whether the controller its environment names (``CONTROLLER_ENV``) still
        runs (PID and start time; a start time of 0, unknown, checks the PID only).
        Untrusted: a process that merely looks like a watchdog can name any PID, which
        only makes ``recover`` leave that process alone."""
        if self.controller is None:
            return False
        pid, start = self.controller
        return procid.alive(pid, start or None)

    def _same(self) -> bool:
        w = _watchdog(self.pid)
        return w is not None and w.starttime == self.starttime and w.fault_id == self.fault_id

    def fire(self) -> bool:
        """SIGUSR1: revert now. False when it is gone, not ours to signal, or does not
        catch SIGUSR1 (a watchdog traps it: anything else would not revert, only die
        of it or ignore it), so nobody waits on it."""
        if not _catches(self.pid, signal.SIGUSR1):
            return False
        return self._signal(signal.SIGUSR1, group=False)

    def stop(self) -> bool:
        """SIGTERM to its process group (it started its own session), after SIGKILL to
        the process group of each revert line it runs (``timeout`` leads one of its
        own): a line that hangs or was stopped does not outlive the watchdog."""
        return self._signal(signal.SIGTERM, group=True)

    def _signal(self, sig: int, *, group: bool) -> bool:
        try:
            fd = os.pidfd_open(self.pid)
        except OSError:
            return False
        try:
            if not self._same():  # the PID was reused since it was found
                return False
            if group:
                _kill_line_groups(self.pid)
                os.killpg(self.pid, sig)
            else:
                signal.pidfd_send_signal(fd, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False
        finally:
            os.close(fd)

    def wait_gone(self, timeout_s: float) -> bool:
        end = time.time() + timeout_s
        while time.time() < end:
            if not self._same():
                return True
            time.sleep(0.1)
        return not self._same()


def _kill_line_groups(pid: int) -> None:
    """SIGKILL the process groups that children of watchdog ``pid`` lead (its revert
    lines under ``timeout``); its other children are in its own group. Raises nothing."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return
    for c in children:
        try:
            if os.getpgid(int(c)) == int(c) and procid.stat_fields(Path(f"/proc/{c}/stat").read_text())[1] == str(pid):
                os.killpg(int(c), signal.SIGKILL)
        except (OSError, TypeError, IndexError, ValueError):
            continue


def _watchdog(pid: int) -> Watchdog | None:
    p = Path(f"/proc/{pid}")
    try:
        argv = (p / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if len(argv) < 7 or argv[1] != b"-c" or argv[3] != WATCHDOG_NAME.encode():
        return None
    try:
        fid, dl, fdn = argv[4].decode(), argv[5].decode(), argv[6].decode()
        lines = [a.decode() for a in argv[7:-1]] if argv[-1] == b"" else [a.decode() for a in argv[7:]]
        stat = procid.stat_fields((p / "stat").read_text())
        status = (p / "status").read_text()
    except (OSError, UnicodeDecodeError):
        return None
    if stat is None or not LEASE_ID.match(fid) or not WHOLE_NUMBER.match(dl) or not fdn.isdigit():
        return None
    if int(stat[3]) != pid:  # not the session leader: a subshell of the watchdog
        return None
    uid = _owner(status)
    folder = None
    try:
        folder = os.readlink(p / "fd" / fdn)
    except OSError:
        pass
    return Watchdog(pid, uid, fid, int(dl), lines, stat[19], folder, _controller_of(p), _same_namespaces(pid))


def _owner(status: str) -> int:
    """The uid a process runs for, from its ``/proc/PID/status``: its real uid (the
    user who started it). A setuid-root program another user starts (``chsh``,
    ``passwd``) runs with effective uid 0, but it is that user's process: named like
    a watchdog, it is that user's look-alike, never root's record-less watchdog. -1
    when the line is missing or malformed."""
    uid = procid.real_uid(status)
    return -1 if uid is None else uid


def _same_namespaces(pid: int) -> bool:
    """Whether process ``pid`` shares this process's PID namespace. A container's root
    is uid 0 on the host too (no user-namespace remap), so a uid alone cannot tell
    root's own watchdog from a container process named like one; faultlab starts every
    local watchdog in its own PID namespace. (The mount namespace is not compared:
    ``ip netns exec`` gives a faultlab run under it one of its own.)"""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino == os.stat("/proc/self/ns/pid").st_ino
    except PermissionError:  # another user's process: its status (world-readable) says
        return _nspid_depth(pid) == _nspid_depth("self")
    except OSError:
        return False


def _nspid_depth(pid: int | str) -> int:
    """How many PID namespaces, from the one /proc shows down, process ``pid`` is
    in (the fields of ``NSpid:`` in ``/proc/PID/status``); 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((len(ln.split()) - 1 for ln in f if ln.startswith("NSpid:")), 0)
    except OSError:
        return 0


def _catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (``SigCgt`` in
    ``/proc/PID/status``); False when it is gone or the line is unreadable."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:") and len(ln.split()) == 2), "")
    try:
        return bool(int(mask, 16) >> (sig - 1) & 1)
    except ValueError:
        return False


def _controller_of(p: Path) -> tuple[int, int] | None:
    """(PID, start time) named by ``CONTROLLER_ENV`` in ``/proc/PID/environ`` (readable by
    its owner and root), digits only; None when absent, unreadable or malformed."""
    try:
        env = (p / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    key = CONTROLLER_ENV.encode() + b"="
    value = next((e[len(key):] for e in env if e.startswith(key)), b"")
    parts = value.split(b" ")
    if len(parts) != 2 or not all(x.isdigit() and len(x) <= 20 for x in parts) or int(parts[0]) <= 0:
        return None
    return int(parts[0]), int(parts[1])


def find_watchdogs() -> list[Watchdog]:
    """Every live lease watchdog on this host, of any user."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            w = _watchdog(int(p.name))
            if w is not None:
                out.append(w)
    return out
