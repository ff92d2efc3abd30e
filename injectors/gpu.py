"""A slow GPU through ``nvidia-smi``: what ``gpu-clock-cap`` (``faultlab.injectors.gpu_clock``)
and ``gpu-power-cap`` (``faultlab.injectors.gpu_power``) share: the GPU fault base
(``GpuFault``: the GPU index, nvidia-smi found at probe, the state read before, a GPU
held by another faultlab lease), the query fields and their parsers.

Source: the nvidia-smi(1) manual (https://docs.nvidia.com/deploy/nvidia-smi/index.html),
``nvidia-smi --help-query-gpu`` / ``--help-query-supported-clocks``, and the NVML device
commands behind them (``nvmlDeviceSetGpuLockedClocks``, ``nvmlDeviceResetGpuLockedClocks``,
``nvmlDeviceSetPowerManagementLimit``; NVML API reference, "Device Commands"). Both
need root on the node (NVML answers ``NVML_ERROR_NO_PERMISSION`` otherwise; nvidia-smi
exits 4).

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
import re
import time
from typing import Any

from faultlab.errors import BadInput, NodeError, Refused
from faultlab.injectors.base import Injector
from faultlab.lifecycle.lease import load_leases
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


def as_int(text: str | None) -> int | None:
    x = _num(text)
    return None if x is None else int(round(x))


def smi_error(cp) -> str:
    """nvidia-smi prints most errors on stdout: both streams, last non-empty lines."""
    lines = [l.strip() for l in (cp.stdout or "").splitlines() + (cp.stderr or "").splitlines() if l.strip()]
    lines = [l for l in lines if not l.startswith("Terminating early")] or lines
    return "; ".join(lines[-2:]) if lines else f"rc={cp.returncode}"


# -- the common part of both faults ----------------------------------------------------
class GpuFault(Injector):
    """A fault on one GPU of a node, through nvidia-smi (see the module doc); the
    base of both GPU fault types."""

    target_help = "GPU index (default 0)"

    @classmethod
    def support(cls, node: dict) -> dict[str, tuple[bool, str]]:
        ok = bool(node["nvidia_smi"]) and node["root"]
        return {cls.type: (ok, "nvidia-smi found" if ok else ("nvidia-smi not found (no NVIDIA driver)" if not node["nvidia_smi"] else "needs root"))}

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
                f"nvidia-smi on node {self.node.name} cannot reach the NVIDIA driver: {smi_error(cp)}",
                field="--type", fix="load the NVIDIA driver there (nvidia-smi must work) or pick a node with a GPU",
            )

    def _list_gpus(self, smi: str) -> dict[int, str]:
        """``nvidia-smi -L``: {index: name}. An empty dict when it finds no device."""
        cp = self._run([smi, "-L"])
        if cp.returncode != 0:
            if cp.returncode == 6 or "No devices were found" in (cp.stdout + cp.stderr):
                return {}
            self._driver_error(cp)
            raise NodeError(f"nvidia-smi -L failed on node {self.node.name}: {smi_error(cp)}", field="node")
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
            raise NodeError(f"nvidia-smi --query-gpu failed on node {self.node.name}: {smi_error(cp)}", field="node")
        rows = [r for r in csv.reader(io.StringIO(cp.stdout), skipinitialspace=True) if r]
        if not rows or len(rows[0]) != len(fields):
            raise NodeError(f"unexpected nvidia-smi --query-gpu output on node {self.node.name}: {cp.stdout.strip()[:200]!r}", field="node")
        return {f: _val(v) for f, v in zip(fields, rows[0])}

    def _snapshot(self, smi: str | None = None) -> dict[str, Any]:
        """The GPU's state in explicit units (MHz, W), from one ``--query-gpu`` row."""
        q = self.query(smi)
        return {
            "gpu_name": q["name"],
            "clock_sm_mhz": as_int(q["clocks.sm"]),
            "clock_max_sm_mhz": as_int(q["clocks.max.sm"]),
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
