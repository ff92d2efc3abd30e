"""``gpu-clock-cap`` and ``gpu-power-cap``: a slow GPU, through ``nvidia-smi``.

Source: the nvidia-smi(1) manual (https://docs.nvidia.com/deploy/nvidia-smi/index.html),
``nvidia-smi --help-query-gpu`` / ``--help-query-supported-clocks``, and the NVML device
commands behind them (``nvmlDeviceSetGpuLockedClocks``, ``nvmlDeviceResetGpuLockedClocks``,
``nvmlDeviceSetPowerManagementLimit``; NVML API reference, "Device Commands"). Both
need root on the node (NVML answers ``NVML_ERROR_NO_PERMISSION`` otherwise; nvidia-smi
exits 4).

``gpu-clock-cap`` (:class:`GpuClockCap`): locked graphics clocks,
``nvidia-smi -i GPU -lgc MIN,MAX`` (MHz; "Volta or newer fully supported devices").
MIN is the lowest supported graphics clock (``--query-supported-clocks=graphics``), so
an idle GPU still clocks down and the fault is a *cap*, not a pin; MAX is
``--clock-mhz``. Revert: ``nvidia-smi -i GPU -rgc`` (idempotent: "resets the gpu clock
to the default value"). Severity: ``clocks.max.sm before / cap`` (>= 1, larger is
slower; 2.0 for a cap at half the maximum clock).

``gpu-power-cap`` (:class:`GpuPowerCap`): the software power limit,
``nvidia-smi -i GPU -pl W`` (W, within ``power.min_limit..power.max_limit``). Revert
writes back *exactly* the ``power.limit`` read before injecting (the very string
nvidia-smi printed, e.g. ``250.00``), not ``power.default_limit``: a limit somebody set
before faultlab came is restored, not clobbered. Severity: ``power.limit before /
cap`` (>= 1 when the cap lowers the limit).

Ownership and its limits (read before trusting a revert):

- The locked-clock range cannot be read back: no ``--query-gpu`` field reports a
  ``-lgc`` lock (``clocks_event_reasons.applications_clocks_setting`` concerns
  application clocks, ``-ac``, and is recorded as evidence only). faultlab therefore
  treats a GPU as *held* when a faultlab lease of the same type names it (any node of
  the same lease host: local and netns nodes share the host's GPUs) and refuses a
  second fault there (``Refused``). A lock set by a person or another tool
  (``nvidia-smi -lgc``, DCGM) is invisible, and ``-rgc`` at revert resets it too.
- ``verify`` of a clock cap can only check that ``clocks.sm`` is at or below the cap
  (an idle GPU passes trivially); ``reverted`` confirms the reset by re-issuing the
  idempotent ``-rgc`` and reporting the GPU as left behind when the driver refuses.
  ``perf/gpu_check.py`` is the real check: it measures matmul throughput on a GPU
  under each fault and after revert.
- Without persistence mode (``persistence_mode`` Disabled) the driver may drop both
  settings when its last client exits; the state found is recorded in the evidence.

Every command is an argv with the absolute path of ``nvidia-smi`` found on the node
at probe time (``command -v``), so the lease's revert script, run by the on-node ``sh``
watchdog with whatever ``PATH`` it has, runs the same program.
"""

from __future__ import annotations

import csv
import io
import math
import re
import time
from typing import Any

from faultlab.errors import BadInput, NodeError, Refused
from faultlab.injectors.base import Cmd, Injector, Plan
from faultlab.nodes import Node

#: what ``--query-gpu`` reads (``clocks_event_reasons.*`` is spelled
#: ``clocks_throttle_reasons.*`` by drivers older than R535; both are tried)
REASON_FIELD = "clocks_event_reasons.applications_clocks_setting"
OLD_REASON_FIELD = "clocks_throttle_reasons.applications_clocks_setting"
QUERY_FIELDS = (
    "index",
    "name",
    "clocks.sm",
    "clocks.max.sm",
    REASON_FIELD,
    "power.limit",
    "power.default_limit",
    "power.min_limit",
    "power.max_limit",
    "power.draw",
    "persistence_mode",
)
#: clocks move in steps (about 15 MHz on recent GPUs); a locked clock may read one step above the cap
CLOCK_TOLERANCE_MHZ = 15
#: nvidia-smi prints watts with 2 decimals; verify allows this much slack, revert none
POWER_TOLERANCE_W = 0.5
_NA = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]"}


# -- parsing of CLI-style input ---------------------------------------------------------
def parse_gpu_index(target: str | int | None) -> int:
    """``None`` -> 0; ``"0"``, ``"gpu:1"``, ``1`` -> the nvidia-smi index (int >= 0).
    Raises BadInput naming ``--target``."""
    if target is None or (isinstance(target, str) and not target.strip()):
        return 0
    if isinstance(target, bool):
        raise BadInput(f"{target!r} is not a GPU index", field="--target", fix="give a GPU index, e.g. --target 0 or --target gpu:1")
    if isinstance(target, int):
        if target < 0:
            raise BadInput(f"{target} is negative", field="--target", fix="give a GPU index >= 0, e.g. --target 0")
        return target
    s = str(target).strip().lower()
    m = re.fullmatch(r"(?:gpu:?)?(\d+)", s)
    if not m:
        raise BadInput(f"{target!r} is not a GPU index", field="--target", fix="give a GPU index as nvidia-smi -L numbers them, e.g. --target 0 or --target gpu:1")
    return int(m.group(1))


def parse_mhz(value: str | int | float, field: str = "--clock-mhz") -> int:
    """A clock in MHz: a whole number > 0 (``"900"``, ``"900MHz"``, ``900``).
    Raises BadInput naming ``field``."""
    fix = "give a whole number of MHz, e.g. 900"
    if isinstance(value, bool) or value is None:
        raise BadInput(f"{value!r} is not a clock", field=field, fix=fix)
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise BadInput(f"{value!r} is not a whole number of MHz", field=field, fix=fix)
        value = int(value)
    if isinstance(value, int):
        n = value
    else:
        s = str(value).strip().lower().removesuffix("mhz").strip()
        if s.startswith("-"):
            raise BadInput(f"{value!r} is negative", field=field, fix=fix)
        if not s.isdigit():
            raise BadInput(f"{value!r} is not a whole number of MHz", field=field, fix=fix)
        n = int(s)
    if n <= 0:
        raise BadInput(f"{value!r} is not positive", field=field, fix=fix)
    return n


def parse_watts(value: str | int | float, field: str = "--power-w") -> float:
    """A power limit in W: a number > 0 with at most 2 decimals (``"200"``,
    ``"212.5"``, ``"200W"``). Raises BadInput naming ``field``."""
    fix = "give watts, e.g. 200 or 212.5"
    if isinstance(value, bool) or value is None:
        raise BadInput(f"{value!r} is not a power", field=field, fix=fix)
    if isinstance(value, (int, float)):
        w = float(value)
        if not math.isfinite(w):
            raise BadInput(f"{value!r} is not a number", field=field, fix=fix)
    else:
        s = str(value).strip().lower().removesuffix("w").strip()
        if s.startswith("-"):
            raise BadInput(f"{value!r} is negative", field=field, fix=fix)
        if not re.fullmatch(r"\d+(?:\.\d*)?|\.\d+", s):
            raise BadInput(f"{value!r} is not a number of watts", field=field, fix=fix)
        w = float(s)
    if w < 0:
        raise BadInput(f"{value!r} is negative", field=field, fix=fix)
    if w == 0:
        raise BadInput(f"{value!r} is not positive", field=field, fix=fix)
    if abs(round(w, 2) - w) > 1e-9:
        raise BadInput(f"{value!r} has more than 2 decimals", field=field, fix="nvidia-smi takes watts to 0.01 W, e.g. 212.5")
    return round(w, 2)


def fmt_watts(w: float) -> str:
    """Watts as given to ``nvidia-smi -pl``: ``200``, ``212.5``."""
    return str(int(w)) if w == int(w) else f"{w:.2f}".rstrip("0")


def _val(text: str | None) -> str | None:
    if text is None:
        return None
    t = text.strip()
    return None if t.lower() in _NA else t


def _num(text: str | None) -> float | None:
    t = _val(text)
    if t is None:
        return None
    m = re.match(r"[-+]?\d+(?:\.\d+)?", t)
    return float(m.group(0)) if m else None


def _int(text: str | None) -> int | None:
    x = _num(text)
    return None if x is None else int(round(x))


def _msg(cp) -> str:
    """nvidia-smi prints most errors on stdout: both streams, last non-empty lines."""
    lines = [l.strip() for l in (cp.stdout or "").splitlines() + (cp.stderr or "").splitlines() if l.strip()]
    lines = [l for l in lines if not l.startswith("Terminating early")] or lines
    return "; ".join(lines[-2:]) if lines else f"rc={cp.returncode}"


# -- the common part of both faults ----------------------------------------------------
class _GpuFault(Injector):
    """A fault on one GPU of a node, through nvidia-smi (see the module doc)."""

    def __init__(self, node: Node, gpu: int | str | None = 0, *, fault_id: str | None = None, nvidia_smi: str = "nvidia-smi"):
        super().__init__(node, fault_id)
        self.gpu = parse_gpu_index(gpu)
        self.nvidia_smi = nvidia_smi
        self._facts: dict | None = None
        self._old_reason_field = False  # driver older than R535: clocks_throttle_reasons.*

    @property
    def target(self) -> str:
        return f"gpu:{self.gpu}"

    # nvidia-smi, by argv, scope "host" (where the GPU device files are)
    def _run(self, argv: list[str], timeout: float = 30.0):
        return self.node.run(list(argv), scope="host", timeout=timeout)

    def _which(self) -> str:
        """The absolute path of nvidia-smi on the node. Raises Refused when missing."""
        cp = self._run(["sh", "-c", 'command -v "$1"', "sh", self.nvidia_smi])
        path = cp.stdout.strip().splitlines()[0] if cp.returncode == 0 and cp.stdout.strip() else ""
        if not path:
            raise Refused(
                f"nvidia-smi not found on node {self.node.name} (no NVIDIA driver there, or it is not on PATH)",
                field="--type",
                fix="install the NVIDIA driver, which ships nvidia-smi, and put nvidia-smi on PATH; on a node without an NVIDIA GPU use another fault type",
            )
        return path

    def _driver_error(self, cp) -> None:
        out = (cp.stdout or "") + (cp.stderr or "")
        if cp.returncode == 9 or "couldn't communicate with the NVIDIA driver" in out:
            raise Refused(
                f"nvidia-smi on node {self.node.name} cannot reach the NVIDIA driver: {_msg(cp)}",
                field="--type", fix="load the NVIDIA driver there (nvidia-smi must work) or pick a node with a GPU",
            )

    def _list_gpus(self, smi: str) -> dict[int, str]:
        """``nvidia-smi -L``: {index: name}. An empty dict when it finds no device."""
        cp = self._run([smi, "-L"])
        if cp.returncode != 0:
            if cp.returncode == 6 or "No devices were found" in (cp.stdout + cp.stderr):
                return {}
            self._driver_error(cp)
            raise NodeError(f"nvidia-smi -L failed on node {self.node.name}: {_msg(cp)}", field="node")
        gpus = {}
        for line in cp.stdout.splitlines():
            m = re.match(r"GPU (\d+): (.*?)(?: \(UUID: [^)]*\))?\s*$", line)
            if m:
                gpus[int(m.group(1))] = m.group(2)
        return gpus

    def query(self, smi: str | None = None, fields: tuple[str, ...] = QUERY_FIELDS) -> dict[str, str | None]:
        """One ``--query-gpu`` row of this GPU, keyed by the field names of
        ``QUERY_FIELDS`` (values as printed, ``None`` for N/A). Falls back to the
        ``clocks_throttle_reasons.*`` spelling of drivers older than R535."""
        smi = smi or (self._facts or {}).get("nvidia_smi") or self._which()
        asked = [OLD_REASON_FIELD if self._old_reason_field and f == REASON_FIELD else f for f in fields]
        for attempt in (0, 1):
            cp = self._run([smi, "--query-gpu=" + ",".join(asked), "--format=csv,noheader,nounits", "-i", str(self.gpu)])
            if cp.returncode == 0:
                break
            out = cp.stdout + cp.stderr
            if attempt == 0 and "is not a valid field" in out and REASON_FIELD in asked:
                asked = [OLD_REASON_FIELD if f == REASON_FIELD else f for f in asked]
                self._old_reason_field = True
                continue
            self._driver_error(cp)
            if cp.returncode == 6 or "No devices were found" in out:
                raise BadInput(f"GPU {self.gpu} does not exist on node {self.node.name}", field="--target", fix="see nvidia-smi -L")
            raise NodeError(f"nvidia-smi --query-gpu failed on node {self.node.name}: {_msg(cp)}", field="node")
        rows = [r for r in csv.reader(io.StringIO(cp.stdout), skipinitialspace=True) if r]
        if not rows or len(rows[0]) != len(fields):
            raise NodeError(f"unexpected nvidia-smi --query-gpu output on node {self.node.name}: {cp.stdout.strip()[:200]!r}", field="node")
        return {f: _val(v) for f, v in zip(fields, rows[0])}

    def _snapshot(self, smi: str | None = None) -> dict[str, Any]:
        """The GPU's state in explicit units (MHz, W), from one ``--query-gpu`` row."""
        q = self.query(smi)
        return {
            "gpu_name": q["name"],
            "clock_sm_mhz": _int(q["clocks.sm"]),
            "clock_max_sm_mhz": _int(q["clocks.max.sm"]),
            "applications_clocks_setting": q[REASON_FIELD],
            "power_limit_w": _num(q["power.limit"]),
            "power_limit_text": q["power.limit"],
            "power_default_limit_w": _num(q["power.default_limit"]),
            "power_min_limit_w": _num(q["power.min_limit"]),
            "power_max_limit_w": _num(q["power.max_limit"]),
            "power_draw_w": _num(q["power.draw"]),
            "persistence_mode": q["persistence_mode"],
        }

    def _held_by(self) -> str | None:
        """The id of a faultlab fault of this type already on this GPU (its lease)."""
        from faultlab.lifecycle.lease import load_leases

        for le in load_leases(self.node):
            r = le.record
            if le.fault_id == self.fault_id or r.get("fault_type") != self.type:
                continue
            if (r.get("params") or {}).get("gpu_index") == self.gpu:
                return le.fault_id
        return None

    def _check_root(self) -> None:
        cp = self._run(["id", "-u"])
        uid = cp.stdout.strip()
        if cp.returncode == 0 and uid != "0":
            raise Refused(
                f"changing GPU clocks or power limits needs root on node {self.node.name} (faultlab runs there as uid {uid})",
                field="--node", fix="run faultlab as root on that node",
            )

    def _probe_common(self) -> dict:
        """nvidia-smi found, the GPU exists, no faultlab fault of this type holds it."""
        smi = self._which()
        gpus = self._list_gpus(smi)
        if self.gpu not in gpus:
            have = ", ".join(f"{i} ({n})" for i, n in sorted(gpus.items())) or "none"
            raise BadInput(f"GPU {self.gpu} does not exist on node {self.node.name} (GPUs there: {have})", field="--target", fix="give an index that nvidia-smi -L lists, e.g. --target 0")
        holder = self._held_by()
        if holder:
            raise Refused(
                f"GPU {self.gpu} on node {self.node.name} is already under faultlab {self.type} fault {holder}",
                field="--target", fix=f"revert it first: faultlab revert {holder} (or faultlab recover)",
            )
        before = self._snapshot(smi)
        return {"nvidia_smi": smi, "gpu_index": self.gpu, "gpu_name": gpus[self.gpu], "before": before}

    def _wait(self, facts: dict, ok, wait_s: float = 2.0) -> dict:
        """Poll the snapshot until ``ok(snapshot)`` or ``wait_s`` passes."""
        deadline = time.time() + wait_s
        snap = self._snapshot(facts["nvidia_smi"])
        while not ok(snap) and time.time() < deadline:
            time.sleep(0.1)
            snap = self._snapshot(facts["nvidia_smi"])
        return snap

    def final_evidence(self, facts: dict) -> dict:
        s = self._snapshot(facts["nvidia_smi"])
        return {k: s[k] for k in ("clock_sm_mhz", "power_draw_w", "power_limit_w")}


# -- gpu-clock-cap ---------------------------------------------------------------------
class GpuClockCap(_GpuFault):
    """Cap GPU ``gpu``'s SM clock at ``clock_mhz`` MHz with locked graphics clocks
    (``nvidia-smi -i GPU -lgc MIN,MAX``; revert ``-rgc``).

    ``clock_mhz`` must lie within the GPU's supported graphics clocks
    (``--query-supported-clocks``) and ``clocks.max.sm``; ``probe`` raises BadInput
    (naming ``--clock-mhz`` and the valid range) otherwise, BadInput (``--target``) for a
    GPU that does not exist, and Refused when nvidia-smi is missing, the driver is not
    loaded, the node user is not root, or a faultlab clock cap already holds the GPU.
    """

    type = "gpu-clock-cap"
    options = frozenset({"--clock-mhz"})

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        """``opts["--clock-mhz"]``: MHz as a string; ``target``: GPU index (default 0).
        ``force`` is accepted and ignored: a lock made by another tool cannot be seen,
        so there is nothing to force past. Raises BadInput naming the field."""
        from faultlab.injectors import require

        mhz = parse_mhz(require(opts, "--clock-mhz", cls.type), "--clock-mhz")
        return cls(node, mhz, gpu=target, fault_id=fault_id)

    def __init__(self, node: Node, clock_mhz: int | str, gpu: int | str | None = 0, *, fault_id: str | None = None, nvidia_smi: str = "nvidia-smi"):
        super().__init__(node, gpu, fault_id=fault_id, nvidia_smi=nvidia_smi)
        self.clock_mhz = parse_mhz(clock_mhz, "--clock-mhz")

    @property
    def params(self) -> dict:
        f = self._facts or {}
        return {
            "gpu_index": self.gpu,
            "clock_cap_mhz": self.clock_mhz,
            "lock_min_mhz": f.get("lock_min_mhz"),
            "clock_max_before_mhz": f.get("before", {}).get("clock_max_sm_mhz"),
        }

    @property
    def severity(self) -> float:
        """``clocks.max.sm`` before / cap (>= 1; NaN before ``probe``)."""
        mx = (self._facts or {}).get("before", {}).get("clock_max_sm_mhz")
        return float(mx) / self.clock_mhz if mx else float("nan")

    def _supported_min(self, smi: str) -> int | None:
        cp = self._run([smi, "--query-supported-clocks=graphics", "--format=csv,noheader,nounits", "-i", str(self.gpu)])
        if cp.returncode != 0:
            return None
        vals = [_int(l) for l in cp.stdout.splitlines()]
        vals = [v for v in vals if v]
        return min(vals) if vals else None

    def probe(self) -> dict:
        facts = self._probe_common()
        smi, before = facts["nvidia_smi"], facts["before"]
        mx = before["clock_max_sm_mhz"]
        if not mx:
            raise Refused(f"GPU {self.gpu} on node {self.node.name} does not report clocks.max.sm", field="--target", fix="this GPU's clocks cannot be capped with nvidia-smi; try gpu-power-cap")
        lo = self._supported_min(smi)
        rng = f"{lo}..{mx} MHz" if lo else f"at most {mx} MHz"
        if self.clock_mhz > mx:
            raise BadInput(f"{self.clock_mhz} MHz is above GPU {self.gpu}'s maximum SM clock ({mx} MHz)", field="--clock-mhz", fix=f"give {rng}")
        if lo and self.clock_mhz < lo:
            raise BadInput(f"{self.clock_mhz} MHz is below GPU {self.gpu}'s lowest supported clock ({lo} MHz)", field="--clock-mhz", fix=f"give {rng}")
        self._check_root()
        # no supported-clock list (some boards print N/A): pin at the cap
        facts["clock_min_supported_mhz"] = lo
        facts["lock_min_mhz"] = lo if lo else self.clock_mhz
        self._facts = facts
        return facts

    def plan(self, facts: dict) -> Plan:
        self._facts = facts
        smi, g = facts["nvidia_smi"], str(facts["gpu_index"])
        lo = facts["lock_min_mhz"]
        inject = [Cmd((smi, "-i", g, "-lgc", f"{lo},{self.clock_mhz}"), "host", f"lock GPU {g} graphics clock to {lo}..{self.clock_mhz} MHz")]
        revert = [Cmd((smi, "-i", g, "-rgc"), "host", "reset locked graphics clocks (idempotent)")]
        verify = [
            f"clocks.sm <= {self.clock_mhz} MHz (+{CLOCK_TOLERANCE_MHZ}) on GPU {g}; the lock itself cannot be read back "
            "(an idle GPU passes trivially: perf/gpu_check.py measures the slowdown under load)"
        ]
        return Plan(self.fault_id, self.type, self.node.name, self.target, inject, revert, verify)

    def verify(self, facts: dict, wait_s: float = 2.0) -> dict:
        cap = self.clock_mhz + CLOCK_TOLERANCE_MHZ
        after = self._wait(facts, lambda s: s["clock_sm_mhz"] is not None and s["clock_sm_mhz"] <= cap, wait_s)
        ok = after["clock_sm_mhz"] is not None and after["clock_sm_mhz"] <= cap
        keys = ("clock_sm_mhz", "clock_max_sm_mhz", "applications_clocks_setting", "persistence_mode")
        return {
            "gpu_index": facts["gpu_index"],
            "lock_range_mhz": [facts["lock_min_mhz"], self.clock_mhz],
            "before": {k: facts["before"][k] for k in keys},
            "after": {k: after[k] for k in keys},
            "clock_sm_within_cap": ok,
            "lock_readable": False,
            "ok": ok,
        }

    def reverted(self, facts: dict) -> list[str]:
        """The lock cannot be read, so the (idempotent) reset is issued once more: the
        GPU counts as left behind when the driver refuses it."""
        g = str(facts["gpu_index"])
        try:
            cp = self._run([facts["nvidia_smi"], "-i", g, "-rgc"])
        except NodeError as e:
            return [f"GPU {g} locked clocks (reset not confirmed: {e})"]
        if cp.returncode != 0:
            return [f"GPU {g} locked clocks (nvidia-smi -rgc failed: {_msg(cp)})"]
        return []


# -- gpu-power-cap ---------------------------------------------------------------------
class GpuPowerCap(_GpuFault):
    """Cap GPU ``gpu``'s software power limit at ``power_w`` W (``nvidia-smi -i GPU -pl
    W``); revert restores exactly the ``power.limit`` read before injecting.

    ``power_w`` must lie within ``power.min_limit..power.max_limit`` (read in ``probe``;
    BadInput naming ``--power-w`` and the range otherwise). ``probe`` also raises
    BadInput for a GPU that does not exist, and Refused when nvidia-smi is missing, the
    GPU has no settable power limit, the node user is not root, or a faultlab power cap
    already holds the GPU.
    """

    type = "gpu-power-cap"
    options = frozenset({"--power-w"})

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        """``opts["--power-w"]``: watts as a string; ``target``: GPU index (default 0).
        ``force`` is ignored: a limit found is always restored exactly, never refused.
        Raises BadInput naming the field."""
        from faultlab.injectors import require

        w = parse_watts(require(opts, "--power-w", cls.type), "--power-w")
        return cls(node, w, gpu=target, fault_id=fault_id)

    def __init__(self, node: Node, power_w: float | str, gpu: int | str | None = 0, *, fault_id: str | None = None, nvidia_smi: str = "nvidia-smi"):
        super().__init__(node, gpu, fault_id=fault_id, nvidia_smi=nvidia_smi)
        self.power_w = parse_watts(power_w, "--power-w")

    @property
    def params(self) -> dict:
        f = self._facts or {}
        return {"gpu_index": self.gpu, "power_limit_w": self.power_w, "power_limit_before_w": f.get("before", {}).get("power_limit_w")}

    @property
    def severity(self) -> float:
        """``power.limit`` before / cap (NaN before ``probe``)."""
        before = (self._facts or {}).get("before", {}).get("power_limit_w")
        return float(before) / self.power_w if before else float("nan")

    def probe(self) -> dict:
        facts = self._probe_common()
        b = facts["before"]
        if b["power_limit_w"] is None or not re.fullmatch(r"\d+(?:\.\d+)?", b["power_limit_text"] or ""):
            raise Refused(
                f"GPU {self.gpu} on node {self.node.name} reports no settable power limit (power.limit: {b['power_limit_text'] or 'N/A'})",
                field="--target", fix="this GPU's power limit cannot be changed with nvidia-smi; try gpu-clock-cap",
            )
        lo, hi = b["power_min_limit_w"], b["power_max_limit_w"]
        if lo is None or hi is None:
            raise Refused(f"GPU {self.gpu} on node {self.node.name} does not report power.min_limit/power.max_limit", field="--target", fix="try gpu-clock-cap")
        if not (lo <= self.power_w <= hi):
            raise BadInput(
                f"{fmt_watts(self.power_w)} W is outside GPU {self.gpu}'s power limit range {lo:.2f}..{hi:.2f} W",
                field="--power-w", fix=f"give {lo:g}..{hi:g} W",
            )
        self._check_root()
        self._facts = facts
        return facts

    def plan(self, facts: dict) -> Plan:
        self._facts = facts
        smi, g = facts["nvidia_smi"], str(facts["gpu_index"])
        old = facts["before"]["power_limit_text"]
        inject = [Cmd((smi, "-i", g, "-pl", fmt_watts(self.power_w)), "host", f"power limit of GPU {g} to {fmt_watts(self.power_w)} W")]
        revert = [Cmd((smi, "-i", g, "-pl", old), "host", f"power limit back to {old} W, as found (idempotent)")]
        verify = [f"power.limit == {fmt_watts(self.power_w)} W (+-{POWER_TOLERANCE_W}) on GPU {g}"]
        return Plan(self.fault_id, self.type, self.node.name, self.target, inject, revert, verify)

    def verify(self, facts: dict, wait_s: float = 2.0) -> dict:
        def at_cap(s):
            return s["power_limit_w"] is not None and abs(s["power_limit_w"] - self.power_w) <= POWER_TOLERANCE_W

        after = self._wait(facts, at_cap, wait_s)
        keys = ("power_limit_w", "power_default_limit_w", "power_draw_w", "clock_sm_mhz", "persistence_mode")
        return {
            "gpu_index": facts["gpu_index"],
            "requested_w": self.power_w,
            "before": {k: facts["before"][k] for k in keys},
            "after": {k: after[k] for k in keys},
            "ok": at_cap(after),
        }

    def reverted(self, facts: dict) -> list[str]:
        before = facts["before"]["power_limit_w"]
        try:
            now = self._snapshot(facts["nvidia_smi"])["power_limit_w"]
        except (NodeError, BadInput) as e:
            return [f"GPU {facts['gpu_index']} power limit (cannot read it back: {e})"]
        if now is None or abs(now - before) > 0.005:
            return [f"GPU {facts['gpu_index']} power limit {now} W (was {before} W before the fault)"]
        return []
