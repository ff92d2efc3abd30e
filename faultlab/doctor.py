"""``faultlab doctor``: which fault types a node supports, and why not.

Every check is read-only or works on throw-away objects of its own (an ifb device
``flprb<hex>`` created in the node's network namespace under its own lease and deleted
at once: ``faultlab.lifecycle.probedev``), so the doctor never touches state it did
not create.
"""

from __future__ import annotations

import sys

from faultlab.errors import NodeError
from faultlab.injectors import FAULT_TYPES, cgroups
from faultlab.lifecycle.probedev import probe_ifb
from faultlab.nodes import LEASE_HERE, Node


def _try_qdiscs(node: Node) -> dict[str, str | None]:
    """Try tbf, htb, netem and an ingress redirect on a throw-away probe device
    (``faultlab.lifecycle.probedev``: under its own lease, deleted at once).
    Returns kind -> None (works) or the error line."""

    out: dict[str, str | None] = {}
    try:
        with probe_ifb(node) as (dev, err):
            if err:
                return {"ifb": err, "tbf": err, "htb": err, "netem": err}
            out["ifb"] = None
            for kind, args in (
                ("tbf", ["tbf", "rate", "10mbit", "burst", "16kb", "latency", "50ms"]),
                ("htb", ["htb", "default", "0"]),
                ("netem", ["netem", "delay", "1ms"]),
            ):
                cp = node.run(["tc", "qdisc", "add", "dev", dev, "root", "handle", "faf0:", *args], scope="net")
                out[kind] = None if cp.returncode == 0 else (cp.stderr.strip() or f"rc={cp.returncode}")
                node.run(["tc", "qdisc", "del", "dev", dev, "root"], scope="net")
    except NodeError as e:  # no lease for the probe device: none is made
        msg = f"no probe device tried: {e}"
        return {"ifb": msg, "tbf": msg, "htb": msg, "netem": msg}
    return out


def _cgroup_facts(node: Node, controller: str) -> tuple[object, str | None, bool]:
    """(hierarchy or None, where faults of ``controller`` nest, writable there)."""

    h = cgroups.find_hierarchy(node, controller)
    if h is None:
        return None, None, False
    init = getattr(node, "init_pid", 0)
    if init:  # docker: faults nest in the container's own cgroup (on the docker host)
        rel = cgroups.cgroup_of(node, init, h)
        where = f"{h.mount}{rel}" if rel else None
        return h, where, bool(where) and node.writable(where)
    return h, h.mount, node.writable(h.mount)


def _python_facts(node: Node) -> dict:
    """Python version, NVML and ``sys.remote_exec`` where the ranks run: this process
    for nodes on this host; for a remote node the interpreter the ranks are started
    with there (``sys.executable``, faultlab.benchmarks.launch)."""
    if node.lease_host() == LEASE_HERE:
        try:
            import pynvml  # noqa: F401  (nvidia-ml-py: optional, only whether it is there is asked)

            nvml = True
        except ImportError:
            nvml = False
        return {"python": sys.version.split()[0], "nvml": nvml, "sys_remote_exec": hasattr(sys, "remote_exec")}
    code = ("import sys, importlib.util as u; print(sys.version.split()[0]); print(u.find_spec('pynvml') is not None);"
            " print(hasattr(sys, 'remote_exec'))")
    cp = node.run([sys.executable, "-c", code], timeout=30)
    lines = cp.stdout.split()
    if cp.returncode != 0 or len(lines) != 3:
        return {"python": None, "python_error": f"{sys.executable} does not run there ({(cp.stderr.strip() or 'rc=' + str(cp.returncode))[:120]})",
                "nvml": False, "sys_remote_exec": False}
    return {"python": lines[0], "nvml": lines[1] == "True", "sys_remote_exec": lines[2] == "True"}


def diagnose(node: Node) -> dict:
    """Check ``node`` (any backend: local, netns, docker, ssh); returns ``{"node",
    "facts": {...}, "types": {row: {"ok": bool, "why": str}}}``, one row or more per
    registered fault type (its ``support``). Never raises for a missing tool or
    privilege: that is a finding. Raises NodeError when the node cannot be reached at
    all (an ssh node unreachable, its host key refused, sudo refused)."""
    facts, checks = node_facts(node)
    t: dict[str, dict] = {}
    for cls in FAULT_TYPES.values():
        for name, (ok, why) in cls.support(checks).items():
            t[name] = {"ok": bool(ok), "why": why}
    return {"node": node.describe(), "facts": facts, "types": t}


def node_facts(node: Node) -> tuple[dict, dict]:
    """(the facts the report shows, the facts each fault type's ``support`` reads).

    The second holds the first and: ``root`` (CAP_NET_ADMIN), ``tc``, ``ip``,
    ``qdiscs`` (kind -> None when it works, else the error line), ``cgroup_cpu`` /
    ``cgroup_io`` (``vN at PATH`` or None), ``cgroup_cpu_at`` / ``cgroup_io_at`` (where
    faults nest), ``cgroup_cpu_writable`` / ``cgroup_io_writable``, ``nvidia_smi``,
    ``python`` (of the ranks; None with ``python_error``), ``nvml``,
    ``sys_remote_exec``."""
    facts: dict = {"node": node.describe(), "backend": node.kind}
    if hasattr(node, "check_access"):
        facts["access"] = node.check_access()  # ssh: connects (pinned key) and checks sudo -n
    root = node.has_net_admin()
    facts["cap_net_admin"] = root
    facts["tc"] = node.has_program("tc")
    facts["ip"] = node.has_program("ip")
    facts["qdiscs"] = _try_qdiscs(node) if (root and facts["tc"] and facts["ip"]) else {}
    cpu, cpu_at, cpu_w = _cgroup_facts(node, "cpu")
    blk, blk_at, blk_w = _cgroup_facts(node, "blkio")
    facts["cgroup_cpu"] = f"v{cpu.version} at {cpu_at}" if cpu else None
    facts["cgroup_io"] = f"v{blk.version} at {blk_at}" if blk else None
    facts["nvidia_smi"] = node.has_program("nvidia-smi")
    facts.update(_python_facts(node))
    checks = {**facts, "root": root, "cgroup_cpu_at": cpu_at, "cgroup_cpu_writable": bool(cpu_w),
              "cgroup_io_at": blk_at, "cgroup_io_writable": bool(blk_w), "python_error": facts.get("python_error")}
    return facts, checks
