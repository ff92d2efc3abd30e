"""The in-workload agent: faults that must act from inside a Python process.

One line in any Python workload starts it (``faultlab.benchmarks.ddp`` ranks start it
by default)::

    from faultlab.benchmarks import agent; agent.start()

It imports only the standard library. ``start()`` launches one daemon thread
(``faultlab-agent``) that polls a *control folder* every ``poll_s`` (0.05 s) for a
command file and otherwise sleeps: idle, it costs one ``os.stat`` per poll and one
small heartbeat write per second.

Control folder (``default_dir()``, the same rule the ``gc-storm`` injector uses):
``$FAULTLAB_AGENT_DIR``; else ``/run/faultlab/agents`` as root; else
``$XDG_RUNTIME_DIR/faultlab/agents`` (or ``~/.cache/faultlab/agents``: never a
predictable name under a shared ``/tmp``). A workload and the faultlab controller that
targets it must agree on it: give both the same ``FAULTLAB_AGENT_DIR`` when they run
as different users. One folder serves one PID namespace (files are named by PID).

Trust (``faultlab.safefs``): the folder must be owned by the process's user (or root),
mode 0700, with every folder above it owned by root or that user and not writable by
others, and no symlink on the way; the agent refuses to start otherwise
(``UntrustedPath``, an OSError) and re-checks it every heartbeat. Files are opened
relative to the folder's descriptor without following symlinks; a command file is
acted on only when it is a regular file owned by root or the process's user (so
nobody else can start a storm in this process), and every write is a fresh
``O_EXCL`` temporary renamed into place (a planted link is never written through).
A command is taken only with exactly its four keys, a fault id of at most 64 of
``a-z0-9-``, finite rates in range and a finite unix time (``validate_command``);
anything else gets an error status naming the field in one bounded line, and no storm.

Files, for a process with PID ``P`` (all JSON, each written atomically by rename):

``P.agent``                  heartbeat, written by the agent: ``pid``, ``starttime``
                             (field 22 of /proc/P/stat, clock ticks since boot: tells
                             a reused PID apart), ``python``, ``started_ts``,
                             ``heartbeat_ts`` (unix s, refreshed every second).
``P.gc-storm.json``          command, written by the injector: ``fault_id``,
                             ``rate_per_s`` (collections/s, (0, 100]), ``garbage_mb``
                             (MB per collection, (0, 4096]), ``deadline_ts`` (unix s).
``P.gc-storm.status.json``   status, written by the agent while a storm is in force:
                             ``state`` (``running`` or ``error`` with ``error``),
                             ``bursts``, ``first_burst_ts`` (unix s the first
                             burst began), ``burst_s_total``, ``collect_s_total``,
                             ``collect_s_max``, ``gc_s_total``, ``elapsed_s``,
                             ``stalled_fraction``, ``achieved_rate_per_s`` and the
                             command's fields. The final status of the last storm
                             (``state: ended``, ``end``: ``revoked``, ``deadline`` or
                             ``stopped``) stays in the heartbeat as ``last_storm``.

``burst_s_total`` is the wall time of the bursts (allocation + collection, the time
the storm held the interpreter); ``gc_s_total`` the time in all collections of the
process while the storm ran (the bursts' and the workload's own); ``stalled_fraction``
is ``burst_s_total`` over the elapsed time, or over the planned schedule
(``bursts / rate_per_s``) while that is longer (so a reading right after the first
burst is not inflated), capped at 1; ``achieved_rate_per_s`` is ``bursts`` over the
same span. The status is rewritten on acceptance (``bursts``
0: the ack), as the first burst begins (``first_burst_ts``: a full collection of a
large heap, e.g. one a workload's own rare collections let grow, can hold the
interpreter for seconds), after the first burst and then at most every 0.2 s.

A gc-storm is a train of stop-the-world garbage-collection bursts (``gc_burst``).
Each burst allocates ``garbage_mb`` MB of small cyclic garbage (``garbage_mb * 2**20 /
OBJ_BYTES`` empty lists, 64 bytes each with their GC header and the slot that holds
them, owned by one list that contains itself, so only the cycle collector can free
them) in one C-level call with automatic collection paused, then calls
``gc.collect()``: a full collection of the whole heap plus the garbage. Both phases
hold the GIL, so every other Python thread of the process (the training loop) stalls,
as under real uncoordinated GC; a pause therefore grows with the workload's own heap
(a process that imported torch has ~10^5-10^6 tracked objects: ~0.15 s per full
collection on the 2-core test machine, against ~0.01 s for a bare interpreter).
Pausing automatic collection during the allocation keeps the count exact (one full
collection per burst) instead of letting the allocation trigger several more; it is
restored right after (only if it was enabled: a workload that runs with ``gc``
disabled keeps it so). Bursts start at ``rate_per_s`` per second; a burst longer than
the period delays the next one (no catch-up), so the achieved rate can be lower
(``achieved_rate_per_s``). Memory: ``garbage_mb`` MB more at the peak of a burst.

The storm ends when the command file disappears (the injector's revert is ``rm`` of
it, which the lease watchdog can run with ``sh`` alone), when a different command
replaces it, at ``deadline_ts`` by the agent's own clock (so it ends even when the
controller and its watchdog are both gone; the agent then removes the expired command
file too), or on ``stop()``. When it ends the agent removes its status file.

``install_gc_timer()`` / ``gc_seconds()``: cumulative seconds this process spent in
garbage collection (any thread, measured with ``gc.callbacks``), used for the per-step
``gc_s`` of the ddp workload and the storm's ``gc_s_total``.
"""

from __future__ import annotations

import atexit
import gc
import math
import os
import platform
import re
import sys
import threading
import time
from itertools import repeat
from pathlib import Path

from faultlab import procid, safefs
from faultlab.safefs import runtime_dir

AGENT_VERSION = 1
POLL_S = 0.05
HEARTBEAT_S = 1.0
MAX_RATE_PER_S = 100.0
MAX_GARBAGE_MB = 4096.0
#: bytes one garbage object takes: an empty list with its GC header (sys.getsizeof)
#: plus the 8-byte slot of the list that holds it
OBJ_BYTES = sys.getsizeof([]) + 8
STATUS_EVERY_S = 0.2

CMD_SUFFIX = ".gc-storm.json"
STATUS_SUFFIX = ".gc-storm.status.json"
HEARTBEAT_SUFFIX = ".agent"


# -- paths ---------------------------------------------------------------------------
def default_dir() -> Path:
    """The control folder: ``runtime_dir("FAULTLAB_AGENT_DIR", "agents")``."""
    return runtime_dir("FAULTLAB_AGENT_DIR", "agents")


def heartbeat_path(control_dir: str | Path, pid: int) -> Path:
    return Path(control_dir) / f"{int(pid)}{HEARTBEAT_SUFFIX}"


def command_path(control_dir: str | Path, pid: int) -> Path:
    return Path(control_dir) / f"{int(pid)}{CMD_SUFFIX}"


def status_path(control_dir: str | Path, pid: int) -> Path:
    return Path(control_dir) / f"{int(pid)}{STATUS_SUFFIX}"


def proc_starttime(pid: int | str = "self") -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot), or None
    (``faultlab.procid.starttime``)."""
    return procid.starttime(pid)


def parse_starttime(stat_text: str) -> int | None:
    """The start time field of a /proc/PID/stat line, or None when malformed
    (``faultlab.procid.parse_starttime``)."""
    return procid.parse_starttime(stat_text)


#: the keys of a command file, and what its fault id may be: a short name in lower-case
#: letters, digits and ``-`` (faultlab's own are ``gc-3f9a1c``), safe in one line
COMMAND_KEYS = ("fault_id", "rate_per_s", "garbage_mb", "deadline_ts")
FAULT_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
#: the latest unix time taken as one (year 5138): beyond it a number is not a time
MAX_UNIX_TS = 1e11


def _printable(text: str, limit: int = 40) -> str:
    return "".join(c if c.isprintable() else "?" for c in text[:limit]) + ("..." if len(text) > limit else "")


def _number_in(v, lo: float, hi: float, lo_open: bool) -> bool:
    """Whether ``v`` is an int or float (not a bool), finite, in (lo, hi] or [lo, hi]."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, float) and not math.isfinite(v):
        return False
    return (lo < v if lo_open else lo <= v) and v <= hi


def unix_ts(v) -> float | None:
    """``v`` as a unix time (s) when it is a finite number in [0, MAX_UNIX_TS], else None."""
    return float(v) if _number_in(v, 0.0, MAX_UNIX_TS, False) else None


def command_fault_id(cmd) -> str | None:
    """The fault id of a command when it has one of the right shape, else None (what an
    error status may echo)."""
    fid = cmd.get("fault_id") if isinstance(cmd, dict) else None
    return fid if isinstance(fid, str) and FAULT_ID.fullmatch(fid) else None


def validate_command(cmd: dict) -> str | None:
    """None when ``cmd`` is a well-formed gc-storm command, else what is wrong, in one
    bounded line naming the field: a JSON object with exactly COMMAND_KEYS, a fault id
    of the form ``gc-3f9a1c``, finite rates in range and a unix time."""
    if not isinstance(cmd, dict):
        return "command is not a JSON object"
    for key in cmd:
        if key not in COMMAND_KEYS:
            return f"{_printable(str(key))}: not a command field (known: {', '.join(COMMAND_KEYS)})"
    if command_fault_id(cmd) is None:
        return "fault_id: missing or not a fault id (up to 64 of a-z, 0-9 and -, e.g. gc-3f9a1c)"
    for key, hi in (("rate_per_s", MAX_RATE_PER_S), ("garbage_mb", MAX_GARBAGE_MB)):
        v = cmd.get(key)
        if not _number_in(v, 0.0, hi, True):
            return f"{key}: {_printable(repr(v))} is not a number in (0, {hi:g}]"
    if unix_ts(cmd.get("deadline_ts")) is None:
        return f"deadline_ts: {_printable(repr(cmd.get('deadline_ts')))} is not a unix time in [0, {MAX_UNIX_TS:g}]"
    return None


# -- GC timer ------------------------------------------------------------------------
_gc_total_s = 0.0
_gc_count = 0
_gc_t0: float | None = None


def _gc_callback(phase: str, info: dict) -> None:
    global _gc_total_s, _gc_count, _gc_t0
    if phase == "start":
        _gc_t0 = time.perf_counter()
    elif _gc_t0 is not None:
        _gc_total_s += time.perf_counter() - _gc_t0
        _gc_count += 1
        _gc_t0 = None


def install_gc_timer() -> None:
    """Add the timing callback to ``gc.callbacks`` (once; idempotent)."""
    if _gc_callback not in gc.callbacks:
        gc.callbacks.append(_gc_callback)


def gc_seconds() -> float:
    """Seconds this process spent in garbage collections since ``install_gc_timer()``
    (all generations, any thread); 0.0 before it."""
    return _gc_total_s


def gc_collections() -> int:
    """Collections counted since ``install_gc_timer()``."""
    return _gc_count


# -- the agent -----------------------------------------------------------------------
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Agent:
    """The agent thread of this process. Use ``start()`` / ``stop()`` rather than
    building one: there is one agent per process."""

    def __init__(self, control_dir: str | Path, poll_s: float = POLL_S):
        self.dir = Path(control_dir)
        self._td: safefs.TrustedDir | None = None  # the checked folder, reopened every heartbeat
        self.poll_s = float(poll_s)
        self.pid = os.getpid()
        self.starttime = proc_starttime()
        self.started_ts = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_hb = 0.0
        self._seen_sig: tuple | None = None  # (ino, mtime_ns, size) of the last command read
        self.storms_done = 0
        self.last_storm: dict | None = None  # the final status of the last storm
        self.last_error: str | None = None

    @property
    def heartbeat_path(self) -> Path:
        return heartbeat_path(self.dir, self.pid)

    @property
    def command_path(self) -> Path:
        return command_path(self.dir, self.pid)

    @property
    def status_path(self) -> Path:
        return status_path(self.dir, self.pid)

    @property
    def _cmd_name(self) -> str:
        return self.command_path.name

    @property
    def _status_name(self) -> str:
        return self.status_path.name

    def _reopen(self) -> None:
        """Open and check the control folder again (at start and every heartbeat): a
        folder that became untrusted (swapped, chmod'ed, a symlink) is no longer used."""
        old = self._td
        try:
            self._td = safefs.open_dir(self.dir, private=True)
        except OSError as e:
            self._td = None
            self.last_error = f"control folder: {e}"
        if old is not None:
            old.close()

    def _unlink(self, name: str) -> None:
        if self._td is not None:
            try:
                self._td.unlink(name)
            except OSError:
                pass

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # lifecycle
    def _start(self) -> "Agent":
        self._td = safefs.open_dir(self.dir, create=True, private=True)  # UntrustedPath: refuse to start
        self._prune()
        self._heartbeat(force=True)
        self._thread = threading.Thread(target=self._run, name="faultlab-agent", daemon=True)
        self._thread.start()
        return self

    def _stop_and_clean(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        if self._thread is not None and self._thread.is_alive():
            # a burst still running uses self._td: clean up through a descriptor of our own
            try:
                with safefs.open_dir(self.dir, private=True) as td:
                    for p in (self.heartbeat_path, self.status_path):
                        td.unlink(p.name)
            except OSError:
                pass
            return
        self._reopen()
        for p in (self.heartbeat_path, self.status_path):
            self._unlink(p.name)
        if self._td is not None:
            self._td.close()
            self._td = None

    def _prune(self) -> None:
        """Remove heartbeat and status files of processes that no longer exist (left
        by a SIGKILLed workload). Command files belong to their injector's lease."""
        try:
            names = self._td.listdir() if self._td is not None else []
        except OSError:
            return
        for name in names:
            for suffix in (HEARTBEAT_SUFFIX, STATUS_SUFFIX):
                if name.endswith(suffix) and name[: -len(suffix)].isdigit():
                    pid = int(name[: -len(suffix)])
                    if pid != self.pid and not _pid_alive(pid):
                        self._unlink(name)

    def _heartbeat(self, force: bool = False) -> None:
        if self._stop.is_set():  # stop() removes the file; never write it back
            return
        now = time.time()
        if not force and now - self._last_hb < HEARTBEAT_S:
            return
        self._last_hb = now
        self._reopen()
        if self._td is None:
            return
        try:
            self._td.write_json(self.heartbeat_path.name, {
                "pid": self.pid, "starttime": self.starttime, "python": platform.python_version(),
                "agent_version": AGENT_VERSION, "started_ts": self.started_ts, "heartbeat_ts": now,
                "storms_done": self.storms_done, "last_storm": self.last_storm,
            }, mode=0o644, durable=False)
        except OSError as e:
            self.last_error = f"heartbeat: {e}"

    def _cmd_sig(self) -> tuple | None:
        if self._td is None:
            return None
        try:
            st = self._td.lstat(self._cmd_name)  # a symlink is seen, not followed
        except OSError:
            return None
        if st is None:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._heartbeat()
                sig = self._cmd_sig()
                if sig is None:
                    self._seen_sig = None
                elif sig != self._seen_sig:
                    self._seen_sig = sig
                    self._take_command(sig)
            except Exception as e:  # the agent must never take the workload down
                self.last_error = f"{type(e).__name__}: {e}"
            self._stop.wait(self.poll_s)

    def _take_command(self, sig: tuple) -> None:
        try:
            if self._td is None:
                raise safefs.UntrustedPath(str(self.dir), "is no longer a trusted control folder", "restart the workload")
            cmd = self._td.read_json(self._cmd_name)  # UntrustedPath: a link, another user's file
        except (OSError, ValueError, RecursionError) as e:
            cmd, err = None, f"unreadable command: {e}"
        else:
            err = validate_command(cmd)
        if err is not None:
            self._write_status({"state": "error", "error": _printable(err, 290), "fault_id": command_fault_id(cmd)})
            self._wait_gone(sig, cmd)
            return
        if time.time() >= cmd["deadline_ts"]:
            self._remove_expired(cmd["fault_id"])
            return
        self._storm(cmd, sig)

    def _wait_gone(self, sig: tuple, cmd: dict | None = None) -> None:
        """After an error status: wait until the command file is removed or replaced,
        or until the deadline of ``cmd`` (when it has a valid one: then the expired
        command is removed too), then remove the status file."""
        deadline = unix_ts(cmd.get("deadline_ts")) if isinstance(cmd, dict) else None
        fault_id = command_fault_id(cmd)
        while not self._stop.is_set() and self._cmd_sig() == sig:
            if deadline is not None and fault_id is not None and time.time() >= deadline:
                self._remove_expired(fault_id)
                break
            self._heartbeat()
            self._stop.wait(self.poll_s)
        self._unlink_status()

    def _remove_expired(self, fault_id: str) -> None:
        if self._td is None:
            return
        try:
            cur = self._td.read_json(self._cmd_name)
        except (OSError, ValueError, RecursionError):
            return
        dl = unix_ts(cur.get("deadline_ts")) if isinstance(cur, dict) else None
        if command_fault_id(cur) == fault_id and dl is not None and time.time() >= dl:
            self._unlink(self._cmd_name)

    def _unlink_status(self) -> None:
        self._unlink(self._status_name)

    def _write_status(self, obj: dict) -> None:
        obj = dict(obj, pid=self.pid, updated_ts=time.time())
        if self._td is None:
            return
        try:
            self._td.write_json(self._status_name, obj, mode=0o644, durable=False)
        except OSError as e:
            self.last_error = f"status: {e}"

    def _storm(self, cmd: dict, sig: tuple) -> None:
        install_gc_timer()
        rate = float(cmd["rate_per_s"])
        n_obj = max(1, int(float(cmd["garbage_mb"]) * 2**20 / OBJ_BYTES))
        deadline = float(cmd["deadline_ts"])
        period = 1.0 / rate
        st = {
            "state": "running", "fault_id": cmd["fault_id"], "rate_per_s": rate, "garbage_mb": float(cmd["garbage_mb"]),
            "deadline_ts": deadline, "objects_per_burst": n_obj, "started_ts": time.time(), "bursts": 0,
            "burst_s_total": 0.0, "burst_s_max": 0.0, "collect_s_total": 0.0, "collect_s_max": 0.0, "gc_s_total": 0.0,
            "elapsed_s": 0.0, "stalled_fraction": 0.0, "achieved_rate_per_s": 0.0,
        }
        t_start = time.perf_counter()
        gc0 = gc_seconds()

        def measure(now: float) -> None:
            el = now - t_start
            st["elapsed_s"] = el
            st["gc_s_total"] = gc_seconds() - gc0
            # over the planned schedule while that is longer than the time spent, so a
            # reading right after the first burst is not inflated
            span = max(el, st["bursts"] * period, 1e-9)
            st["stalled_fraction"] = min(1.0, st["burst_s_total"] / span)
            st["achieved_rate_per_s"] = st["bursts"] / span

        self._write_status(st)  # the ack: accepted, no burst yet
        next_t = t_start
        last_status = t_start
        end = "stopped"
        try:
            while True:
                if self._stop.is_set():
                    break
                self._heartbeat()
                if time.time() >= deadline:
                    end = "deadline"
                    break
                if self._cmd_sig() != sig:
                    end = "revoked"
                    break
                now = time.perf_counter()
                if now < next_t:
                    self._stop.wait(min(next_t - now, self.poll_s))
                    continue
                if st["bursts"] == 0 and "first_burst_ts" not in st:
                    st["first_burst_ts"] = time.time()
                    self._write_status(st)
                alloc_s, collect_s = gc_burst(n_obj)
                t2 = time.perf_counter()
                st["bursts"] += 1
                st["burst_s_total"] += alloc_s + collect_s
                st["burst_s_max"] = max(st["burst_s_max"], alloc_s + collect_s)
                st["collect_s_total"] += collect_s
                st["collect_s_max"] = max(st["collect_s_max"], collect_s)
                next_t += period
                if next_t < t2:
                    next_t = t2  # no catch-up after a burst longer than the period
                if st["bursts"] == 1 or t2 - last_status >= STATUS_EVERY_S:
                    last_status = t2
                    measure(t2)
                    self._write_status(st)
        except Exception as e:  # e.g. MemoryError: report it, end the storm
            end = "error"
            st.update(state="error", error=f"{type(e).__name__}: {e}")
            self._write_status(st)
            self._wait_gone(sig, cmd)
        measure(time.perf_counter())
        st.update(state="ended", end=end, ended_ts=time.time())
        self.last_storm = st
        self.storms_done += 1
        self._heartbeat(force=True)
        self._unlink_status()
        if end == "deadline":
            self._remove_expired(cmd["fault_id"])
        # the poll loop reads a replacing command (its signature differs) and ignores
        # this one if it is still there


def gc_burst(n_obj: int) -> tuple[float, float]:
    """One stop-the-world burst: allocate ``n_obj`` empty lists held by one list that
    contains itself (cyclic garbage, ``n_obj * OBJ_BYTES`` bytes) in one C call with
    automatic collection paused (so the burst is exactly one full collection, however
    large the heap), then ``gc.collect()``. The GIL is held throughout each phase.
    Returns (allocation seconds, collection seconds). Raises MemoryError."""
    t0 = time.perf_counter()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        garbage = list(map(list, repeat((), n_obj)))
        garbage.append(garbage)
        del garbage
    finally:
        if was_enabled:
            gc.enable()
    t1 = time.perf_counter()
    gc.collect()
    return t1 - t0, time.perf_counter() - t1


_agent: Agent | None = None
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # the thread does not exist in a forked child (e.g. a DataLoader worker)
    global _agent, _lock
    _agent = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def start(control_dir: str | Path | None = None, *, poll_s: float = POLL_S) -> Agent:
    """Start this process's agent (idempotent: a running agent is returned as is, even
    if ``control_dir`` differs). ``control_dir`` defaults to ``default_dir()``;
    ``poll_s`` is the poll period in seconds. Also installs the GC timer.

    Removes heartbeat/status files of dead processes in the folder. Raises OSError
    when the folder cannot be created or written, and ``safefs.UntrustedPath`` (an
    OSError) when it is not trusted (owned by another user, not 0700, a symlink on
    the way): the workload may catch it and run without an agent."""
    global _agent
    install_gc_timer()
    with _lock:
        if _agent is not None and _agent.alive():
            return _agent
        _agent = Agent(control_dir if control_dir is not None else default_dir(), poll_s)._start()
        return _agent


def stop(timeout_s: float = 5.0) -> None:
    """Stop the agent (ending any storm) and remove its heartbeat and status files.
    Waits at most ``timeout_s`` for the thread (a burst in progress finishes first).
    Safe to call when none runs. Call it before ``os._exit`` (which skips atexit)."""
    global _agent
    with _lock:
        ag, _agent = _agent, None
    if ag is not None:
        ag._stop_and_clean(timeout_s)


def current() -> Agent | None:
    """The running agent of this process, or None."""
    return _agent if _agent is not None and _agent.alive() else None


def _atexit() -> None:
    try:
        stop(timeout_s=1.0)
    except Exception:
        pass


atexit.register(_atexit)
