"""``faultlab doctor``: which fault types a node supports, and why not.

Every check is read-only or works on throw-away objects of its own (an ifb device
``flprb<hex>`` created in the node's network namespace and deleted at once), so the
doctor never touches state it did not create.
"""

from __future__ import annotations

import secrets
import shutil
import sys

from faultlab.nodes import Node


def _try_qdiscs(node: Node) -> dict[str, str | None]:
    """Try tbf, htb, netem and an ingress redirect on a throw-away ifb device.
    Returns kind -> None (works) or the error line."""
    dev = "flprb" + secrets.token_hex(4)
    out: dict[str, str | None] = {}
    add = node.run(["ip", "link", "add", dev, "type", "ifb"], scope="net")
    if add.returncode != 0:
        msg = add.stderr.strip() or "cannot create an ifb device"
        return {"ifb": msg, "tbf": msg, "htb": msg, "netem": msg}
    out["ifb"] = None
    try:
        for kind, args in (
            ("tbf", ["tbf", "rate", "10mbit", "burst", "16kb", "latency", "50ms"]),
            ("htb", ["htb", "default", "0"]),
            ("netem", ["netem", "delay", "1ms"]),
        ):
            cp = node.run(["tc", "qdisc", "add", "dev", dev, "root", "handle", "faf0:", *args], scope="net")
            out[kind] = None if cp.returncode == 0 else (cp.stderr.strip() or f"rc={cp.returncode}")
            node.run(["tc", "qdisc", "del", "dev", dev, "root"], scope="net")
    finally:
        node.run(["ip", "link", "del", dev], scope="net")
    return out


def diagnose(node: Node) -> dict:
    """Check ``node``; returns ``{"node", "facts": {...}, "types": {type: {"ok": bool,
    "why": str}}}``. Never raises for a missing tool: that is a finding."""
    from faultlab.injectors import cgroups

    facts: dict = {"node": node.describe()}
    root = node.has_net_admin()
    facts["cap_net_admin"] = root
    facts["tc"] = node.has_program("tc")
    facts["ip"] = node.has_program("ip")
    q = _try_qdiscs(node) if (root and facts["tc"] and facts["ip"]) else {}
    facts["qdiscs"] = q
    cpu = cgroups.find_hierarchy(node, "cpu")
    blk = cgroups.find_hierarchy(node, "blkio")
    facts["cgroup_cpu"] = f"v{cpu.version} at {cpu.mount}" if cpu else None
    facts["cgroup_io"] = f"v{blk.version} at {blk.mount}" if blk else None
    smi = shutil.which("nvidia-smi")
    facts["nvidia_smi"] = smi
    try:
        import pynvml  # noqa: F401  (nvidia-ml-py)

        facts["nvml"] = True
    except ImportError:
        facts["nvml"] = False
    facts["python"] = sys.version.split()[0]
    facts["sys_remote_exec"] = hasattr(sys, "remote_exec")

    t: dict[str, dict] = {}

    def put(name, ok, why):
        t[name] = {"ok": bool(ok), "why": why}

    if not root:
        net_why = "no CAP_NET_ADMIN: run as root"
    elif not facts["tc"]:
        net_why = "tc not found: apt-get install iproute2"
    elif q.get("tbf") or q.get("ifb"):
        net_why = f"tbf/ifb failed: {q.get('tbf') or q.get('ifb')}"
    else:
        net_why = "tc tbf + ifb work (rate caps both ways; --peer via htb " + ("works)" if q.get("htb") is None else f"fails: {q['htb']})")
    put("nic-slow", root and facts["tc"] and not q.get("tbf") and not q.get("ifb"), net_why)
    put("nic-slow --delay/--loss", root and q.get("netem") is None and "netem" in q,
        "netem works" if q.get("netem") is None and "netem" in q else f"no netem: {q.get('netem', 'not checked: ' + net_why)}")
    put("cpu-contention", cpu is not None and root, f"cpu controller {facts['cgroup_cpu']}" if cpu and root else ("no usable cpu cgroup controller" if not cpu else "needs root to write cgroups"))
    put("cpu-contention --mode stress", True, "busy workers pinned with sched_setaffinity: no privileges needed")
    put("process-pause", True, "SIGSTOP/SIGCONT: root, or the target's own user")
    put("io-slow", blk is not None and root, f"io controller {facts['cgroup_io']}" if blk and root else ("no usable blkio/io cgroup controller" if not blk else "needs root"))
    put("mem-bw", True, "memory streaming workers: no privileges needed")
    gpu_ok = bool(smi) and root
    put("gpu-clock-cap", gpu_ok, f"nvidia-smi at {smi}" if gpu_ok else ("nvidia-smi not found (no NVIDIA driver)" if not smi else "needs root"))
    put("gpu-power-cap", gpu_ok, t["gpu-clock-cap"]["why"])
    put("gc-storm", True, "through the in-workload agent (faultlab.benchmarks.agent)" + ("; sys.remote_exec available" if facts["sys_remote_exec"] else f"; sys.remote_exec needs Python >= 3.14 in the target (this is {facts['python']})"))
    return {"node": node.describe(), "facts": facts, "types": t}
