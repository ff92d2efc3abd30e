"""What a fault's ``verified`` flag means, in words: which measurement was compared
with which bound (the evidence dict an injector's ``verify()`` returns).

``verify_text(evidence)`` -> ``"verified: ..."`` or ``"NOT verified: ..."``, one
line, naming the measured quantity, its value and the bound it was checked against.
"""

from __future__ import annotations


def _mbit(v) -> str:
    return "?" if v is None else f"{v / 1e6:.1f}"


def _nic(v: dict) -> str | None:
    if "tc_egress" not in v:
        return None
    parts = [f"tc cap qdiscs {'in place' if v.get('tc_egress') and v.get('tc_ingress') else 'MISSING'} on the interface and its ifb"]
    cap = v.get("cap_bit_per_s")
    if "ingress_measured_bit_per_s" in v and cap:
        parts.append(f"a TCP probe to/from the node got {_mbit(v['ingress_measured_bit_per_s'])} Mbit/s in and "
                     f"{_mbit(v.get('egress_measured_bit_per_s'))} out, checked <= {_mbit(cap * 1.15)} Mbit/s "
                     f"(the {_mbit(cap)} Mbit/s cap + 15%; training traffic shares the link)")
    elif cap:
        parts.append(f"cap {_mbit(cap)} Mbit/s not measured (no probe peer)")
    return "; ".join(parts)


def _cpu(v: dict) -> str | None:
    if "cpu_stat" not in v:
        return None
    st = v["cpu_stat"] or {}
    return (f"{len(v.get('pids_in_cgroup') or [])} PID(s) in the fault's cgroup; its CPU quota throttled them in "
            f"{st.get('nr_throttled', 0)} of {st.get('nr_periods', 0)} CFS periods (checked > 0)")


def _pause(v: dict) -> str | None:
    if "stopped_seen" not in v:
        return None
    return f"target seen stopped (state T) {'within' if v['stopped_seen'] else 'NOT within'} {v.get('samples', 0)} samples of /proc/PID/stat"


def _io(v: dict) -> str | None:
    if "limits" not in v:
        return None
    return f"{len(v.get('pids_in_cgroup') or [])} PID(s) in the fault's cgroup; throttle read back on {v.get('device')}: {v['limits']} (checked = requested)"


def _stress(v: dict) -> str | None:
    if "workers" not in v:
        return None
    if "memcpy_gbps_during" in v:
        return (f"{len(v['workers'])} memory-bandwidth worker(s) running; memcpy {v.get('memcpy_gbps_before')} -> "
                f"{v['memcpy_gbps_during']} GB/s")
    busy = sum(1 for r in (v.get("worker_cpu_rate") or {}).values() if (r or 0) > 0.05)
    return f"{busy} of {len(v['workers'])} pinned stress worker(s) seen busy (> 5% of a CPU)"


def _gc(v: dict) -> str | None:
    if "ack_s" not in v and "error" not in v:
        return None
    return f"the in-workload agent reported a GC burst after {v['ack_s']}s" if "ack_s" in v else f"agent: {v.get('error')}"


def _gpu(v: dict) -> str | None:
    if "gpu_index" not in v:
        return None
    after = v.get("after") or {}
    if "lock_range_mhz" in v:
        return f"GPU {v['gpu_index']} SM clock read back {after.get('clock_sm_mhz')} MHz (checked <= {v['lock_range_mhz'][1]} MHz + tolerance)"
    return f"GPU {v['gpu_index']} power limit read back {after.get('power_limit_w')} W (checked = {v.get('requested_w')} W)"


DESCRIBERS = (_nic, _cpu, _pause, _io, _stress, _gc, _gpu)


def verify_text(v: dict | None) -> str:
    """One line: ``verified: WHAT WAS MEASURED AGAINST WHAT`` (or ``NOT verified:``)."""
    v = v or {}
    head = "verified" if v.get("ok") else "NOT verified"
    for describe in DESCRIBERS:
        text = describe(v)
        if text:
            return f"{head}: {text}"
    return f"{head}: no measurement recorded"
