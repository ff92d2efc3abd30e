"""``nic-slow``: a slow NIC or a slow link, both directions (Linux tc).

Mechanism (iproute2's tc-tbf(8), tc-htb(8), tc-netem(8), tc-u32(8), tc-mirred(8)):

- egress: the interface's root qdisc becomes faultlab's, with a handle of this
  fault's own (``fXXX:``, allocated at probe so no two faultlab faults on this host hold
  the same one; see ``allocate_handles``): ``tbf`` for a rate cap alone; ``netem`` (delay, jitter, loss, and its
  own ``rate``) when any of those is asked for. For a *slow link* (``--peer ADDR``)
  the root is ``htb`` with ``default 0`` (unclassified traffic is not shaped) and one
  class ``fXXX:1`` that a u32 filter on the destination address feeds; the netem
  qdisc, if any, hangs below that class with handle ``eXXX:``.
- ingress: an ``ingress`` qdisc on the interface with a u32 filter (all traffic, or
  only traffic *from* the peer) that redirects packets (``mirred egress redirect``)
  into an ifb device ``flifb<hex>`` faultlab creates for this fault; that device's
  root is the same tbf/netem.

Delay and loss apply in each direction: a 20 ms ``--delay`` adds 40 ms to the RTT.
``netem`` is a kernel module (sch_netem) that some kernels lack: before planning
netem, the probe tries it on a throw-away ifb device of its own and refuses with a
clear message when the kernel answers "Specified qdisc kind is unknown".

Ownership: inject refuses (``Refused``) when the interface's root qdisc is not the
kernel default (handle ``0:``) or it already has an ingress/clsact qdisc. With
``force=True`` a foreign root qdisc of a kind faultlab can rebuild from ``tc -j``
(tbf, pfifo, bfifo) is replaced and put back with the same handle and parameters on
revert (the kernel rounds a tbf burst to its clock, so the check after revert allows
1%); any other foreign root (htb, prio, fq_codel, ...) is refused even then, since
its classes, filters or defaults cannot be restored faithfully. ``tc qdisc del ... root handle
fXXX:`` itself refuses to delete a root qdisc with another handle, and the ingress
qdisc is deleted only while its redirect points at this fault's ifb device.

Severity: ``1e9 / rate`` (1.0 for a 1 Gbit/s cap, 20 for 50 Mbit/s), plus the added
round-trip delay in ms / 10, plus the loss in percent; larger is worse.
"""

from __future__ import annotations

import ipaddress
import os
import re
import json

from faultlab.errors import BadInput, NodeError, Refused
from faultlab.nodes import Node
from faultlab.probe import measure_throughput
from faultlab.units import parse_duration, parse_rate
from faultlab.injectors.base import Cmd, Injector, Plan
from faultlab.injectors.params import Param
from faultlab.injectors.registry import register
from faultlab.lifecycle.hostview import host_view
from faultlab.lifecycle.lease import load_leases
from faultlab.lifecycle.probedev import probe_ifb
from faultlab.timefmt import when

# Each fault owns its tc handles: root "fXXX:", netem child "eXXX:". XXX is
# *allocated* at probe (``allocate_handles``): the first 3 hex digits of the fault id
# when free, else the next free value, where taken means named by the revert
# commands of any faultlab lease record or live watchdog on this host. Two faults in
# force at once (or one reverted and one whose watchdog may still fire late) therefore
# never share a handle, and a stale revert of one cannot delete the other's qdisc;
# with all 4096 taken, inject refuses. The handle is recorded in the plan (facts).
HANDLE_RE = re.compile(r"\bhandle [ef]([0-9a-f]{3}):")


#: a root qdisc handle faultlab reserves for its faults (``fXXX:``)
FAULT_HANDLE = re.compile(r"^f([0-9a-f]{3}):$")


def fault_handles(fault_id: str) -> tuple[str, str]:
    """(root handle, child handle) a fault prefers: ``("f3a9:", "e3a9:")`` for
    ``nic-3a9c1e``; ``allocate_handles`` picks the one it really gets."""
    h = fault_id.split("-")[-1][:3]
    return f"f{h}:", f"e{h}:"


def taken_handles(lease_lines: list[str]) -> set[str]:
    """The 3-hex-digit handle numbers named (``handle fXXX:`` / ``eXXX:``) in the
    given revert command lines."""
    return {m.group(1) for line in lease_lines for m in HANDLE_RE.finditer(line)}


def host_revert_lines(node: Node) -> list[str]:
    """Every revert command line faultlab holds on this lease host: in the lease
    records of ``node``'s folder and in the faults of the host view of root and this
    user (records, and the argv of their own watchdogs, which keep their commands even
    when a record is lost).

    Another user's process that only looks like a watchdog (``hostview``: no record of
    its user names it), or another user's fault, reserves nothing: network objects are
    root's (``hostview._may_claim``)."""

    lines = []
    for le in load_leases(node):
        lines += [str(x) for x in le.record.get("revert", [])]
    for v in _trusted_faults(host_view(objects=False)[0]):
        lines += v.revert_lines()
    return lines


def _trusted_faults(views: list) -> list:
    """The faults of ``views`` (hostview.FaultView) of root or of this user."""
    return [v for v in views if v.uid in (0, os.geteuid())]


def allocate_handles(fault_id: str, taken: set[str]) -> tuple[str, str]:
    """The (root, child) handles of ``fault_id``: its preferred number when not in
    ``taken``, else the next free one (mod 4096). Raises Refused when none is free."""
    start = int(fault_handles(fault_id)[0][1:4], 16)
    for k in range(4096):
        h = f"{(start + k) % 4096:03x}"
        if h not in taken:
            return f"f{h}:", f"e{h}:"
    raise Refused("all 4096 faultlab tc handles are held by faults in force on this host", field="--type",
                  fix="revert some (faultlab status, faultlab revert --all)")


# Revert of the ingress qdisc only when its redirect still points at this fault's ifb
# ($1 interface, $2 ifb): the ingress qdisc has the fixed handle ffff:, so ownership is
# told by the filter.
DEL_INGRESS_SH = ('tc filter show dev "$1" parent ffff: 2>/dev/null | grep -q "device $2)" '
                  '&& tc qdisc del dev "$1" handle ffff: ingress; exit 0')
# The ingress qdisc and its redirect in one process ($1 interface, the rest the filter's
# arguments): the revert knows the qdisc as ours only by its redirect, so a controller
# killed between two separate commands left an ingress qdisc with no filter that no
# revert would touch (chaos, seed 7). The controller's death does not stop this shell;
# a filter that fails takes its qdisc with it (nothing half-applied).
ADD_INGRESS_SH = ('dev="$1"; shift; tc qdisc add dev "$dev" handle ffff: ingress || exit 1; '
                  'tc filter add dev "$dev" parent ffff: "$@" || { tc qdisc del dev "$dev" handle ffff: ingress; exit 1; }')
TBF_LATENCY = "100ms"
#: the lowest rate cap (bit/s) tbf keeps
MIN_RATE_BIT_PER_S = 8000
RESTORABLE = frozenset({"tbf", "pfifo", "bfifo"})


def _mbit(v) -> str:
    return "?" if v is None else f"{v / 1e6:.1f}"


def tc_rate(bit_per_s: float) -> str:
    """``bit_per_s`` as tc writes it (integer ``bit``)."""
    return f"{int(round(bit_per_s))}bit"


def tbf_burst_bytes(bit_per_s: float) -> int:
    """Bucket size: 5 ms of traffic at the cap, at least 16 KiB (above a 9000-byte MTU
    and several full-size segments, so the cap is kept without dropping whole GSO
    bursts)."""
    return max(16 * 1024, int(bit_per_s / 8 * 0.005))


def parse_loss(text, field: str = "--loss") -> float:
    """``"1%"`` or ``"0.5%"`` -> percent (float in (0, 100]). Raises BadInput."""
    s = str(text).strip()
    if not s.endswith("%"):
        raise BadInput(f"{text!r} has no % sign", field=field, fix="write e.g. 1% or 0.5%")
    try:
        v = float(s[:-1])
    except ValueError:
        raise BadInput(f"{text!r} is not a percentage", field=field, fix="write e.g. 1%") from None
    if not (0 < v <= 100):
        raise BadInput(f"{text!r} is outside (0%, 100%]", field=field, fix="write e.g. 1%")
    return v


def parse_delay(text, field: str = "--delay") -> float:
    """A netem delay or jitter in seconds (at least 10 us). Raises BadInput."""
    return parse_duration(text, field, min_s=1e-5)


def parse_peer(text, field: str = "--peer") -> str:
    """An IPv4 address in its normal form. Raises BadInput."""
    try:
        return str(ipaddress.IPv4Address(str(text).strip()))
    except ValueError:
        raise BadInput(f"{text!r} is not an IPv4 address", field=field, fix="give the peer's address, e.g. 10.0.0.2") from None


@register
class NicSlow(Injector):
    """Slow ``iface`` of ``node`` in both directions.

    Parameters (any combination, at least one): ``rate_bit_per_s`` (bit/s cap),
    ``delay_s`` and ``jitter_s`` (seconds added each way, netem), ``loss_pct``
    (percent, netem). ``peer``: an IPv4 address; only traffic to and from it is slowed
    (a slow link). ``probe_peer`` (a Node) and ``probe_peer_addr``: when given,
    ``verify`` measures TCP throughput between the node and that peer in both
    directions. ``force``: replace a foreign classless root qdisc and restore it after.

    Raises BadInput for a missing interface or bad parameters, Refused for foreign or
    existing qdiscs or a kernel without netem.
    """

    type = "nic-slow"
    job_wide = True
    PARAMS = (
        Param("rate", "the cap, 50mbit (bits/s) or 6mb (bytes/s); one vocabulary for every rate option", "RATE", parse_rate,
              bounds=(MIN_RATE_BIT_PER_S, None)),
        Param("delay", "added latency (netem), e.g. 20ms", "DURATION", parse_delay, bounds=(1e-5, None)),
        Param("jitter", "latency jitter (netem), e.g. 5ms; at most --delay", "DURATION", parse_delay, bounds=(1e-5, None)),
        Param("loss", "packet loss (netem), e.g. 1%", "PERCENT", parse_loss, bounds=(0, 100), open_low=True),
        Param("peer", "slow only traffic to/from this peer IPv4 address (a slow link)", "IPV4", parse_peer),
    )
    target_help = "interface (default: the node's only one)"
    color = "#e4572e"

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        if not any(opts.get(k) for k in ("--rate", "--delay", "--loss")):
            raise BadInput("missing for nic-slow", field="--rate", fix="give --rate (e.g. 50mbit), --delay or --loss")
        given = {p.name: p.read(opts, cls.type) if opts.get(p.option) else None for p in cls.PARAMS if p.name != "peer"}
        return cls(
            node,
            given["rate"],
            iface=target,
            delay_s=given["delay"],
            jitter_s=given["jitter"],
            loss_pct=given["loss"],
            peer=opts.get("--peer"),
            fault_id=fault_id,
            force=force,
        )

    @classmethod
    def support(cls, node: dict) -> dict[str, tuple[bool, str]]:
        q = node["qdiscs"]
        if not node["root"]:
            net_why = "no CAP_NET_ADMIN: run as root"
        elif not node["tc"]:
            net_why = "tc not found: apt-get install iproute2"
        elif q.get("tbf") or q.get("ifb"):
            net_why = f"tbf/ifb failed: {q.get('tbf') or q.get('ifb')}"
        else:
            net_why = "tc tbf + ifb work (rate caps both ways; --peer via htb " + ("works)" if q.get("htb") is None else f"fails: {q['htb']})")
        netem = q.get("netem") is None and "netem" in q
        return {
            cls.type: (node["root"] and node["tc"] and not q.get("tbf") and not q.get("ifb"), net_why),
            f"{cls.type} --delay/--loss": (node["root"] and netem,
                                           "netem works" if netem else f"no netem: {q.get('netem', 'not checked: ' + net_why)}"),
        }

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        v = evidence
        parts = [f"tc cap qdiscs {'in place' if v['tc_egress'] and v.get('tc_ingress') else 'MISSING'} on the interface and its ifb"]
        cap = v.get("cap_bit_per_s")
        if "ingress_measured_bit_per_s" in v and cap:
            parts.append(f"a TCP probe to/from the node got {_mbit(v['ingress_measured_bit_per_s'])} Mbit/s in and "
                         f"{_mbit(v.get('egress_measured_bit_per_s'))} out, checked <= {_mbit(cap * 1.15)} Mbit/s "
                         f"(the {_mbit(cap)} Mbit/s cap + 15%; training traffic shares the link)")
        elif cap:
            parts.append(f"cap {_mbit(cap)} Mbit/s not measured (no probe peer)")
        return "; ".join(parts)

    def __init__(self, node: Node, rate_bit_per_s: float | None, iface: str | None = None, *, delay_s: float | None = None,
                 jitter_s: float | None = None, loss_pct: float | None = None, peer: str | None = None,
                 probe_peer: Node | None = None, probe_peer_addr: str | None = None, fault_id: str | None = None, force: bool = False):
        super().__init__(node, fault_id)
        if rate_bit_per_s is not None and rate_bit_per_s < MIN_RATE_BIT_PER_S:
            raise BadInput(f"{rate_bit_per_s} bit/s is below 8kbit", field="--rate", fix="give at least 8kbit")
        if rate_bit_per_s is None and delay_s is None and loss_pct is None:
            raise BadInput("nothing to slow", field="--rate", fix="give --rate, --delay or --loss")
        if jitter_s is not None and delay_s is None:
            raise BadInput("jitter needs a delay", field="--jitter", fix="give --delay too, e.g. --delay 20ms --jitter 5ms")
        if jitter_s is not None and delay_s is not None and jitter_s > delay_s:
            raise BadInput(f"jitter {jitter_s * 1e3:g}ms exceeds the delay {delay_s * 1e3:g}ms", field="--jitter", fix="give a jitter at most the delay")
        if peer is not None:
            peer = parse_peer(peer)
        self.rate_bit_per_s = float(rate_bit_per_s) if rate_bit_per_s is not None else None
        self.delay_s, self.jitter_s, self.loss_pct = delay_s, jitter_s, loss_pct
        self.peer = peer
        self.iface = iface or node.iface
        self.probe_peer = probe_peer
        self.probe_peer_addr = probe_peer_addr
        self.force = force
        self.ifb = "flifb" + self.fault_id.split("-")[-1][:8]
        self.handle, self.child_handle = fault_handles(self.fault_id)

    @property
    def netem(self) -> bool:
        return self.delay_s is not None or self.loss_pct is not None

    @property
    def target(self) -> str:
        t = self.iface or "?"
        return f"{t}->{self.peer}" if self.peer else t

    @property
    def params(self) -> dict:
        p = {"iface": self.iface, "direction": "both"}
        if self.rate_bit_per_s is not None:
            p["rate_bit_per_s"] = self.rate_bit_per_s
        if self.delay_s is not None:
            p["delay_s"] = self.delay_s
        if self.jitter_s is not None:
            p["jitter_s"] = self.jitter_s
        if self.loss_pct is not None:
            p["loss_pct"] = self.loss_pct
        if self.peer:
            p["peer"] = self.peer
        return p

    #: what ``severity`` measures, with its unit (the dataset card lists it per fault type)
    severity_unit = "score (1 Gbit/s over the rate cap + round-trip delay ms / 10 + loss %)"

    @property
    def severity(self) -> float:
        s = 1e9 / self.rate_bit_per_s if self.rate_bit_per_s else 0.0
        s += (2 * (self.delay_s or 0.0) * 1e3) / 10
        return s + (self.loss_pct or 0.0)

    # -- probe -----------------------------------------------------------------------
    def _links(self) -> list[str]:
        cp = self.node.run(["ip", "-j", "link", "show"], scope="net", check=True)
        return [link["ifname"] for link in json.loads(cp.stdout or "[]")]

    def _qdiscs(self, dev: str) -> list[dict]:
        cp = self.node.run(["tc", "-j", "-s", "qdisc", "show", "dev", dev], scope="net")
        if cp.returncode != 0:
            return []
        return json.loads(cp.stdout or "[]")

    def _root_raw(self, dev: str) -> dict:
        """The root qdisc of ``dev`` as ``tc -j -raw`` shows it (``{}`` when none): the
        kernel's own numbers (tbf: rate in bytes/s, ``burst_raw`` in scheduler ticks,
        ``limit`` in bytes), so it can be rebuilt exactly."""
        cp = self.node.run(["tc", "-j", "-raw", "qdisc", "show", "dev", dev, "root"], scope="net")
        rows = json.loads(cp.stdout or "[]") if cp.returncode == 0 else []
        q = next((r for r in rows if r.get("root")), {})
        return {"kind": q.get("kind"), "handle": q.get("handle"), "options": q.get("options", {})} if q else {}

    def _own_handle_msg(self, q: dict) -> str:
        """Why a root qdisc with faultlab's reserved handle blocks this inject: a
        faultlab fault in force (its watchdog ends it), or one whose lease is lost."""

        h = str(q.get("handle"))
        ws = [w for v in _trusted_faults(host_view(objects=False)[0]) for w in v.watchdogs
              if any(f"handle {h}" in ln and self.iface in ln for ln in w.lines)]
        where = f"{self.iface} on {self.node.name}"
        if ws:
            return (f"{where} has faultlab's own nic-slow qdisc {q.get('handle')} of fault {ws[0].fault_id} "
                    f"(its lease's watchdog, PID {ws[0].pid}, ends it at the latest at {when(ws[0].deadline_ts)})")
        return (f"{where} has faultlab's own nic-slow qdisc {q.get('kind')} {q.get('handle')} that no lease accounts for "
                f"(its lease record and watchdog are gone)")

    def _netem_supported(self) -> tuple[bool, str]:
        """Try netem on a throw-away probe device of our own in the node's namespace
        (``lifecycle/probedev.py``: under its own lease, deleted at once)."""

        with probe_ifb(self.node) as (dev, err):
            if err:
                return False, f"cannot create a probe ifb device: {err}"
            cp = self.node.run(["tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", "1ms"], scope="net")
            return cp.returncode == 0, cp.stderr.strip()

    def probe(self) -> dict:
        if not self.node.has_net_admin():
            raise Refused(
                f"no CAP_NET_ADMIN on node {self.node.name}: tc and ip would fail with EPERM (Operation not permitted)",
                field="--node", fix="run faultlab as root or with CAP_NET_ADMIN",
            )
        links = self._links()
        if not self.iface:
            cands = [n for n in links if n != "lo" and not n.startswith(("flifb", "flprb"))]
            if len(cands) != 1:
                raise BadInput(
                    f"node {self.node.name} has interfaces {', '.join(cands) or 'none'}",
                    field="--target", fix="name the interface to slow, e.g. --target eth1",
                )
            self.iface = cands[0]
        if self.iface not in links:
            raise BadInput(
                f"interface {self.iface!r} does not exist on node {self.node.name} (it has {', '.join(links)})",
                field="--target", fix="name an existing interface",
            )
        qd = self._qdiscs(self.iface)
        foreign_root = None

        mine = [le for le in load_leases(self.node) if le.record.get("fault_type") == self.type
                and le.record.get("node") == self.node.describe() and str(le.record.get("target", "")).split("->")[0] == self.iface]
        if mine:
            raise Refused(f"{self.iface} on {self.node.name} already has a faultlab nic-slow ({mine[0].fault_id})", field="--target", fix="revert it first: faultlab status / faultlab revert")
        for q in qd:
            if q.get("root") and FAULT_HANDLE.match(str(q.get("handle"))):
                raise Refused(self._own_handle_msg(q), field="--target",
                              fix="faultlab status shows it; faultlab revert or faultlab recover removes it")
            if q.get("root") and q.get("handle") != "0:":
                kind = q.get("kind")
                if not self.force:
                    raise Refused(
                        f"{self.iface} on {self.node.name} has a root qdisc faultlab did not create ({kind} {q.get('handle')})",
                        field="--target", fix="remove it yourself, pick another interface, or --force to replace it and restore it after",
                    )
                if kind not in RESTORABLE or len([x for x in qd if not x.get("root") and x.get("kind") not in ("ingress", "clsact")]):
                    raise Refused(
                        f"{self.iface} on {self.node.name} has a classful root qdisc ({kind} {q.get('handle')}) that faultlab could not restore exactly",
                        field="--force", fix="remove it yourself or pick another interface",
                    )
                foreign_root = self._root_raw(self.iface)
                restore_args(foreign_root)  # refuse now if it could not be rebuilt exactly
            if q.get("kind") in ("ingress", "clsact"):
                raise Refused(
                    f"{self.iface} on {self.node.name} has an {q.get('kind')} qdisc faultlab did not create",
                    field="--target", fix="remove it yourself or pick another interface",
                )
        if self.ifb in links:
            raise Refused(f"device {self.ifb} already exists on {self.node.name}", field="fault_id", fix="pick another fault id")
        if self.netem:
            ok, why = self._netem_supported()
            if not ok:
                raise Refused(
                    f"the kernel of node {self.node.name} has no netem qdisc ({why or 'unknown kind'}); delay, jitter and loss need it",
                    field="--delay" if self.delay_s is not None else "--loss",
                    fix="use --rate alone (tbf works), or a kernel with sch_netem",
                )
        self.handle, self.child_handle = allocate_handles(self.fault_id, taken_handles(host_revert_lines(self.node)))
        return {"iface": self.iface, "ifb": self.ifb, "qdiscs_before": qd, "foreign_root": foreign_root,
                "handle": self.handle, "child_handle": self.child_handle}

    # -- plan ------------------------------------------------------------------------
    def _leaf(self) -> list[str]:
        """The shaping qdisc's kind and arguments (tbf, or netem with its own rate)."""
        if not self.netem:
            r = self.rate_bit_per_s
            return ["tbf", "rate", tc_rate(r), "burst", str(tbf_burst_bytes(r)), "latency", TBF_LATENCY]
        args = ["netem"]
        if self.delay_s is not None:
            args += ["delay", f"{self.delay_s * 1e6:.0f}us"]
            if self.jitter_s is not None:
                args += [f"{self.jitter_s * 1e6:.0f}us", "distribution", "normal"]
        if self.loss_pct is not None:
            args += ["loss", f"{self.loss_pct:g}%"]
        if self.rate_bit_per_s is not None:
            args += ["rate", tc_rate(self.rate_bit_per_s)]
        args += ["limit", "10000"]
        return args

    def plan(self, facts: dict) -> Plan:
        dev, ifb = facts["iface"], facts["ifb"]
        self.handle = facts.get("handle", self.handle)
        self.child_handle = facts.get("child_handle", self.child_handle)
        leaf = self._leaf()
        inject: list[Cmd] = []
        revert: list[Cmd] = []
        if facts.get("foreign_root"):
            inject.append(Cmd(("tc", "qdisc", "del", "dev", dev, "root"), "net", "remove the foreign root (restored on revert)"))
        if self.peer is None:
            inject.append(Cmd(("tc", "qdisc", "add", "dev", dev, "root", "handle", self.handle, *leaf), "net", "egress"))
            match = ("match", "u32", "0", "0")
        else:
            ceil = tc_rate(self.rate_bit_per_s) if self.rate_bit_per_s else "100gbit"
            inject += [
                Cmd(("tc", "qdisc", "add", "dev", dev, "root", "handle", self.handle, "htb", "default", "0"), "net", "egress: only the peer's class is shaped"),
                Cmd(("tc", "class", "add", "dev", dev, "parent", self.handle, "classid", self.handle + "1", "htb", "rate", ceil, "ceil", ceil), "net"),
            ]
            if self.netem:
                inject.append(Cmd(("tc", "qdisc", "add", "dev", dev, "parent", self.handle + "1", "handle", self.child_handle, *self._netem_only()), "net"))
            inject.append(Cmd(("tc", "filter", "add", "dev", dev, "parent", self.handle, "protocol", "ip", "prio", "49", "u32",
                               "match", "ip", "dst", f"{self.peer}/32", "flowid", self.handle + "1"), "net", "traffic to the peer"))
            match = ("match", "ip", "src", f"{self.peer}/32")
        inject += [
            Cmd(("ip", "link", "add", ifb, "type", "ifb"), "net", "ifb device for ingress"),
            Cmd(("ip", "link", "set", ifb, "up"), "net"),
            Cmd(("tc", "qdisc", "add", "dev", ifb, "root", "handle", self.handle, *leaf), "net", "ingress shaping on the ifb"),
            Cmd(("sh", "-c", ADD_INGRESS_SH, "sh", dev, "protocol", "ip" if self.peer else "all", "prio", "49", "u32", *match,
                 "action", "mirred", "egress", "redirect", "dev", ifb), "net",
                "the ingress qdisc and its redirect into the ifb, in one process"),
        ]
        revert += [
            Cmd(("sh", "-c", DEL_INGRESS_SH, "sh", dev, ifb), "net", "the ingress qdisc, if its redirect is ours"),
            Cmd(("ip", "link", "del", ifb), "net"),
            Cmd(("tc", "qdisc", "del", "dev", dev, "root", "handle", self.handle), "net"),
        ]
        if facts.get("foreign_root"):
            revert.append(Cmd(("tc", "qdisc", "add", "dev", dev, *restore_args(facts["foreign_root"])), "net", "put the foreign root back"))
        verify = [f"tc shows handle {self.handle} ({leaf[0] if self.peer is None else 'htb'}) on {dev} and {leaf[0]} on {ifb}"]
        if self.probe_peer is not None:
            verify.append(f"TCP throughput {self.node.name}<->{self.probe_peer_addr} measured both ways <= cap")
        return Plan(self.fault_id, self.type, self.node.name, self.target, inject, revert, verify)

    def _netem_only(self) -> list[str]:
        saved, self.rate_bit_per_s = self.rate_bit_per_s, None
        try:
            return self._leaf()
        finally:
            self.rate_bit_per_s = saved

    # -- verify / evidence -----------------------------------------------------------
    def _ours(self, dev: str) -> dict | None:
        for q in self._qdiscs(dev):
            if q.get("handle") == self.handle:
                return q
        return None

    def verify(self, facts: dict) -> dict:
        dev, ifb = facts["iface"], facts["ifb"]
        eg, ing = self._ours(dev), self._ours(ifb)
        ev: dict = {"tc_egress": bool(eg), "tc_ingress": bool(ing)}
        if self.rate_bit_per_s:
            ev["cap_bit_per_s"] = self.rate_bit_per_s
        ok = bool(eg and ing)
        if self.probe_peer is not None and self.node.address and self.probe_peer_addr and self.rate_bit_per_s and not self.peer:
            nbytes = int(min(8 << 20, max(256 << 10, self.rate_bit_per_s / 8 * 0.5)))
            down = measure_throughput(self.probe_peer, self.node, self.node.address, nbytes)
            up = measure_throughput(self.node, self.probe_peer, self.probe_peer_addr, nbytes)
            ev["ingress_measured_bit_per_s"] = down.get("bit_per_s")
            ev["egress_measured_bit_per_s"] = up.get("bit_per_s")
            limit = self.rate_bit_per_s * 1.15
            ok = ok and all(r is not None and r <= limit for r in (down.get("bit_per_s"), up.get("bit_per_s")))
            ev["throughput_under_cap"] = ok
        ev["ok"] = ok
        return ev

    def final_evidence(self, facts: dict) -> dict:
        out = {}
        for name, dev in (("egress", facts["iface"]), ("ingress", facts["ifb"])):
            q = self._ours(dev)
            if q:
                out[name] = {k: q.get(k) for k in ("kind", "bytes", "packets", "drops", "overlimits")}
        return out

    def reverted(self, facts: dict) -> list[str]:
        left = []
        dev, ifb = facts["iface"], facts["ifb"]
        qd = self._qdiscs(dev)
        for q in qd:
            if q.get("handle") in (self.handle, self.child_handle):
                left.append(f"{q.get('kind')} {q.get('handle')} on {dev}")
        if any(q.get("kind") == "ingress" for q in qd):
            cp = self.node.run(["tc", "filter", "show", "dev", dev, "parent", "ffff:"], scope="net")
            if f"device {ifb})" in cp.stdout:
                left.append(f"ingress redirect to {ifb} on {dev}")
        fr = facts.get("foreign_root")
        if fr:
            now = self._root_raw(dev)
            if not same_qdisc(now, fr, rel=0.0):
                left.append(f"foreign root qdisc not restored on {dev} (was {fr}, now {now.get('kind')} {now.get('handle')})")
        try:
            if ifb in self._links():
                left.append(f"ifb device {ifb}")
        except NodeError:
            pass
        return left


def restore_args(q: dict) -> list[str]:
    """Arguments of ``tc qdisc add dev DEV ...`` that rebuild, exactly, a root qdisc
    shown by ``tc -j -raw qdisc show`` as ``q`` (kinds in RESTORABLE).

    tbf is written back in the kernel's own units: the rate in bit/s from its bytes/s,
    ``limit`` in bytes, and a burst in bytes chosen so that the kernel's bucket in
    scheduler ticks (``burst_raw``) comes out the same (``tbf_burst_for_ticks``):
    writing back the rounded ``burst`` tc prints would lose a byte or two each cycle.
    Raises Refused for a qdisc it cannot rebuild exactly."""
    kind, handle, o = q.get("kind"), q.get("handle"), q.get("options", {})
    known = {"tbf": {"rate", "burst", "burst_raw", "lat", "limit"}, "pfifo": {"limit"}, "bfifo": {"limit"}}.get(kind, set())
    extra = sorted(k for k in o if k not in known)
    if extra:  # e.g. a tbf with peakrate/minburst: rebuilding it without them would be a lie
        raise Refused(f"cannot rebuild the foreign {kind} {handle} qdisc exactly (it has {', '.join(extra)})", field="--force",
                      fix="remove it yourself or pick another interface")
    try:
        if kind == "tbf":
            rate, ticks = int(o["rate"]), int(str(o["burst_raw"]), 16)
            burst = tbf_burst_for_ticks(rate, ticks)
            if burst is not None:
                return ["root", "handle", handle, "tbf", "rate", f"{rate * 8}bit", "burst", str(burst), "limit", str(int(o["limit"]))]
        if kind in ("pfifo", "bfifo"):
            return ["root", "handle", handle, kind, "limit", str(int(o["limit"]))]
    except (KeyError, TypeError, ValueError):
        pass
    raise Refused(f"cannot rebuild the foreign {kind} {handle} qdisc exactly", field="--force", fix="remove it yourself or pick another interface")


#: the kernel's scheduler tick is 2**PSCHED_SHIFT ns (include/net/pkt_sched.h)
PSCHED_SHIFT = 6


def psched_l2t_ns(rate_bytes_ps: int, length: int) -> int:
    """ns the kernel's token bucket charges for ``length`` bytes at ``rate_bytes_ps``:
    ``psched_ratecfg_precompute`` / ``psched_l2t_ns`` of net/sched/sch_generic.c and
    include/net/sch_generic.h (mult/shift fixed point, no overhead, no ATM)."""
    mult, shift = 1, 0
    if rate_bytes_ps > 0:
        factor = 10**9
        while True:
            mult = factor // rate_bytes_ps
            if mult & (1 << 31) or factor & (1 << 63):
                break
            factor <<= 1
            shift += 1
    return ((length * mult) & ((1 << 64) - 1)) >> shift


def tbf_burst_for_ticks(rate_bytes_ps: int, ticks: int) -> int | None:
    """The smallest burst in bytes that tbf turns into a bucket of exactly ``ticks``
    scheduler ticks at ``rate_bytes_ps`` (tc passes the burst in bytes as
    TCA_TBF_BURST; sch_tbf.c computes ``buffer = psched_l2t_ns(rate, burst)``); None
    when no byte count does."""
    if rate_bytes_ps <= 0:
        return None
    est = (ticks << PSCHED_SHIFT) * rate_bytes_ps // 10**9
    for b in range(max(1, est - 3), est + 4):
        if psched_l2t_ns(rate_bytes_ps, b) >> PSCHED_SHIFT == ticks:
            return b
    return None


def same_qdisc(a: dict, b: dict, rel: float = 0.01) -> bool:
    """Same kind, handle and numeric options within ``rel`` (the kernel rounds)."""
    if a.get("kind") != b.get("kind") or a.get("handle") != b.get("handle"):
        return False
    oa, ob = a.get("options", {}), b.get("options", {})
    for k, vb in ob.items():
        va = oa.get(k)
        if isinstance(vb, (int, float)) and isinstance(va, (int, float)):
            if abs(va - vb) > rel * max(abs(vb), 1):
                return False
        elif va != vb:
            return False
    return True
