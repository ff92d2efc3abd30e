"""``gpu-clock-cap``: a GPU's SM clock capped with locked graphics clocks.

``nvidia-smi -i GPU -lgc MIN,MAX`` (MHz; "Volta or newer fully supported devices").
MIN is the lowest supported graphics clock (``--query-supported-clocks=graphics``), so
an idle GPU still clocks down and the fault is a *cap*, not a pin; MAX is
``--clock-mhz``. Revert: ``nvidia-smi -i GPU -rgc`` (idempotent: "resets the gpu clock
to the default value"). The lock cannot be read back (see ``faultlab.injectors.gpu``
for what that means for ownership and verify).

Severity: ``clocks.max.sm before / cap`` (>= 1, larger is slower; 2.0 for a cap at
half the maximum clock).
"""

from __future__ import annotations

import math

from faultlab.errors import BadInput, NodeError, Refused
from faultlab.injectors.base import Cmd, Plan
from faultlab.injectors.gpu import GpuFault, as_int, smi_error
from faultlab.injectors.params import Param
from faultlab.injectors.registry import register
from faultlab.nodes import Node

#: clocks move in steps (about 15 MHz on recent GPUs); a locked clock may read one step above the cap
CLOCK_TOLERANCE_MHZ = 15


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



@register
class GpuClockCap(GpuFault):
    """Cap GPU ``gpu``'s SM clock at ``clock_mhz`` MHz with locked graphics clocks
    (``nvidia-smi -i GPU -lgc MIN,MAX``; revert ``-rgc``).

    ``clock_mhz`` must lie within the GPU's supported graphics clocks
    (``--query-supported-clocks``) and ``clocks.max.sm``; ``probe`` raises BadInput
    (naming ``--clock-mhz`` and the valid range) otherwise, BadInput (``--target``) for a
    GPU that does not exist, and Refused when nvidia-smi is missing, the driver is not
    loaded, the node user is not root, or a faultlab clock cap already holds the GPU.
    """

    type = "gpu-clock-cap"
    PARAMS = (Param("clock_mhz", "max SM clock in MHz, e.g. 900", "MHZ", parse_mhz, bounds=(1, None), kind="integer", required=True),)
    color = "#db2b39"

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        """``opts["--clock-mhz"]``: MHz as a string; ``target``: GPU index (default 0).
        ``force`` is accepted and ignored: a lock made by another tool cannot be seen,
        so there is nothing to force past. Raises BadInput naming the field."""
        mhz = cls.param("clock_mhz").read(opts, cls.type)
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

    #: what ``severity`` measures, with its unit (the dataset card lists it per fault type)
    severity_unit = "ratio (max SM clock before / the cap)"

    @property
    def severity(self) -> float:
        """``clocks.max.sm`` before / cap (>= 1; NaN before ``probe``)."""
        mx = (self._facts or {}).get("before", {}).get("clock_max_sm_mhz")
        return float(mx) / self.clock_mhz if mx else float("nan")

    def _supported_min(self, smi: str) -> int | None:
        cp = self._run([smi, "--query-supported-clocks=graphics", "--format=csv,noheader,nounits", "-i", str(self.gpu)])
        if cp.returncode != 0:
            return None
        vals = [as_int(l) for l in cp.stdout.splitlines()]
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

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        after = evidence.get("after") or {}
        return (f"GPU {evidence.get('gpu_index')} SM clock read back {after.get('clock_sm_mhz')} MHz "
                f"(checked <= {evidence['lock_range_mhz'][1]} MHz + tolerance)")

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
            return [f"GPU {g} locked clocks (nvidia-smi -rgc failed: {smi_error(cp)})"]
        return []
