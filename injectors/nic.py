"""``nic-slow``: a rate cap on a node's network interface, both directions (tc).

Mechanism (Linux tc, as in iproute2's tc-tbf(8) and tc-mirred(8)):

- egress: ``tbf`` as the root qdisc of the interface, with the reserved handle
  ``faf0:``;
- ingress: an ``ingress`` qdisc on the interface whose u32 filter redirects every
  packet (``mirred egress redirect``) into an ifb device ``flifb<hex>`` that faultlab
  creates for this fault, whose root is the same ``tbf`` cap.

Ownership: inject refuses (``Refused``) when the interface's root qdisc is not the
kernel default (handle ``0:``) or it already has an ingress/clsact qdisc, so revert
never deletes what another tool made; ``tc qdisc del ... root handle faf0:`` itself
refuses to delete a root qdisc with another handle.

Severity: the cap in bit/s is in ``params``; ``severity`` = 1e9 / rate (larger is
slower: 1.0 for a 1 Gbit/s cap, 20 for 50 Mbit/s).
"""

from __future__ import annotations

import json

from faultlab.errors import BadInput, Refused
from faultlab.nodes import Node
from faultlab.injectors.base import Cmd, Injector, Plan

HANDLE = "faf0:"
TBF_LATENCY = "100ms"


def tc_rate(bit_per_s: float) -> str:
    """``bit_per_s`` as tc writes it (integer ``bit``)."""
    return f"{int(round(bit_per_s))}bit"


def tbf_burst_bytes(bit_per_s: float) -> int:
    """Bucket size: 5 ms of traffic at the cap, at least 16 KiB (above a 9000-byte MTU
    and several full-size segments, so the cap is kept without dropping whole GSO
    bursts)."""
    return max(16 * 1024, int(bit_per_s / 8 * 0.005))


class NicSlow(Injector):
    """Rate cap of ``rate_bit_per_s`` (bit/s) on ``iface`` of ``node``, both directions.

    ``probe_peer`` (a Node) and ``probe_peer_addr``: when given, ``verify`` measures TCP
    throughput between the node and that peer in both directions under the cap.
    Raises BadInput for a missing interface, Refused for foreign or existing qdiscs.
    """

    type = "nic-slow"
    options = frozenset({"--rate"})

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        from faultlab.injectors import require
        from faultlab.units import parse_rate

        return cls(node, parse_rate(require(opts, "--rate", cls.type), "--rate"), iface=target, fault_id=fault_id)

    def __init__(self, node: Node, rate_bit_per_s: float, iface: str | None = None, *, probe_peer: Node | None = None, probe_peer_addr: str | None = None, fault_id: str | None = None):
        super().__init__(node, fault_id)
        if rate_bit_per_s < 8000:
            raise BadInput(f"{rate_bit_per_s} bit/s is below 8kbit", field="rate", fix="give at least 8kbit")
        self.rate_bit_per_s = float(rate_bit_per_s)
        self.iface = iface or node.iface
        self.probe_peer = probe_peer
        self.probe_peer_addr = probe_peer_addr
        self.ifb = "flifb" + self.fault_id.split("-")[-1][:8]

    @property
    def target(self) -> str:
        return self.iface or "?"

    @property
    def params(self) -> dict:
        return {"rate_bit_per_s": self.rate_bit_per_s, "iface": self.iface, "direction": "both"}

    @property
    def severity(self) -> float:
        return 1e9 / self.rate_bit_per_s

    # -- probe -----------------------------------------------------------------------
    def _links(self) -> list[str]:
        cp = self.node.run(["ip", "-j", "link", "show"], scope="net", check=True)
        return [link["ifname"] for link in json.loads(cp.stdout or "[]")]

    def _qdiscs(self, dev: str) -> list[dict]:
        cp = self.node.run(["tc", "-j", "-s", "qdisc", "show", "dev", dev], scope="net")
        if cp.returncode != 0:
            return []
        return json.loads(cp.stdout or "[]")

    def probe(self) -> dict:
        links = self._links()
        if not self.iface:
            cands = [n for n in links if n != "lo" and not n.startswith("flifb")]
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
        for q in qd:
            if q.get("root") and q.get("handle") == HANDLE:
                raise Refused(f"{self.iface} on {self.node.name} already has a faultlab rate cap", field="--target", fix="revert it first: faultlab status / faultlab revert")
            if q.get("root") and q.get("handle") != "0:":
                raise Refused(
                    f"{self.iface} on {self.node.name} has a root qdisc faultlab did not create ({q.get('kind')} {q.get('handle')})",
                    field="--target", fix="remove it yourself or pick another interface; faultlab will not clobber it",
                )
            if q.get("kind") in ("ingress", "clsact"):
                raise Refused(
                    f"{self.iface} on {self.node.name} has an {q.get('kind')} qdisc faultlab did not create",
                    field="--target", fix="remove it yourself or pick another interface",
                )
        if self.ifb in links:
            raise Refused(f"device {self.ifb} already exists on {self.node.name}", field="fault_id", fix="pick another fault id")
        return {"iface": self.iface, "ifb": self.ifb, "qdiscs_before": qd}

    # -- plan ------------------------------------------------------------------------
    def plan(self, facts: dict) -> Plan:
        dev, ifb = facts["iface"], facts["ifb"]
        rate, burst = tc_rate(self.rate_bit_per_s), str(tbf_burst_bytes(self.rate_bit_per_s))
        tbf = ["tbf", "rate", rate, "burst", burst, "latency", TBF_LATENCY]
        inject = [
            Cmd(("tc", "qdisc", "add", "dev", dev, "root", "handle", HANDLE, *tbf), "net", "egress cap"),
            Cmd(("ip", "link", "add", ifb, "type", "ifb"), "net", "ifb device for ingress"),
            Cmd(("ip", "link", "set", ifb, "up"), "net"),
            Cmd(("tc", "qdisc", "add", "dev", ifb, "root", "handle", HANDLE, *tbf), "net", "ingress cap on the ifb"),
            Cmd(("tc", "qdisc", "add", "dev", dev, "handle", "ffff:", "ingress"), "net"),
            Cmd(
                ("tc", "filter", "add", "dev", dev, "parent", "ffff:", "protocol", "all", "prio", "49", "u32", "match", "u32", "0", "0",
                 "action", "mirred", "egress", "redirect", "dev", ifb),
                "net", "redirect ingress into the ifb",
            ),
        ]
        revert = [
            Cmd(("tc", "qdisc", "del", "dev", dev, "handle", "ffff:", "ingress"), "net"),
            Cmd(("ip", "link", "del", ifb), "net"),
            Cmd(("tc", "qdisc", "del", "dev", dev, "root", "handle", HANDLE), "net"),
        ]
        verify = [f"tc shows tbf {HANDLE} at {rate} on {dev} and {ifb}"]
        if self.probe_peer is not None:
            verify.append(f"TCP throughput {self.node.name}<->{self.probe_peer_addr} measured both ways <= cap")
        return Plan(self.fault_id, self.type, self.node.name, dev, inject, revert, verify)

    # -- verify / evidence -----------------------------------------------------------
    def _tbf(self, dev: str) -> dict | None:
        for q in self._qdiscs(dev):
            if q.get("kind") == "tbf" and q.get("handle") == HANDLE:
                return q
        return None

    def verify(self, facts: dict) -> dict:
        from faultlab.probe import measure_throughput

        dev, ifb = facts["iface"], facts["ifb"]
        eg, ing = self._tbf(dev), self._tbf(ifb)
        ev: dict = {"tc_egress": bool(eg), "tc_ingress": bool(ing), "cap_bit_per_s": self.rate_bit_per_s}
        ok = bool(eg and ing)
        if self.probe_peer is not None and self.node.address and self.probe_peer_addr:
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
            q = self._tbf(dev)
            if q:
                out[name] = {k: q.get(k) for k in ("bytes", "packets", "drops", "overlimits")}
        return out

    def reverted(self, facts: dict) -> list[str]:
        left = []
        dev, ifb = facts["iface"], facts["ifb"]
        for q in self._qdiscs(dev):
            if q.get("handle") == HANDLE:
                left.append(f"tbf {HANDLE} on {dev}")
            if q.get("kind") == "ingress":
                left.append(f"ingress qdisc on {dev}")
        if ifb in self._links():
            left.append(f"ifb device {ifb}")
        return left


