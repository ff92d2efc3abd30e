"""``gpu-power-cap``: a GPU's software power limit lowered.

``nvidia-smi -i GPU -pl W`` (W, within ``power.min_limit..power.max_limit``). Revert
writes back *exactly* the ``power.limit`` read before injecting (the very string
nvidia-smi printed, e.g. ``250.00``), not ``power.default_limit``: a limit somebody set
before faultlab came is restored, not clobbered.

Severity: ``power.limit before / cap`` (>= 1 when the cap lowers the limit).
"""

from __future__ import annotations

import math
import re

from faultlab.errors import BadInput, NodeError, Refused
from faultlab.injectors.base import Cmd, Plan
from faultlab.injectors.gpu import GpuFault
from faultlab.injectors.params import Param
from faultlab.injectors.registry import register
from faultlab.nodes import Node

#: nvidia-smi prints watts with 2 decimals; verify allows this much slack, revert none
POWER_TOLERANCE_W = 0.5


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



@register
class GpuPowerCap(GpuFault):
    """Cap GPU ``gpu``'s software power limit at ``power_w`` W (``nvidia-smi -i GPU -pl
    W``); revert restores exactly the ``power.limit`` read before injecting.

    ``power_w`` must lie within ``power.min_limit..power.max_limit`` (read in ``probe``;
    BadInput naming ``--power-w`` and the range otherwise). ``probe`` also raises
    BadInput for a GPU that does not exist, and Refused when nvidia-smi is missing, the
    GPU has no settable power limit, the node user is not root, or a faultlab power cap
    already holds the GPU.
    """

    type = "gpu-power-cap"
    PARAMS = (Param("power_w", "power limit in W, e.g. 200", "WATTS", parse_watts, bounds=(0, None), open_low=True, kind="number", required=True),)
    color = "#7d4e57"

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        """``opts["--power-w"]``: watts as a string; ``target``: GPU index (default 0).
        ``force`` is ignored: a limit found is always restored exactly, never refused.
        Raises BadInput naming the field."""
        w = cls.param("power_w").read(opts, cls.type)
        return cls(node, w, gpu=target, fault_id=fault_id)

    def __init__(self, node: Node, power_w: float | str, gpu: int | str | None = 0, *, fault_id: str | None = None, nvidia_smi: str = "nvidia-smi"):
        super().__init__(node, gpu, fault_id=fault_id, nvidia_smi=nvidia_smi)
        self.power_w = parse_watts(power_w, "--power-w")

    @property
    def params(self) -> dict:
        f = self._facts or {}
        return {"gpu_index": self.gpu, "power_limit_w": self.power_w, "power_limit_before_w": f.get("before", {}).get("power_limit_w")}

    #: what ``severity`` measures, with its unit (the dataset card lists it per fault type)
    severity_unit = "ratio (power limit before / the cap)"

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

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        after = evidence.get("after") or {}
        return (f"GPU {evidence.get('gpu_index')} power limit read back {after.get('power_limit_w')} W "
                f"(checked = {evidence['requested_w']} W)")

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
