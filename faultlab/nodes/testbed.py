"""A local testbed of network-namespace nodes joined by a faultlab bridge.

Each node is a network namespace with one veth interface (named ``fleth0`` inside the
namespace, deliberately not ``eth0``) whose host side is enslaved to a bridge
``flbr<id>``. The bridge holds ``<subnet>.1``; node i holds ``<subnet>.(10+i)``.
The subnet is a /24 from 10.213.0.0/16 that no route on this host already uses.

Everything made carries the testbed id in its name and is listed in a state file
(``/run/faultlab/testbeds/<id>.json``) so that ``faultlab recover`` can remove a
testbed left by a killed controller. When ``iptables`` exists and bridged traffic
passes through it (docker sets the FORWARD policy to DROP), one ACCEPT rule for the
bridge is added, with a faultlab comment, and removed on teardown.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

from faultlab.errors import FaultlabError, NodeError
from faultlab.nodes.netns import NetnsNode

NODE_IFACE = "fleth0"


def state_dir() -> Path:
    return Path(os.environ.get("FAULTLAB_STATE_DIR", "/run/faultlab")) / "testbeds"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    cp = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and cp.returncode != 0:
        raise NodeError(f"ip {' '.join(args)}: {cp.stderr.strip()}")
    return cp


def _used_networks() -> list[ipaddress.IPv4Network]:
    cp = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True, timeout=10)
    nets = []
    for line in cp.stdout.splitlines():
        tok = line.split()[0] if line.split() else ""
        if tok in ("default", "broadcast", "local", "unreachable"):
            tok = line.split()[1] if len(line.split()) > 1 else ""
        try:
            nets.append(ipaddress.ip_network(tok, strict=False))
        except ValueError:
            continue
    return nets


def _free_subnet() -> ipaddress.IPv4Network:
    used = _used_networks()
    for third in range(secrets.randbelow(200) + 20, 256):
        cand = ipaddress.ip_network(f"10.213.{third}.0/24")
        if not any(cand.overlaps(u) for u in used if u.prefixlen > 0):
            return cand
    raise FaultlabError("no free /24 in 10.213.0.0/16 for the testbed", fix="remove stale testbeds with `faultlab recover`")


#: ``sh -c`` script (args: namespace names) that ends every process inside them:
#: SIGTERM, up to 5 s to exit, then SIGKILL. Needs only sh, coreutils and ip.
_END_NETNS_PIDS_SH = (
    'pids() { for n in "$@"; do ip netns pids "$n" 2>/dev/null; done; }; '
    'for p in $(pids "$@"); do kill "$p" 2>/dev/null; done; '
    'i=0; while [ "$i" -lt 50 ]; do [ -z "$(pids "$@")" ] && exit 0; sleep 0.1; i=$((i+1)); done; '
    'for p in $(pids "$@"); do kill -9 "$p" 2>/dev/null; done; exit 0'
)


class NetnsTestbed:
    """``n_nodes`` netns nodes on one bridge. Use as a context manager.

    Raises FaultlabError (with the fix) when not root or ``ip`` is missing; any error
    during ``up()`` tears down what was made before re-raising.
    """

    def __init__(self, n_nodes: int = 4, tb_id: str | None = None):
        if n_nodes < 1 or n_nodes > 200:
            raise FaultlabError(f"{n_nodes} nodes", field="nodes", fix="give 1 to 200")
        self.id = tb_id or secrets.token_hex(2)
        self.n_nodes = n_nodes
        self.bridge = f"flbr{self.id}"
        self.nodes: list[NetnsNode] = []
        self.subnet: ipaddress.IPv4Network | None = None
        self.iptables_rule: list[str] | None = None
        self._made: dict = {"netns": [], "links": [], "iptables": None}

    @property
    def bridge_address(self) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    # -- lifecycle -------------------------------------------------------------------
    def up(self) -> "NetnsTestbed":
        if os.geteuid() != 0:
            raise FaultlabError("network-namespace nodes need root", field="testbed", fix="run as root, or use local nodes")
        if not shutil.which("ip"):
            raise FaultlabError("`ip` not found", field="testbed", fix="apt-get install iproute2")
        self.subnet = _free_subnet()
        try:
            self._save()
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made["links"].append(self.bridge)
            self._save()
            _ip("addr", "add", f"{self.bridge_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            self._allow_forward()
            for i in range(self.n_nodes):
                ns = f"fl{self.id}n{i}"
                host_if = f"fl{self.id}h{i}"
                addr = str(self.subnet.network_address + 10 + i)
                _ip("netns", "add", ns)
                self._made["netns"].append(ns)
                self._save()
                _ip("link", "add", host_if, "type", "veth", "peer", "name", NODE_IFACE, "netns", ns)
                self._made["links"].append(host_if)
                self._save()
                _ip("link", "set", host_if, "master", self.bridge)
                _ip("link", "set", host_if, "up")
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", NODE_IFACE)
                _ip("-n", ns, "link", "set", NODE_IFACE, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                self.nodes.append(NetnsNode(name=f"n{i}", netns=ns, address=addr, iface=NODE_IFACE))
        except BaseException:
            self.down()
            raise
        return self

    def _allow_forward(self) -> None:
        ipt = shutil.which("iptables")
        if not ipt:
            return
        try:
            nf = Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip()
        except OSError:
            nf = "0"
        if nf != "1":
            return
        rule = ["FORWARD", "-i", self.bridge, "-o", self.bridge, "-m", "comment", "--comment", f"faultlab-{self.id}", "-j", "ACCEPT"]
        cp = subprocess.run([ipt, "-I", *rule], capture_output=True, text=True, timeout=30)
        if cp.returncode == 0:
            self._made["iptables"] = rule
            self._save()

    def teardown_cmds(self) -> list:
        """The commands that remove this testbed (for a lease whose watchdog tears
        it down if the controller dies); each is idempotent."""
        from faultlab.injectors.base import Cmd

        cmds = []
        if self._made.get("iptables"):
            cmds.append(Cmd(("iptables", "-D", *self._made["iptables"])))
        # Processes left in our namespaces (ranks of a killed runner) end first:
        # SIGTERM, up to 5 s to exit, then SIGKILL (a rank blocked in a collective
        # whose peers are gone only notices SIGTERM at its next step, which may be
        # its collective timeout away). Only PIDs inside namespaces faultlab made.
        cmds.append(Cmd(("sh", "-c", _END_NETNS_PIDS_SH, "sh", *reversed(self._made["netns"]))))
        cmds += [Cmd(("ip", "netns", "del", ns)) for ns in reversed(self._made["netns"])]
        cmds += [Cmd(("ip", "link", "del", link)) for link in reversed(self._made["links"])]
        cmds.append(Cmd(("rm", "-f", str(self._state_path()))))
        return cmds

    def down(self) -> list[str]:
        """Remove everything this testbed made; returns the errors (empty when clean)."""
        errors = []
        rule = self._made.get("iptables")
        if rule:
            cp = subprocess.run(["iptables", "-D", *rule], capture_output=True, text=True, timeout=30)
            if cp.returncode != 0 and "does a matching rule exist" not in cp.stderr and "Bad rule" not in cp.stderr:
                errors.append(cp.stderr.strip())
        for ns in reversed(self._made["netns"]):
            cp = _ip("netns", "del", ns, check=False)
            if cp.returncode != 0 and "No such file" not in cp.stderr:
                errors.append(cp.stderr.strip())
        for link in reversed(self._made["links"]):
            if Path(f"/sys/class/net/{link}").exists():
                cp = _ip("link", "del", link, check=False)
                if cp.returncode != 0 and Path(f"/sys/class/net/{link}").exists():
                    errors.append(cp.stderr.strip())
        if not errors:
            self._state_path().unlink(missing_ok=True)
        self.nodes = []
        return errors

    def __enter__(self) -> "NetnsTestbed":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    # -- state file (for recovery after a killed controller) -------------------------
    def _state_path(self) -> Path:
        return state_dir() / f"{self.id}.json"

    def _save(self) -> None:
        p = self._state_path()
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps({"id": self.id, "subnet": str(self.subnet), "pid": os.getpid(), **self._made}))
        os.replace(tmp, p)

    @classmethod
    def from_state(cls, path: Path) -> "NetnsTestbed":
        d = json.loads(path.read_text())
        tb = cls(n_nodes=max(1, len(d.get("netns", []))), tb_id=d["id"])
        tb._made = {"netns": d.get("netns", []), "links": d.get("links", []), "iptables": d.get("iptables")}
        return tb


def recover_testbeds(only_dead: bool = True) -> list[str]:
    """Tear down testbeds whose controller is gone (all of them when ``only_dead`` is
    False). Returns the ids removed."""
    removed = []
    d = state_dir()
    if not d.exists():
        return removed
    for p in sorted(d.glob("*.json")):
        try:
            state = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        pid = state.get("pid")
        if only_dead and pid and _alive(pid):
            continue
        if state.get("backend") == "docker":  # a docker (or ssh) testbed: faultlab.nodes.docker_testbed
            from faultlab.nodes.docker_testbed import DockerTestbed

            tb = DockerTestbed.from_state(state)
        else:
            tb = NetnsTestbed.from_state(p)
        if not tb.down():
            removed.append(tb.id)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
