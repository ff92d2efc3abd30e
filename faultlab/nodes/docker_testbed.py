"""A testbed of docker nodes: containers on an internal network of their own.

``DockerTestbed(n).up()`` starts faultlab's dockerd if needed (faultlab.nodes.dockerd),
imports the node image (faultlab.nodes.image: built offline once, cached), makes a
user-defined *internal* bridge network ``fl<id>-net`` (bridge ``fl<id>br``, a free
/24 from 10.213.0.0/16, the host holding ``.1``) and ``n`` containers ``fl<id>-n<i>``
at ``.10+i``. Every container:

- runs sshd as PID 1 with host keys made at its start (none are in the image); the
  controller's testbed key (``id_ed25519``, made per testbed) is its root's only
  authorized key, and the container's ed25519 host key is written to the testbed's
  ``known_hosts``, so the ssh backend can reach it with a pinned host key
  (``inventory.yaml`` lists the nodes for ``--backend ssh``);
- mounts the controller's Python and faultlab read-only (image.workload_mounts) and a
  host folder of the testbed at ``/var/lib/faultlab/work`` (node-local telemetry),
  kept on the disk (:func:`work_base`), never under /run, whose tmpfs holds root's
  leases;
- is bounded: at most NODE_PIDS processes (``FAULTLAB_NODE_PIDS``) and NODE_MEMORY
  bytes of memory, swap included (``FAULTLAB_NODE_MEMORY``; :func:`node_limits`), so
  its root cannot take the host's PIDs or memory from root's controller and watchdogs;
- keeps no CAP_NET_RAW (nothing faultlab runs in a node opens a raw socket: probes
  and tc run from the host through nsenter), so its root cannot forge ARP replies
  or other nodes' frames on the shared bridge;
- carries the labels ``faultlab.testbed=<id>`` and ``faultlab.node=n<i>``; it and the
  network also carry the state file's path (``faultlab.state``) and their maker's PID
  and start time (``faultlab.controller``).

What is made is listed in a state file (``<state>/docker/<id>.json``) before it is
made, and ``down()`` also removes every container and network labeled with the
testbed id, so a ``up`` killed half-way leaves nothing ``down`` (or ``faultlab
recover``) does not remove. A testbed whose state file is gone and whose maker is
dead (its state folder removed after a SIGKILL) is removed by the next ``up`` or
``faultlab recover`` (:func:`reap_orphans`). The image is kept (it is the cache).
"""

from __future__ import annotations

import base64
import binascii
import io
import ipaddress
import os
import re
import secrets
import socket
import subprocess
import tarfile
import time
from pathlib import Path

from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from faultlab import procid, safefs
from faultlab.errors import BadInput, FaultlabError, NodeError
from faultlab.nodes import antispoof, dockerd, image, node_cgroups
from faultlab.nodes.docker import WORK_DIR, DockerNode, node_from_container
from faultlab.nodes.dockerd import docker_host
from faultlab.nodes.inventory import Inventory, InventoryNode
from faultlab.nodes.testbed import _free_subnet, state_dir

LABEL = "faultlab.testbed"
#: the most processes (threads included) of one node: a rank and its loader workers
#: use a few dozen; settable with ``FAULTLAB_NODE_PIDS``
NODE_PIDS = 4096
#: environment variables of the node limits (a count; bytes, or docker's ``4g`` form)
PIDS_ENV, MEMORY_ENV = "FAULTLAB_NODE_PIDS", "FAULTLAB_NODE_MEMORY"
#: environment variable of the folder that holds the nodes' work folders
WORK_BASE_ENV = "FAULTLAB_NODE_WORK_BASE"
#: label of a testbed's network and containers: the state file that records them
STATE_LABEL = "faultlab.state"
#: label of a testbed's network and containers: ``PID:STARTTIME`` of the process that made them
CONTROLLER_LABEL = "faultlab.controller"


class DockerTestbed:
    """``n_nodes`` docker nodes on one internal network. Use as a context manager.
    Raises FaultlabError (with the fix) when not root, dockerd or the image cannot be
    had; any error during ``up()`` tears down what was made before re-raising."""

    backend = "docker"

    def __init__(self, n_nodes: int = 4, tb_id: str | None = None, host_like: bool = False):
        """``host_like``: containers that stand in for real hosts reached over SSH:
        NET_ADMIN (tc in their own network namespace) and a private cgroup namespace
        whose cpu/blkio hierarchies the host remounts writable (faultlab.nodes.node_cgroups),
        so root in them can do what root on a host does to inject faults; never
        SYS_ADMIN (with it their root, host uid 0, could remount the read-only binds).
        Plain docker nodes (the default) get no capability: faults come from the host.
        Neither kind gets MKNOD (a device node in the host folder mounted at WORK_DIR
        would be a host device file) nor NET_RAW (forged frames on the bridge)."""
        self.host_like = host_like
        if n_nodes < 1 or n_nodes > 64:
            raise BadInput(f"{n_nodes} nodes", field="--nodes", fix="give 1 to 64 docker nodes")
        self.id = tb_id or secrets.token_hex(2)
        self.n_nodes = n_nodes
        self.network = f"fl{self.id}-net"
        self.bridge = f"fl{self.id}br"
        self.subnet: ipaddress.IPv4Network | None = None
        self.nodes: list[DockerNode] = []
        self._made: dict = {"containers": [], "network": None, "ports": {}}
        #: whether up() started faultlab's dockerd (it outlives the testbed: see dockerd.left_running)
        self.started_dockerd = False

    # -- paths -------------------------------------------------------------------------
    @property
    def folder(self) -> Path:
        """Private folder of this testbed: keys, known_hosts, inventory, node volumes."""
        return docker_state_dir() / self.id

    def _open_folder(self) -> safefs.TrustedDir:
        """The testbed's folder as a trusted private folder (made 0700 when missing):
        what is written there is written relative to its descriptor, never through a
        link."""
        return safefs.open_dir(self.folder, create=True, mode=0o700, private=True)

    @property
    def work_folder(self) -> Path:
        """Folder of this testbed's node work folders (``NODE/``), on the disk:
        :func:`work_base` ``/<id>``."""
        return work_base() / self.id

    @property
    def key_path(self) -> Path:
        return self.folder / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    @property
    def inventory_path(self) -> Path:
        return self.folder / "inventory.yaml"

    @property
    def bridge_address(self) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    def _state_path(self) -> Path:
        return docker_state_dir() / f"{self.id}.json"

    # -- lifecycle -----------------------------------------------------------------------
    def up(self, progress=None) -> "DockerTestbed":
        if os.geteuid() != 0:
            raise FaultlabError("docker nodes need root (nsenter, cgroups)", field="--backend", fix="run as root")
        started = self.started_dockerd = dockerd.ensure_started()
        try:
            cli = dockerd.client()
            reap_orphans(cli)
            img = image.ensure_image(cli)
            mounts = image.workload_mounts()
            self.subnet = _free_subnet()
            try:
                self._open_folder().close()
                self._save()
                self._make_key()
                self._make_network(cli)
                for i in range(self.n_nodes):
                    self._make_node(cli, img, mounts, i)
                self._wait_sshd(cli)
                self._write_inventory()
            except BaseException:
                self.down()
                raise
        except BaseException:
            if started and not list_docker_testbeds():  # the daemon this call started serves no testbed: stopped
                dockerd.stop()
            raise
        return self

    def _make_key(self) -> None:
        if not self.key_path.exists():
            cp = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"faultlab-{self.id}", "-f", str(self.key_path)],
                                capture_output=True, text=True, timeout=30)
            if cp.returncode != 0:
                raise FaultlabError(f"ssh-keygen failed: {cp.stderr.strip()}", field="testbed", fix="apt-get install openssh-client")

    def _make_network(self, cli) -> None:
        import docker  # optional dependency (faultlab[docker]): only docker testbeds need it

        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=str(self.subnet), gateway=self.bridge_address)])
        self._made["network"] = self.network
        self._save()
        cli.networks.create(self.network, driver="bridge", internal=True, ipam=ipam, labels=self._labels(),
                            options={"com.docker.network.bridge.name": self.bridge})

    def _labels(self) -> dict[str, str]:
        """The labels of what this testbed makes: its id, its state file and its maker
        (for :func:`reap_orphans`)."""
        st = procid.starttime(os.getpid())
        return {LABEL: self.id, STATE_LABEL: str(self._state_path().absolute()), CONTROLLER_LABEL: f"{os.getpid()}:{'' if st is None else st}"}

    def _make_node(self, cli, img: str, mounts: dict, i: int) -> None:
        name, cname = f"n{i}", f"fl{self.id}-n{i}"
        addr = str(self.subnet.network_address + 10 + i)
        work = self.work_folder / name
        work.mkdir(mode=0o700, parents=True, exist_ok=True)
        binds = {**mounts, str(work): {"bind": WORK_DIR, "mode": "rw"}}
        api = cli.api
        self._made["containers"].append(cname)
        self._save()
        extra = {"cap_add": ["NET_ADMIN"], "cgroupns": "private"} if self.host_like else {}
        pids, memory = node_limits(self.n_nodes)
        host_cfg = api.create_host_config(binds=binds, network_mode=self.network, init=False, cap_drop=["MKNOD", "NET_RAW"],
                                          pids_limit=pids, mem_limit=memory, memswap_limit=memory, **extra)
        net_cfg = api.create_networking_config({self.network: api.create_endpoint_config(ipv4_address=addr)})
        cid = api.create_container(img, name=cname, hostname=name, host_config=host_cfg, networking_config=net_cfg,
                                   labels={**self._labels(), "faultlab.node": name, "faultlab.work_host": str(work)})["Id"]
        pub = self.key_path.with_suffix(".pub").read_bytes()
        api.put_archive(cid, "/", _tar({"root/.ssh/authorized_keys": (pub, 0o600)}, dirs={"root/.ssh": 0o700}))
        api.start(cid)
        ct = cli.containers.get(cid)
        node = node_from_container(ct, name=name, work_host=str(work))
        if self.host_like:
            node_cgroups.make_writable(ct, node.init_pid)
            self._pin_port(ct, node)
        self.nodes.append(node)

    def _pin_port(self, ct, node: DockerNode) -> None:
        """Pin a host-like node's bridge port to its MAC and address (its root has
        NET_ADMIN): recorded in the state before it is made, so ``down`` removes it."""
        port = antispoof.host_port(node.sandbox)
        self._made["ports"][node.name] = port
        self._save()
        mac = ct.attrs["NetworkSettings"]["Networks"][self.network]["MacAddress"]
        antispoof.apply(antispoof.chain(self.id, node.name), port, mac, node.address)

    def _wait_sshd(self, cli, wait_s: float = 60.0) -> None:
        """Wait until each node's sshd listens and record its ed25519 host key."""
        lines = []
        for node in self.nodes:
            deadline = time.monotonic() + wait_s
            while True:
                rc, out = cli.containers.get(node.container).exec_run(["cat", "/etc/ssh/ssh_host_ed25519_key.pub"])
                # the key file may exist before ssh-keygen has written it (seen empty on a
                # loaded host): only a whole "ssh-ed25519 KEY" line counts
                host_key = _host_key(out) if rc == 0 else None
                if host_key is not None and _listening(node.address, 22):
                    break
                if time.monotonic() > deadline:
                    raise NodeError(f"sshd on node {node.name} did not start within {wait_s:g}s", field="testbed")
                time.sleep(0.2)
            lines.append(f"{node.address} {host_key[0]} {host_key[1]}\n")
        with self._open_folder() as d:
            d.write_atomic(self.known_hosts.name, "".join(lines), 0o600)

    def _write_inventory(self) -> None:
        inv = Inventory(known_hosts=str(self.known_hosts), nodes={
            n.name: InventoryNode(address=n.address, user="root", key=str(self.key_path), interface="eth0",
                                  labels={"testbed": self.id, "container": f"fl{self.id}-{n.name}"})
            for n in self.nodes})
        with self._open_folder() as d:
            d.write_atomic(self.inventory_path.name, inv.to_yaml(), 0o600)

    def teardown_argv(self) -> list[tuple[str, ...]]:
        """The commands (argv: sh + the docker CLI, run on this host) that remove this
        testbed from a watchdog; each is idempotent."""
        h = ["docker", "-H", docker_host()]
        cmds = [(*h, "rm", "-f", c) for c in self._made["containers"]]
        if self._made.get("network"):
            cmds.append((*h, "network", "rm", self._made["network"]))
        for name, port in self._made.get("ports", {}).items():
            cmds += antispoof.teardown_argv(antispoof.chain(self.id, name), port)
        cmds += [("rm", "-rf", "--", str(self.folder)), ("rm", "-rf", "--", str(self.work_folder)),
                 ("rm", "-f", "--", str(self._state_path()))]
        return cmds

    def down(self) -> list[str]:
        """Remove every container and the network of this testbed (those recorded and
        those labeled with its id), its folder and state file. Returns the errors."""
        errors: list[str] = []
        try:
            cli = dockerd.client(timeout_s=30)
        except FaultlabError as e:
            return [str(e)] if self._made["containers"] or self._made["network"] else self._forget([])
        import docker  # optional dependency (faultlab[docker]): only docker testbeds need it

        flt = {"label": f"{LABEL}={self.id}"}
        cts = {c.id: c for c in cli.containers.list(all=True, filters=flt)}
        for name in self._made["containers"]:
            try:
                c = cli.containers.get(name)
                if (c.labels or {}).get(LABEL) == self.id:
                    cts[c.id] = c
            except docker.errors.NotFound:
                pass
        for c in cts.values():
            try:
                c.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                errors.append(f"container {c.name}: {e.explanation}")
        for net in cli.networks.list(filters=flt):
            try:
                net.reload()
                for cid in (net.attrs.get("Containers") or {}):
                    net.disconnect(cid, force=True)
                net.remove()
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                errors.append(f"network {net.name}: {e.explanation}")
        for name, port in self._made.get("ports", {}).items():
            antispoof.remove(antispoof.chain(self.id, name), port)
        self.nodes = []
        return self._forget(errors)

    def _forget(self, errors: list[str]) -> list[str]:
        """Remove the testbed's folder and state file once its containers and network
        are gone. The folder holds the nodes' work folders, which a node's root fills
        as it likes (a tree thousands of folders deep, FIFOs, setuid files): GNU ``rm``
        removes any depth without following links (``shutil.rmtree`` recurses and
        fails past Python's recursion limit), and a folder it cannot remove is an error
        line, never a traceback; the state file stays then, so ``recover`` tries again."""
        for folder in (self.work_folder, self.folder):
            if not errors and folder.exists():
                cp = subprocess.run(["rm", "-rf", "--one-file-system", "--", str(folder)], stdin=subprocess.DEVNULL,
                                    capture_output=True, text=True, timeout=300)
                if cp.returncode != 0 or folder.exists():
                    errors.append(f"folder {folder}: rm exited {cp.returncode}: {' '.join(cp.stderr.split())[:200]}")
        if not errors:
            self._state_path().unlink(missing_ok=True)
        return errors

    def __enter__(self) -> "DockerTestbed":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    # -- state -----------------------------------------------------------------------------
    def _save(self) -> None:
        with safefs.open_dir(docker_state_dir(), create=True, mode=0o700) as d:
            d.write_json(self._state_path().name, {"backend": "docker", "host_like": self.host_like, "id": self.id, "subnet": str(self.subnet),
                                                   "pid": os.getpid(), "starttime": procid.starttime(os.getpid()), "n_nodes": self.n_nodes,
                                                   **self._made})

    @classmethod
    def from_state(cls, state: dict) -> "DockerTestbed":
        state = DockerState.model_validate(state).model_dump()
        tb = cls(n_nodes=max(1, int(state.get("n_nodes", 1))), tb_id=str(state["id"]), host_like=bool(state.get("host_like")))
        if state.get("subnet") not in (None, "None"):
            tb.subnet = ipaddress.ip_network(state["subnet"])
        tb._made = {"containers": [str(c) for c in state.get("containers", [])], "network": state.get("network"),
                    "ports": dict(state.get("ports") or {})}
        return tb

    @classmethod
    def attach(cls, tb_id: str) -> "DockerTestbed":
        """The running testbed ``tb_id`` (its nodes looked up). Raises FaultlabError."""
        st = next((x for x in list_docker_testbeds() if x["id"] == tb_id), None)
        if st is None:
            raise FaultlabError(f"no docker testbed {tb_id!r}", field="--name", fix="see `faultlab testbed status`")
        tb = cls.from_state(st)
        cli = dockerd.client()
        for i in range(tb.n_nodes):
            tb.nodes.append(node_from_container(cli.containers.get(f"fl{tb.id}-n{i}"), name=f"n{i}", work_host=str(tb.work_folder / f"n{i}")))
        return tb


#: the start of an ssh-ed25519 public key blob (RFC 8709: string "ssh-ed25519", string key)
_ED25519_BLOB = b"\0\0\0\x0bssh-ed25519\0\0\0\x20"


def _host_key(out: bytes) -> tuple[str, str] | None:
    """``(kind, base64 key)`` of a whole ``ssh-ed25519 KEY [comment]\\n`` public key
    line (the blob decodes to the key type and a 32-byte key, RFC 8709), or None for
    anything else: an empty, half-written or truncated file."""
    if not out.endswith(b"\n"):
        return None
    parts = out.decode(errors="replace").split()
    if len(parts) < 2 or parts[0] != "ssh-ed25519":
        return None
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(blob) != len(_ED25519_BLOB) + 32 or not blob.startswith(_ED25519_BLOB):
        return None
    return parts[0], parts[1]


def _listening(addr: str, port: int) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=1):
            return True
    except OSError:
        return False


def _tar(files: dict[str, tuple[bytes, int]], dirs: dict[str, int]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for d, mode in dirs.items():
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, mode
            t.addfile(ti)
        for name, (data, mode) in files.items():
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), mode
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class DockerState(BaseModel):
    """Schema of a docker testbed's state file (read back untrusted)."""

    model_config = ConfigDict(extra="ignore")
    backend: Literal["docker"]
    host_like: bool = False
    id: str = Field(pattern=r"^[0-9a-f]{1,4}$")
    subnet: Optional[str] = None
    pid: int = Field(ge=1)
    starttime: Optional[int] = None
    n_nodes: int = Field(ge=1, le=64)
    containers: list[str] = Field(default_factory=list, max_length=64)
    network: Optional[str] = None
    #: node name -> the host side of its veth (host-like nodes: pinned by faultlab.nodes.antispoof)
    ports: dict[Annotated[str, Field(pattern=r"^n[0-9]{1,2}$")], Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,15}$")]] = \
        Field(default_factory=dict, max_length=64)


def docker_state_dir() -> Path:
    return state_dir() / "docker"


def work_base() -> Path:
    """The folder of the docker testbeds' node work folders: ``$FAULTLAB_NODE_WORK_BASE``,
    else ``$FAULTLAB_STATE_DIR/node-work`` when the state folder is set, else
    ``/var/lib/faultlab/testbeds`` (on the disk: /run is a tmpfs of RAM on most hosts and
    holds root's leases)."""
    env = os.environ.get(WORK_BASE_ENV) or (os.environ.get("FAULTLAB_STATE_DIR") and
                                            str(Path(os.environ["FAULTLAB_STATE_DIR"]) / "node-work"))
    return Path(env or "/var/lib/faultlab/testbeds")


def node_limits(n_nodes: int) -> tuple[int, int]:
    """(most processes, most bytes of memory and swap) of each of ``n_nodes`` docker
    nodes: NODE_PIDS, and half the host's memory shared by the nodes (at least 1 GiB),
    or ``$FAULTLAB_NODE_PIDS`` / ``$FAULTLAB_NODE_MEMORY`` (bytes, or ``512m``, ``4g``).
    Raises BadInput naming the variable when it is not a positive count or size."""
    pids = os.environ.get(PIDS_ENV, str(NODE_PIDS))
    if not pids.isdigit() or not 16 <= int(pids) <= 1 << 22:
        raise BadInput(f"{PIDS_ENV}={pids!r}", field=PIDS_ENV, fix="a count of processes from 16 to 4194304, e.g. 4096")
    raw = os.environ.get(MEMORY_ENV)
    if raw is None:
        return int(pids), max(1 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (2 * max(1, n_nodes)))
    m = re.fullmatch(r"(\d+)([kmg]?)", raw.strip().lower())
    memory = int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)] if m else 0
    if memory < 64 << 20:
        raise BadInput(f"{MEMORY_ENV}={raw!r}", field=MEMORY_ENV, fix="bytes of memory a node may use, at least 64m, e.g. 4g")
    return int(pids), memory


def list_docker_testbeds() -> list[dict]:
    """State records of docker testbeds on this host that pass the checks: a trusted
    folder (faultlab.safefs: no links, owned by root or us, closed to others), a
    regular file named by its id, the DockerState schema. Others are skipped."""
    out = []
    try:
        d = safefs.open_dir(docker_state_dir())
    except (FileNotFoundError, safefs.UntrustedPath):
        return out
    with d:
        for name in sorted(d.listdir()):
            if not name.endswith(".json"):
                continue
            try:
                st = DockerState.model_validate(d.read_json(name, max_bytes=64 * 1024))
            except (OSError, ValueError, safefs.UntrustedPath):
                continue
            if name == f"{st.id}.json" and all(c == f"fl{st.id}-n{i}" for i, c in enumerate(st.containers)):
                out.append(st.model_dump())
    return out


def recover_docker_testbeds(only_dead: bool = True) -> list[str]:
    """Remove docker testbeds whose controller is gone (all with ``only_dead=False``),
    and, when faultlab's daemon answers, the ones no state file records any more
    (:func:`reap_orphans`); returns their ids. No daemon is started."""
    removed = []
    for st in list_docker_testbeds():
        if only_dead and procid.alive(st["pid"], st.get("starttime")):
            continue
        tb = DockerTestbed.from_state(st)
        if not tb.down():
            removed.append(tb.id)
    if dockerd.running():
        removed += reap_orphans(dockerd.client(timeout_s=30))
    return removed


_CONTROLLER_RE = re.compile(r"^([0-9]{1,10}):([0-9]{0,20})$")


def _orphaned(labels: dict) -> bool:
    """Whether a testbed network's labels say nobody owns it any more: its state file
    is gone and the process that made it is dead (PID and start time,
    ``faultlab.procid.alive``). False for a network made before these labels existed
    (nothing to judge by) or with a malformed label."""
    state, ctl = labels.get(STATE_LABEL), _CONTROLLER_RE.match(labels.get(CONTROLLER_LABEL) or "")
    if not state or not os.path.isabs(state) or ctl is None:
        return False
    start = int(ctl.group(2)) if ctl.group(2) else None
    return _gone(state) and not procid.alive(int(ctl.group(1)), start)


def _gone(path: str) -> bool:
    """Whether ``path`` is known not to exist (ENOENT/ENOTDIR); a path we may not look
    at (EACCES) or any other error is *not* gone."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def reap_orphans(cli) -> list[str]:
    """Remove testbed networks nobody owns (:func:`_orphaned`: no state file, maker
    dead; e.g. a controller SIGKILLed during ``up`` whose state folder was removed
    afterwards, so neither ``down`` nor ``faultlab recover`` can find it), with the
    containers the same maker made on them.

    Each dockerd start would otherwise make their bridge (``fl<id>br``) again. Only
    objects carrying faultlab's testbed label and the same maker label are touched.
    Returns the ids of the testbeds removed; one that cannot be removed is left (and
    tried again next time). Only as root (the state folders are root's: another user
    cannot tell a live state file from a gone one). Best effort: an error of the daemon
    ends it and is not raised."""
    if os.geteuid() != 0:
        return []
    try:
        return _reap(cli)
    except Exception:  # noqa: BLE001 - a cleanup of leftovers never fails the caller (up, recover)
        return []


def _reap(cli) -> list[str]:
    import docker  # optional dependency (faultlab[docker]): only docker testbeds need it

    removed: list[str] = []  # testbed ids
    for net in cli.networks.list(filters={"label": LABEL}):
        labels = net.attrs.get("Labels") or {}
        if not _orphaned(labels):
            continue
        mine = {"label": [f"{LABEL}={labels[LABEL]}", f"{CONTROLLER_LABEL}={labels[CONTROLLER_LABEL]}"]}
        try:
            for c in cli.containers.list(all=True, filters=mine):
                c.remove(force=True)
            net.remove()
            removed.append(labels[LABEL])
        except docker.errors.APIError:
            continue
    return removed
