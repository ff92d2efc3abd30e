"""``io-slow``: a slow disk for some processes (block-I/O throttling through a cgroup).

Mechanism (Linux blk-throttle): the target PIDs move into a new cgroup
``faultlab-<fault_id>`` whose limits cap their I/O to the *whole disk* holding
``--path``, addressed as ``MAJ:MIN``:

- cgroup v1 ``blkio`` (Documentation/admin-guide/cgroup-v1/blkio-controller.rst,
  "Throttling/Upper limit policy"): one line ``"MAJ:MIN VALUE"`` written to each of
  ``blkio.throttle.read_bps_device`` / ``write_bps_device`` (bytes/s) and
  ``read_iops_device`` / ``write_iops_device`` (IO/s), only the caps asked for;
- cgroup v2 ``io`` (Documentation/admin-guide/cgroup-v2.rst, "io.max"): one line
  ``"MAJ:MIN rbps=.. wbps=.. riops=.. wiops=.."`` written to ``io.max``.

The device: ``st_dev`` of ``--path`` (``stat -L`` on the node) names the
filesystem's block device (a block device node such as ``/dev/vda`` names itself); ``/sys/dev/block/MAJ:MIN`` must exist, and a partition is
replaced by its parent disk (blk-throttle takes whole disks only). Filesystems with no
block device (overlay, tmpfs, proc, NFS, btrfs subvolumes: ``st_dev`` major 0) are
refused with BadInput.

What is throttled: direct I/O and reads (a page-cache miss is read in the reader's
context). With cgroup v1, *buffered writes are not throttled*: dirty pages are written
back later by kernel flusher threads outside the target's cgroup; cgroup v2 charges
writeback to the cgroup only when the memory controller is enabled with io.

Revert: the limits are cleared first (``MAJ:MIN 0`` in v1; ``rbps=max ...`` in v2, so
that I/O queued in the throttle is released even if a later step fails), each PID goes
back to the cgroup it was found in, any other process left inside (children forked
during the fault) is swept back to the first target's cgroup, and the faultlab cgroup
is removed. Every step is idempotent and touches only the faultlab cgroup and the
recorded PIDs.

Placement: the faultlab cgroup is made *inside the targets' own cgroup*
(``faultlab.injectors.cgroups.placement``), on v1 and v2 alike, so the limits they
already had keep applying. v2 io.max is hierarchical: the parent's limits hold for the
child by themselves; the targets must be all the processes of their cgroup, which
gets ``+io`` in its ``cgroup.subtree_control`` once they moved out (``-io`` on revert,
before they move back). v1 blk-throttle is *flat* (block/blk-throttle.c: outside the
default hierarchy "all throtl_grps are treated as if they're all separate root
groups"): a child would escape its parent's throttle rules, so the child gets a copy
of every rule of the targets' cgroup, the tightest of theirs and ours where both cap
the same device and direction. A target already under a ``faultlab-`` cgroup in the
io hierarchy is refused (``Refused``).

Severity: ``max(1e8 / tightest byte cap, 1e4 / tightest IOPS cap)``: 1.0 for a
100 MB/s or a 10 000 IO/s cap, 20 for 5 MB/s; larger is worse.
"""

from __future__ import annotations

import os
import re

from faultlab.errors import BadInput, NodeError, Refused
from faultlab.nodes import Node
from faultlab.injectors import cgroups
from faultlab.injectors.base import Cmd, Injector, Plan, write_cmd
from faultlab.injectors.cgroups import BACK_SH, RMDIR_SH, SWEEP_SH
from faultlab.injectors.params import Param, parse_pids
from faultlab.injectors.registry import register

# (A PID's cgroup path comes from /proc/PID/cgroup and is checked by
# cgroups.clean_home before any path is built from it.)

# decimal units are SI (10mb = 10 000 000 bytes/s); binary ones are IEC
_BYTE_UNITS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_BIT_UNITS = {"bit", "bits", "kbit", "mbit", "gbit", "tbit", "kbits", "mbits", "gbits", "kbps", "mbps", "gbps", "bps"}
_NUM = r"(\d+(?:\.\d*)?|\.\d+)"
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

#: v1 throttle file and v2 io.max key of each cap (attribute name -> (file, key))
CAPS = {
    "read_bps": ("blkio.throttle.read_bps_device", "rbps"),
    "write_bps": ("blkio.throttle.write_bps_device", "wbps"),
    "read_iops": ("blkio.throttle.read_iops_device", "riops"),
    "write_iops": ("blkio.throttle.write_iops_device", "wiops"),
}


def parse_bytes_rate(text, field: str = "--read-bps") -> int:
    """Parse a disk rate into bytes/s (int >= 1): ``"10mb"`` -> 10_000_000.

    Units: ``b``, ``kb``, ``mb``, ``gb``, ``tb`` (SI, powers of 1000) and ``kib``,
    ``mib``, ``gib``, ``tib`` (powers of 1024), any case except that ``Kb``/``Mb``/
    ``Gb`` (capital prefix, small b) read as bits and are refused. Raises BadInput
    (naming ``field``) for: no unit (``"10"``), a space before the unit
    (``"10 mb"``), bit units (``"10mbit"``, ``"10mbps"``: bits are for network rates),
    a ``/s`` suffix, an unknown unit, a negative or zero value."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        raise BadInput(f"{text!r} has no unit", field=field, fix="write bytes/s with a unit, e.g. 10mb (10 MB/s), 512kb or 1gb")
    s = str(text).strip()
    if not s:
        raise BadInput("empty", field=field, fix="write bytes/s with a unit, e.g. 10mb")
    if s.startswith("-"):
        raise BadInput(f"{text!r} is negative", field=field, fix="give a positive rate such as 10mb")
    if re.fullmatch(_NUM, s):
        raise BadInput(f"{text!r} has no unit", field=field, fix="write bytes/s with a unit, e.g. 10mb (10 MB/s), 512kb or 1gb")
    if re.fullmatch(_NUM + r"\s+\S+", s):
        raise BadInput(f"{text!r} has a space before its unit", field=field, fix="write e.g. 10mb")
    m = re.fullmatch(_NUM + r"([A-Za-z/]+)", s)
    if not m:
        raise BadInput(f"{text!r} is not a rate", field=field, fix="write bytes/s with a unit, e.g. 10mb, 512kb or 1gb")
    value, raw = float(m.group(1)), m.group(2)
    unit = raw.lower()
    if unit.endswith("/s") or unit.endswith("/sec"):
        raise BadInput(f"{text!r} has a /s", field=field, fix=f"the option is already per second: write {m.group(1)}{unit.split('/')[0]}")
    if unit in _BIT_UNITS or re.fullmatch(r"[KMGT]b", raw):
        raise BadInput(
            f"{text!r} is in bits; bits are for network rates (nic-slow --rate)",
            field=field, fix="give a disk rate in bytes/s, e.g. 10mb for 10 MB/s (80 Mbit/s = 10mb)",
        )
    if unit not in _BYTE_UNITS:
        raise BadInput(f"unknown unit {raw!r} in {text!r}", field=field, fix="use b, kb, mb, gb (x1000) or kib, mib, gib (x1024)")
    n = int(round(value * _BYTE_UNITS[unit]))
    if n < 1:
        raise BadInput(f"{text!r} is not positive", field=field, fix="give a positive rate such as 10mb")
    if n > U64_MAX:
        raise BadInput(f"{text!r} is too large", field=field, fix="give a rate below 16 EB/s")
    return n


def parse_iops(text, field: str = "--read-iops") -> int:
    """Parse an IOPS cap: a positive whole number of I/O operations per second
    (``"200"``), at most 2**32-1 (the v1 throttle file's limit). Raises BadInput."""
    s = str(text).strip()
    if s.startswith("-"):
        raise BadInput(f"{text!r} is negative", field=field, fix="give a positive whole number of IO/s, e.g. 200")
    if not s.isdigit():
        raise BadInput(f"{text!r} is not a whole number of IO/s", field=field, fix="give a positive integer, e.g. 200 (no unit)")
    n = int(s)
    if n < 1:
        raise BadInput(f"{text!r} is not positive", field=field, fix="give a positive integer, e.g. 200")
    if n > U32_MAX:
        raise BadInput(f"{text!r} is too large", field=field, fix=f"give at most {U32_MAX}")
    return n


def block_device_of(node: Node, path: str, field: str = "--path") -> dict:
    """The whole disk holding ``path`` on ``node`` (or, for a block device node, that
    device's disk): ``{"dev": "MAJ:MIN", "name":
    "vda", "fs_dev": "MAJ:MIN of the filesystem (a partition or the disk)"}``.

    Raises BadInput (naming ``field``) when the path does not exist or its filesystem
    has no block device (overlay, tmpfs, ...); NodeError when ``stat`` cannot run."""
    cp = node.run(["stat", "-L", "-c", "%d %t %T %F", "--", path], timeout=10)
    if cp.returncode != 0:
        raise BadInput(f"no such path {path!r} on node {node.name}", field=field, fix="give an existing file or folder on the disk to slow, e.g. the job's data or checkpoint folder")
    try:
        d, rmaj, rmin, ftype = cp.stdout.strip().split(" ", 3)
        if ftype == "block special file":  # the device node itself, e.g. /dev/nvme0n1
            major, minor = int(rmaj, 16), int(rmin, 16)
        else:
            major, minor = os.major(int(d)), os.minor(int(d))
    except ValueError:
        raise NodeError(f"stat printed {cp.stdout.strip()!r} for {path!r} on node {node.name}", field=field) from None
    fs = f"{major}:{minor}"
    if major == 0 or not node.exists(f"/sys/dev/block/{fs}"):
        fst = node.run(["stat", "-f", "-L", "-c", "%T", "--", path], timeout=10)
        fstype = fst.stdout.strip() if fst.returncode == 0 and fst.stdout.strip() else "a filesystem"
        raise BadInput(
            f"{path!r} is on {fstype} (device {fs}) with no block device",
            field=field,
            fix="give a path on a disk-backed filesystem (ext4, xfs), e.g. a folder under /var/tmp; `findmnt -T PATH` shows a path's device",
        )
    disk = fs
    if node.exists(f"/sys/dev/block/{fs}/partition"):
        try:  # the partition's sysfs folder sits inside its disk's
            disk = node.read_file(f"/sys/dev/block/{fs}/../dev").strip()
        except OSError as e:
            raise NodeError(f"cannot find the disk of partition {fs} on node {node.name}: {e}", field=field) from None
    name = disk
    try:
        for line in node.read_file(f"/sys/dev/block/{disk}/uevent").splitlines():
            if line.startswith("DEVNAME="):
                name = line.split("=", 1)[1]
    except OSError:
        pass
    return {"dev": disk, "name": name, "fs_dev": fs}


def _rules_v1(text: str) -> dict[str, int]:
    """``"254:0 5000000\\n..."`` -> {"254:0": 5000000}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _rules_v2(text: str) -> dict[str, dict[str, str]]:
    """io.max lines -> {"254:0": {"rbps": "5000000", "wbps": "max", ...}}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if parts:
            out[parts[0]] = dict(kv.split("=", 1) for kv in parts[1:] if "=" in kv)
    return out


@register
class IoSlow(Injector):
    """Throttle the I/O of ``pids`` to the disk holding ``path``: ``read_bps`` /
    ``write_bps`` in bytes/s, ``read_iops`` / ``write_iops`` in IO/s (None: no cap;
    at least one is required).

    Raises BadInput for no PID, no cap or a non-positive cap (and, at probe, for a
    missing process or a path with no block device); Refused when no blkio/io controller
    is usable, a target is already under a faultlab cgroup, or its cgroup cannot be
    nested under (cgroups.placement). ``force`` is accepted and has no effect: the
    targets' own limits are kept, never lifted, so there is nothing to force."""

    type = "io-slow"
    PARAMS = (
        Param("path", "a path on the block device to throttle", "PATH", required=True),
        Param("read_bps", "read cap in bytes/s, e.g. 10mb (10 MB/s), 512kb, 1mib", "RATE", parse_bytes_rate, bounds=(1, U64_MAX)),
        Param("write_bps", "write cap in bytes/s, e.g. 10mb", "RATE", parse_bytes_rate, bounds=(1, U64_MAX)),
        Param("read_iops", "read cap in IO/s", "IOPS", parse_iops, bounds=(1, U32_MAX), kind="integer"),
        Param("write_iops", "write cap in IO/s", "IOPS", parse_iops, bounds=(1, U32_MAX), kind="integer"),
    )
    targets = "rank"
    target_help = "PIDs 1,2 (with --path)"
    color = "#8e6c8a"

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        path = cls.param("path").read(opts, cls.type)
        caps = {p.name: p.read(opts, cls.type) for p in cls.PARAMS if p.name in CAPS and opts.get(p.option) is not None}
        if not caps:
            raise BadInput("io-slow needs at least one cap", field="--write-bps", fix="give --read-bps/--write-bps (bytes/s, e.g. 10mb) or --read-iops/--write-iops (IO/s)")
        return cls(node, parse_pids(target), path, **caps, fault_id=fault_id, force=force)

    @classmethod
    def support(cls, node: dict) -> dict[str, tuple[bool, str]]:
        ok = bool(node["cgroup_io"]) and node["cgroup_io_writable"]
        why = f"io controller {node['cgroup_io']}" if ok else (
            "no usable blkio/io cgroup controller" if not node["cgroup_io"] else
            f"cannot write {node['cgroup_io_at'] or 'the io cgroup'}: needs root (or sudo) and a writable cgroup")
        return {cls.type: (ok, why)}

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        return (f"{len(evidence.get('pids_in_cgroup') or [])} PID(s) in the fault's cgroup; throttle read back on "
                f"{evidence.get('device')}: {evidence['limits']} (checked = requested)")

    def __init__(self, node: Node, pids: list[int], path: str, *, read_bps: int | None = None, write_bps: int | None = None,
                 read_iops: int | None = None, write_iops: int | None = None, fault_id: str | None = None,
                 label: str | None = None, force: bool = False):
        super().__init__(node, fault_id)
        if not pids:
            raise BadInput("no target process", field="--target", fix="give PIDs, e.g. --target 1234,5678")
        if not path:
            raise BadInput("missing", field="--path", fix="give a path on the disk to slow, e.g. --path /data")
        self.pids = [int(p) for p in pids]
        self.path = str(path)
        self.read_bps, self.write_bps, self.read_iops, self.write_iops = read_bps, write_bps, read_iops, write_iops
        if not self.caps:
            raise BadInput("io-slow needs at least one cap", field="--write-bps", fix="give --read-bps/--write-bps (bytes/s, e.g. 10mb) or --read-iops/--write-iops (IO/s)")
        for k, v in self.caps.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise BadInput(f"{v!r} is not a positive integer", field="--" + k.replace("_", "-"), fix="give e.g. --write-bps 10mb or --write-iops 200")
        self.label = label
        self.force = force
        self.device: str | None = None  # MAJ:MIN, known after probe

    @property
    def caps(self) -> dict[str, int]:
        """The caps asked for: ``read_bps``/``write_bps`` (bytes/s), ``read_iops``/``write_iops`` (IO/s)."""
        return {k: getattr(self, k) for k in CAPS if getattr(self, k) is not None}

    @property
    def target(self) -> str:
        return self.label or "pid:" + ",".join(map(str, self.pids))

    @property
    def params(self) -> dict:
        p = {"path": self.path, "pids": self.pids, "device": self.device}
        units = {"read_bps": "read_bytes_per_s", "write_bps": "write_bytes_per_s", "read_iops": "read_iops", "write_iops": "write_iops"}
        p.update({units[k]: v for k, v in self.caps.items()})
        return p

    #: what ``severity`` measures, with its unit (the dataset card lists it per fault type)
    severity_unit = "ratio (100 MB/s over the tightest bandwidth cap, or 10k IOPS over the tightest IOPS cap; the larger)"

    @property
    def severity(self) -> float:
        bps = [v for k, v in self.caps.items() if k.endswith("_bps")]
        iops = [v for k, v in self.caps.items() if k.endswith("_iops")]
        parts = ([1e8 / min(bps)] if bps else []) + ([1e4 / min(iops)] if iops else [])
        return max(parts) if parts else 0.0

    # -- lifecycle -----------------------------------------------------------------
    def probe(self) -> dict:
        h = cgroups.find_hierarchy(self.node, "blkio")
        if h is None:
            raise Refused(
                f"no usable blkio/io cgroup controller on node {self.node.name}", field="--type",
                fix="mount the v1 blkio controller or enable +io in the v2 root's cgroup.subtree_control; see faultlab doctor",
            )
        if h.version == 1 and not self.node.exists(f"{h.mount}/blkio.throttle.read_bps_device"):
            raise Refused(f"the kernel of node {self.node.name} has no blk-throttle (no blkio.throttle.* files)", field="--type", fix="use a kernel built with CONFIG_BLK_DEV_THROTTLING")
        dev = block_device_of(self.node, self.path)
        self.device = dev["dev"]
        where = cgroups.placement(self.node, h, self.pids, self.fault_id, "io")
        home = where["home"]
        return {
            "hierarchy": {"version": h.version, "mount": h.mount, "controller": h.controller},
            "orig": where["orig"],
            "starts": where["starts"],
            "home": home,
            "cgroup": where["cgroup"],
            "enable_subtree": where["enable"],
            "inherited": self._inherited_v1(h, home) if h.version == 1 else {},
            "device": dev,
        }

    def _inherited_v1(self, h: cgroups.Hierarchy, home: str) -> dict[str, dict[str, int]]:
        """v1: the throttle rules of the targets' own cgroup ``home`` (flat blk-throttle:
        only its own rules hold a process in it), ``{file: {"MAJ:MIN": value}}``."""
        out = {}
        if not home.strip("/"):
            return out
        for f, _ in CAPS.values():
            try:
                rules = {dev: v for dev, v in _rules_v1(self.node.read_file(f"{h.path(home)}/{f}")).items() if v > 0}
            except OSError:
                continue
            if rules:
                out[f] = rules
        return out

    def effective(self, facts: dict) -> dict[str, dict[str, int]]:
        """v1: every rule the faultlab cgroup gets, ``{file: {"MAJ:MIN": value}}``: the
        targets' own cgroup's rules, with ours on the device (the tightest of both)."""
        dev = facts["device"]["dev"]
        out = {f: dict(r) for f, r in facts.get("inherited", {}).items()}
        for k, v in self.caps.items():
            f = CAPS[k][0]
            rules = out.setdefault(f, {})
            rules[dev] = min(v, rules.get(dev, v))
        return out

    @staticmethod
    def _h(facts: dict) -> cgroups.Hierarchy:
        return cgroups.Hierarchy(**facts["hierarchy"])

    def plan(self, facts: dict) -> Plan:
        h, d, dev = self._h(facts), facts["cgroup"], facts["device"]["dev"]
        home = facts.get("home") or next(iter(facts["orig"].values()))
        enable, disable = cgroups.subtree_cmds(h, home, bool(facts.get("enable_subtree")))
        inject = [Cmd(("mkdir", d), "host", "faultlab cgroup")]
        moves = [cgroups.move_cmd(d, pid, start) for pid, start in zip(self.pids, facts["starts"])]
        if h.version == 1:
            rules = [(f, rdev, v) for f, rs in sorted(self.effective(facts).items()) for rdev, v in sorted(rs.items())]
            inject += [write_cmd(f"{d}/{f}", f"{rdev} {v}", "cap" if rdev == dev else "the targets' own cap") for f, rdev, v in rules]
            inject += moves
            clear = [write_cmd(f"{d}/{f}", f"{rdev} 0", f"clear {f}") for f, rdev, _ in rules]
        else:
            line = " ".join([dev] + [f"{CAPS[k][1]}={v}" for k, v in self.caps.items()])
            limit = [write_cmd(f"{d}/io.max", line, "io.max caps")]
            # the controller can be enabled only once the targets left their cgroup
            inject += (moves + enable + limit) if enable else (limit + moves)
            clear = [write_cmd(f"{d}/io.max", f"{dev} rbps=max wbps=max riops=max wiops=max", "clear io.max")]
        revert = clear + disable + [Cmd(("sh", "-c", BACK_SH, "sh", str(pid), f"{d}/cgroup.procs", h.path(cg).rstrip("/") + "/cgroup.procs"), "host", f"{pid} back")
                                    for pid, cg in facts["orig"].items()]
        back = h.path(home).rstrip("/") + "/cgroup.procs"
        revert.append(Cmd(("sh", "-c", SWEEP_SH, "sh", f"{d}/cgroup.procs", back, back), "host", "sweep the rest back"))
        revert.append(Cmd(("sh", "-c", RMDIR_SH, "sh", d), "host", "remove the faultlab cgroup"))
        what = ", ".join(f"{k}={v}" for k, v in self.caps.items())
        return Plan(
            self.fault_id, self.type, self.node.name, self.target, inject, revert,
            [f"targets in {d}; its throttle limits read back {dev} {what}"],
        )

    def _readback(self, facts: dict) -> dict[str, int | str | None]:
        h, d, dev = self._h(facts), facts["cgroup"], facts["device"]["dev"]
        out: dict[str, int | str | None] = {}
        if h.version == 1:
            for k in self.caps:
                try:
                    out[k] = _rules_v1(self.node.read_file(f"{d}/{CAPS[k][0]}")).get(dev)
                except OSError:
                    out[k] = None
        else:
            try:
                rule = _rules_v2(self.node.read_file(f"{d}/io.max")).get(dev, {})
            except OSError:
                rule = {}
            for k in self.caps:
                v = rule.get(CAPS[k][1])
                out[k] = int(v) if v is not None and v.isdigit() else v
        return out

    def _expected(self, facts: dict) -> dict[str, int]:
        """The caps the read-back must show on the device (v1: tightened by the targets'
        own rules)."""
        if self._h(facts).version != 1:
            return self.caps
        eff, dev = self.effective(facts), facts["device"]["dev"]
        return {k: eff[CAPS[k][0]][dev] for k in self.caps}

    def verify(self, facts: dict) -> dict:
        inside = set(cgroups.procs(self.node, facts["cgroup"]))
        moved = [p for p in self.pids if p in inside]
        got = self._readback(facts)
        return {
            "device": facts["device"],
            "pids_in_cgroup": moved,
            "limits": got,
            "ok": len(moved) == len(self.pids) and got == self._expected(facts),
        }

    def final_evidence(self, facts: dict) -> dict:
        """Bytes and IOs served to the cgroup on the device during the fault (v1
        ``blkio.throttle.io_service_bytes`` / ``io_serviced``; v2 ``io.stat``)."""
        h, d, dev = self._h(facts), facts["cgroup"], facts["device"]["dev"]
        out = {}
        files = ["blkio.throttle.io_service_bytes", "blkio.throttle.io_serviced"] if h.version == 1 else ["io.stat"]
        for f in files:
            try:
                text = self.node.read_file(f"{d}/{f}")
            except OSError:
                continue
            out[f] = [line for line in text.splitlines() if line.startswith(dev + " ") or line.startswith(dev + "\t")]
        return out

    def reverted(self, facts: dict) -> list[str]:
        d = facts["cgroup"]
        return [f"cgroup {d}"] if self.node.exists(d) else []
