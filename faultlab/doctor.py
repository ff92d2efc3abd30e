"""``faultlab doctor``: which fault types a node supports, and why not.

Every check is read-only or works on throw-away objects of its own (an ifb device
``flprb<hex>`` created in the node's network namespace under its own lease and deleted
at once: ``faultlab.lifecycle.probedev``), so the doctor never touches state it did
not create.
"""

from __future__ import annotations

import sys

from faultlab.errors import NodeError
from faultlab.nodes import LEASE_HERE, Node


def gc_storm_why(facts: dict) -> str:
    """How gc-storm reaches a rank here, in words: only through the in-workload agent
    (``faultlab.benchmarks.agent``, started with the workload). Starting the agent in
    a running interpreter through ``sys.remote_exec`` is not built
    (``injectors.gc.remote_exec_support`` says why for this node's Python), so it is
    never reported as available. ``facts``: the node's ``python`` and
    ``sys_remote_exec`` (from ``_python_facts``)."""
    from faultlab.injectors.gc import remote_exec_support

    why_not = remote_exec_support(facts.get("python")) if facts.get("sys_remote_exec") else (
        f"sys.remote_exec needs Python >= 3.14 in the target (this is {facts.get('python')})")
    if why_not is None:
        return "through the in-workload agent (faultlab.benchmarks.agent), or started in a running rank through sys.remote_exec"
    return f"through the in-workload agent (faultlab.benchmarks.agent) only; a rank without it: {why_not}"


def _try_qdiscs(node: Node) -> dict[str, str | None]:
    """Try tbf, htb, netem and an ingress redirect on a throw-away probe device
    (``faultlab.lifecycle.probedev``: under its own lease, deleted at once).
    Returns kind -> None (works) or the error line."""
    from faultlab.lifecycle.probedev import probe_ifb

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
    from faultlab.injectors import cgroups

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
            import pynvml  # noqa: F401  (nvidia-ml-py)

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
    "facts": {...}, "types": {type: {"ok": bool, "why": str}}}``. Never raises for a
    missing tool or privilege: that is a finding. Raises NodeError when the node
    cannot be reached at all (an ssh node unreachable, its host key refused, sudo
    refused)."""
    facts: dict = {"node": node.describe(), "backend": node.kind}
    if hasattr(node, "check_access"):
        facts["access"] = node.check_access()  # ssh: connects (pinned key) and checks sudo -n
    root = node.has_net_admin()
    facts["cap_net_admin"] = root
    facts["tc"] = node.has_program("tc")
    facts["ip"] = node.has_program("ip")
    q = _try_qdiscs(node) if (root and facts["tc"] and facts["ip"]) else {}
    facts["qdiscs"] = q
    cpu, cpu_at, cpu_w = _cgroup_facts(node, "cpu")
    blk, blk_at, blk_w = _cgroup_facts(node, "blkio")
    facts["cgroup_cpu"] = f"v{cpu.version} at {cpu_at}" if cpu else None
    facts["cgroup_io"] = f"v{blk.version} at {blk_at}" if blk else None
    smi = node.has_program("nvidia-smi")
    facts["nvidia_smi"] = smi
    facts.update(_python_facts(node))
    gc_why = gc_storm_why(facts)
    if facts["python"] is None:
        gc_why = f"no Python for the ranks: {facts['python_error']}"

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
    put("cpu-contention", cpu is not None and cpu_w, f"cpu controller {facts['cgroup_cpu']}" if cpu and cpu_w else (
        "no usable cpu cgroup controller" if not cpu else f"cannot write {cpu_at or 'the cpu cgroup'}: needs root (or sudo) and a writable cgroup"))
    put("cpu-contention --mode stress", True, "busy workers pinned with sched_setaffinity: no privileges needed")
    put("process-pause", True, "SIGSTOP/SIGCONT: root, or the target's own user")
    put("io-slow", blk is not None and blk_w, f"io controller {facts['cgroup_io']}" if blk and blk_w else (
        "no usable blkio/io cgroup controller" if not blk else f"cannot write {blk_at or 'the io cgroup'}: needs root (or sudo) and a writable cgroup"))
    put("mem-bw", True, "memory streaming workers: no privileges needed")
    gpu_ok = bool(smi) and root
    put("gpu-clock-cap", gpu_ok, "nvidia-smi found" if gpu_ok else ("nvidia-smi not found (no NVIDIA driver)" if not smi else "needs root"))
    put("gpu-power-cap", gpu_ok, t["gpu-clock-cap"]["why"])
    put("gc-storm", facts["python"] is not None, gc_why)
    return {"node": node.describe(), "facts": facts, "types": t}
