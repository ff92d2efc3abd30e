"""The host sampler's node side: runs ON an ssh node, standard library only.

faultlab is not installed on an ssh node, so this file is sent as the program text of
``python3 -c`` (faultlab.telemetry.remote starts it, detached, one per node) and must
import nothing but the standard library (Python >= 3.8). It only *reads*; every
metric is computed on the controller from its raw samples, by the same code as the
local sampler's (faultlab.telemetry.remote.rows_of).

Every ``--interval`` seconds it appends one JSON line to ``--out`` (a file in the
run's telemetry folder on the node, which faultlab.telemetry.collect brings back):

- ``ts``: wall-clock time, s; ``mono``: monotonic time, s (rates divide by its deltas);
  ``hz``: clock ticks per second (``SC_CLK_TCK``);
- ``cpu``: [busy, total] jiffies of the node from the ``cpu`` line of ``/proc/stat``
  (busy = total - idle - iowait);
- ``procs``: {"PID:STARTTIME": [utime + stime ticks, RSS bytes]} of the ``--pids`` and
  all their descendants (``/proc/PID/stat``; the start time tells a reused PID apart);
- ``net``: [rx, tx] bytes over the non-loopback, non-ifb interfaces of the first live
  PID's network namespace (``/proc/PID/net/dev``, as faultlab.telemetry.hostsampler
  reads it), or null;
- ``delay``: {"PID:STARTTIME:TID": ns} the run delay of every thread of those
  processes (field 2 of ``/proc/PID/task/TID/schedstat``: runnable but waiting for a
  CPU, CFS-throttled time included; the controller makes ``proc_run_delay_s_per_s``
  of it as the local sampler does);
- ``ino``: inodes of the sockets open in those processes (``/proc/PID/fd``), and
  ``ss``: the text of ``ss -tinHe state established`` in that namespace (null without
  ss); the controller keeps the connections whose inode is one of ``ino``.

It ends by itself when none of ``--pids`` is alive any more (the ranks ended), at
``--until`` (epoch seconds) at the latest, and on SIGTERM; it starts no process but
one ``ss`` per sample.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def _stat(pid):
    """(ppid, starttime, ticks, rss_pages) of /proc/PID/stat, or None when gone."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            rest = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    if len(rest) < 22 or rest[0] == "Z":
        return None
    return int(rest[1]), rest[19], int(rest[11]) + int(rest[12]), int(rest[21])


def _tree(pids):
    """{pid: stat} of ``pids`` and their descendants that are alive."""
    table = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(d)
            if st is not None:
                table[int(d)] = st
    kids = {}
    for pid, st in table.items():
        kids.setdefault(st[0], []).append(pid)
    out, todo = {}, [p for p in pids if p in table]
    while todo:
        p = todo.pop()
        if p not in out:
            out[p] = table[p]
            todo.extend(kids.get(p, ()))
    return out


def _delay(tree):
    """{"PID:STARTTIME:TID": run delay ns} of the threads of the processes ``tree``
    (a thread that ends while it is read is left out)."""
    out = {}
    for pid, st in tree.items():
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                    out["%d:%s:%s" % (pid, st[1], tid)] = int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


def _cpu():
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    total = sum(vals[:8])
    return [total - vals[3] - (vals[4] if len(vals) > 4 else 0), total]


def _net(pid):
    rx = tx = 0
    try:
        with open("/proc/%d/net/dev" % pid) as f:
            lines = f.read().splitlines()[2:]
    except OSError:
        return None
    for line in lines:
        name, _, rest = line.partition(":")
        name = name.strip()
        if not rest or name == "lo" or name.startswith(("ifb", "flifb", "flprb")):
            continue
        cols = rest.split()
        rx += int(cols[0])
        tx += int(cols[8])
    return [rx, tx]


def _inodes(pids):
    out = []
    for pid in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if t.startswith("socket:[") and t[8:-1].isdigit():
                out.append(int(t[8:-1]))
    return out


def _ss():
    try:
        cp = subprocess.run(["ss", "-tinHe", "state", "established"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return cp.stdout if cp.returncode == 0 else None


def sample(pids, hz):
    """One raw sample (the dict written as a line), or None when no PID is alive."""
    tree = _tree(pids)
    if not tree:
        return None
    live = [p for p in pids if p in tree]
    return {
        "ts": time.time(), "mono": time.monotonic(), "hz": hz, "cpu": _cpu(),
        "procs": {"%d:%s" % (p, st[1]): [st[2], st[3] * os.sysconf("SC_PAGE_SIZE")] for p, st in tree.items()},
        "delay": _delay(tree), "net": _net(live[0]), "ino": sorted(set(_inodes(list(tree)))), "ss": _ss(),
    }


def main(argv=None):
    """The node sampler's command line: ``--pids 4242,4243 --out FILE --interval 1.0
    --until EPOCH_S``.

    Appends one JSON line a sample to ``--out`` (its folder made; the record schema is
    the module docstring's: ``ts``, ``mono``, ``hz``, ``cpu``, ``procs``, ``delay``,
    ``net``, ``ino``, ``ss``), every ``--interval`` seconds on a monotonic schedule (a late
    sample does not shift the next ones). Returns 0 when no PID of ``--pids`` or their
    descendants is alive, or at ``--until`` (unix s); SIGTERM exits 0 too. A bad
    argument is argparse's usage error (exit 2); a ``--out`` that cannot be opened
    raises OSError (a traceback on the node's stderr, which nobody reads: the
    controller then finds no samples)."""
    ap = argparse.ArgumentParser(prog="faultlab-nodesampler")
    ap.add_argument("--pids", required=True, help="comma-separated PIDs on this node")
    ap.add_argument("--out", required=True, help="JSONL file to append to")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--until", type=float, required=True, help="epoch seconds: end by then at the latest")
    a = ap.parse_args(argv)
    pids = [int(x) for x in a.pids.split(",") if x]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    hz = os.sysconf("SC_CLK_TCK")
    t0 = time.monotonic()
    k = 0
    with open(a.out, "a") as f:
        while time.time() < a.until:
            rec = sample(pids, hz)
            if rec is None:
                return 0
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            f.flush()
            k += 1
            time.sleep(max(0.0, t0 + k * a.interval - time.monotonic()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
