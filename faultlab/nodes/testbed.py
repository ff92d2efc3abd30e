"""A local testbed of network-namespace nodes joined by a faultlab bridge.

Each node is a network namespace with one veth interface (named ``fleth0`` inside the
namespace, deliberately not ``eth0``) whose host side is enslaved to a bridge
``flbr<id>``. The bridge holds ``<subnet>.1``; node i holds ``<subnet>.(10+i)``.
The subnet is a /24 from 10.213.0.0/16 that no route on this host already uses.

Everything made carries the testbed id in its name and is listed in a state file
(``/run/faultlab/testbeds/<id>.json``) so that ``faultlab recover`` can remove a
testbed left by a killed controller. The state folder is opened through
``faultlab.safefs`` (whole path owned by root or us, not writable by others, no
symlinks) and each file is validated (``TestbedState``: the id is 4 hex digits, every
name is one this testbed would have made, the iptables rule is exactly ours) before
``recover`` acts on it; a file failing a check is reported (``untrusted_states``) and
never acted on. When ``iptables`` exists and bridged traffic
passes through it (docker sets the FORWARD policy to DROP), one ACCEPT rule for the
bridge is added, with a faultlab comment, and removed on teardown.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from faultlab import procid, safefs
from faultlab.errors import BadInput, FaultlabError, NodeError
from faultlab.nodes.netns import NetnsNode

NODE_IFACE = "fleth0"
#: a testbed id: 4 hex digits (``secrets.token_hex(2)``)
TESTBED_ID_RE = re.compile(r"^[0-9a-f]{4}$")
TESTBED_NET = ipaddress.ip_network("10.213.0.0/16")


def _forward_rule(tb_id: str, bridge: str) -> list[str]:
    """The iptables FORWARD rule a testbed adds (and the only one it may remove)."""
    return ["FORWARD", "-i", bridge, "-o", bridge, "-m", "comment", "--comment", f"faultlab-{tb_id}", "-j", "ACCEPT"]


class TestbedState(BaseModel):
    """Schema of a testbed state file ``<id>.json``: only names this testbed would
    have made pass (namespaces ``fl<id>n<i>``, links ``flbr<id>`` / ``fl<id>h<i>``, the
    exact FORWARD rule), so a file cannot steer ``recover`` at anything else.
    ``pid`` and ``starttime`` (field 22 of /proc/PID/stat) name the controller."""

    __test__ = False  # not a pytest class
    model_config = ConfigDict(extra="forbid", strict=True)

    id: str = Field(pattern=TESTBED_ID_RE.pattern)
    subnet: Optional[str] = None
    pid: int = Field(gt=0)
    starttime: Optional[int] = Field(default=None, ge=0)
    netns: list[str] = Field(default_factory=list, max_length=200)
    links: list[str] = Field(default_factory=list, max_length=201)
    iptables: Optional[list[str]] = None

    @model_validator(mode="after")
    def _names_are_ours(self) -> "TestbedState":
        i = re.escape(self.id)
        for ns in self.netns:
            if not re.fullmatch(rf"fl{i}n[0-9]{{1,3}}", ns):
                raise ValueError(f"netns: {ns!r} is not a name this testbed makes (fl{self.id}n<i>)")
        for link in self.links:
            if link != f"flbr{self.id}" and not re.fullmatch(rf"fl{i}h[0-9]{{1,3}}", link):
                raise ValueError(f"links: {link!r} is not a name this testbed makes (flbr{self.id}, fl{self.id}h<i>)")
        if self.iptables is not None and self.iptables != _forward_rule(self.id, f"flbr{self.id}"):
            raise ValueError("iptables: not the rule this testbed adds")
        if self.subnet not in (None, "None"):
            try:
                net = ipaddress.ip_network(self.subnet)
            except ValueError:
                raise ValueError(f"subnet: {self.subnet!r} is not a network") from None
            if not (net.prefixlen == 24 and net.subnet_of(TESTBED_NET)):
                raise ValueError(f"subnet: {self.subnet} is not a /24 of {TESTBED_NET}")
        return self


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
            raise BadInput(f"{n_nodes} nodes", field="--nodes", fix="give 1 to 200 netns nodes")
        self.id = tb_id or secrets.token_hex(2)
        if not TESTBED_ID_RE.match(self.id):
            raise FaultlabError(f"testbed id {self.id!r}", field="tb_id", fix="give 4 hex digits, or none")
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
        rule = _forward_rule(self.id, self.bridge)
        cp = subprocess.run([ipt, "-I", *rule], capture_output=True, text=True, timeout=30)
        if cp.returncode == 0:
            self._made["iptables"] = rule
            self._save()

    def teardown_argv(self) -> list[tuple[str, ...]]:
        """The commands (argv, run on this host) that remove this testbed, for a lease
        whose watchdog tears it down if the controller dies; each is idempotent."""
        cmds = []
        if self._made.get("iptables"):
            cmds.append(("iptables", "-D", *self._made["iptables"]))
        # Processes left in our namespaces (ranks of a killed runner) end first:
        # SIGTERM, up to 5 s to exit, then SIGKILL (a rank blocked in a collective
        # whose peers are gone only notices SIGTERM at its next step, which may be
        # its collective timeout away). Only PIDs inside namespaces faultlab made.
        cmds.append(("sh", "-c", _END_NETNS_PIDS_SH, "sh", *reversed(self._made["netns"])))
        cmds += [("ip", "netns", "del", ns) for ns in reversed(self._made["netns"])]
        cmds += [("ip", "link", "del", link) for link in reversed(self._made["links"])]
        cmds.append(("rm", "-f", str(self._state_path())))
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
            try:
                with safefs.open_dir(state_dir()) as d:
                    d.unlink(f"{self.id}.json")
                    d.unlink_temporaries(f"{self.id}.json")
            except FileNotFoundError:
                pass
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
        """Write the state file (durably, through the checked state folder)."""
        state = {"id": self.id, "subnet": str(self.subnet), "pid": os.getpid(), "starttime": procid.starttime(os.getpid()),
                 **self._made}
        with safefs.open_dir(state_dir(), create=True, mode=0o755) as d:
            d.write_json(f"{self.id}.json", state, mode=0o644)

    @classmethod
    def from_state(cls, state: TestbedState) -> "NetnsTestbed":
        """The testbed a validated state file describes."""
        tb = cls(n_nodes=max(1, len(state.netns)), tb_id=state.id)
        tb._made = {"netns": list(state.netns), "links": list(state.links), "iptables": state.iptables}
        return tb


def load_states() -> tuple[list[TestbedState], list[str]]:
    """The testbed state files of this host that pass every check, and one line for
    each that does not (the path and why: untrusted folder or file, a symlink, another
    user's file, bad JSON, a schema error, a name that is not its id). Nothing is
    acted on here."""
    states, bad = [], []
    try:
        d = safefs.open_dir(state_dir())
    except FileNotFoundError:
        return states, bad
    except safefs.UntrustedPath as e:
        return states, [f"testbed state folder not trusted, nothing in it is acted on: {e}"]
    with d:
        for name in d.listdir():
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = f"{d.path}/{name}"
            try:
                raw = d.read_json(name, max_bytes=64 * 1024)
                st = TestbedState.model_validate(raw)
            except safefs.UntrustedPath as e:
                bad.append(f"testbed state not trusted, not acted on: {e}")
                continue
            except (OSError, ValueError) as e:  # ValidationError is a ValueError
                why = _validation_summary(e) if isinstance(e, ValidationError) else str(e).splitlines()[0]
                bad.append(f"testbed state {path}: {why}, not acted on (remove it: `rm {path}`)")
                continue
            if name != f"{st.id}.json":
                bad.append(f"testbed state {path}: names testbed {st.id}, not acted on (remove it: `rm {path}`)")
                continue
            states.append(st)
    return states, bad


def untrusted_states() -> list[str]:
    """One line per testbed state file that fails a check (see ``load_states``)."""
    return load_states()[1]


def _validation_summary(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err.get("loc", ())) or "file"
    return f"{loc}: {err.get('msg')}"


def recover_netns_testbeds(only_dead: bool = True) -> list[str]:
    """Tear down netns testbeds whose controller is gone (all of them when
    ``only_dead`` is False), from state files that pass ``load_states``' checks only.
    Returns the ids removed; ``untrusted_states()`` names the files skipped."""
    removed = []
    states, _bad = load_states()
    for st in states:
        if only_dead and procid.alive(st.pid, st.starttime):
            continue
        tb = NetnsTestbed.from_state(st)
        if not tb.down():
            removed.append(tb.id)
    return removed
