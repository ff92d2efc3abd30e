"""GPU metrics through NVML (nvidia-ml-py, module ``pynvml``), for the ``host`` table.

Source: the NVML API reference ("Device Queries"): ``nvmlDeviceGetClockInfo``
(NVML_CLOCK_SM, MHz), ``nvmlDeviceGetPowerUsage`` (mW), ``nvmlDeviceGetUtilizationRates``
(``.gpu``, percent of the last sample period a kernel ran), ``nvmlDeviceGetMemoryInfo``
(``.used``, bytes), ``nvmlDeviceGetTemperature`` (NVML_TEMPERATURE_GPU, deg C),
``nvmlDeviceGetCurrentClocksEventReasons`` (older drivers and bindings:
``...ClocksThrottleReasons``; a bitmask of ``nvmlClocksEventReason*``, e.g. 0x4 SW power
cap, 0x8 HW slowdown, 0x20 SW thermal) and ``nvmlDeviceGetComputeRunningProcesses``
(``.pid`` of the processes holding a compute context).

Metric names follow faultlab.telemetry.tcpstats' convention ``BASE:QUALIFIER`` with the GPU index
(NVML's, i.e. PCI order, not CUDA_VISIBLE_DEVICES order) as the qualifier:
``gpu_sm_clock_mhz:G``, ``gpu_power_w:G``, ``gpu_util_pct:G``, ``gpu_mem_used_bytes:G``,
``gpu_temp_c:G``, ``gpu_throttle_reasons:G`` (the bitmask as a float; exact below 2**53).

``pynvml`` is imported lazily, in :meth:`NvmlReader.open`. When it is not installed
(``pip install 'faultlab[gpu]'``), or NVML cannot start (no driver, no GPU), the reader
is unavailable and yields no metrics: no error is raised, ``reason`` says why. A query a
GPU does not support (NVML_ERROR_NOT_SUPPORTED, ...) leaves just that metric out.

Tested here against a stand-in ``pynvml`` module put in ``sys.modules`` (this machine
has no GPU); the real check is a machine with an NVIDIA GPU and nvidia-ml-py:
``python -c "from faultlab.telemetry.gpumetrics import NvmlReader; r = NvmlReader(); r.open();
print(r.reason, r.read())"``.
"""

from __future__ import annotations

import importlib

GPU_METRICS = ("gpu_sm_clock_mhz", "gpu_power_w", "gpu_util_pct", "gpu_mem_used_bytes", "gpu_temp_c", "gpu_throttle_reasons")


class NvmlReader:
    """Reads NVML device metrics. ``open()`` first (idempotent), ``close()`` at the end.

    ``available``: whether NVML started; ``reason``: why not (None when it did).
    """

    def __init__(self):
        self.nvml = None
        self.available = False
        self.reason: str | None = "not opened"
        self._handles: dict[int, object] = {}

    def open(self) -> "NvmlReader":
        """Import pynvml and call nvmlInit. Never raises: on failure ``available`` is
        False and ``reason`` names the cause. Returns self."""
        if self.available:
            return self
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            self.reason = "pynvml not installed (pip install nvidia-ml-py)"
            return self
        try:
            nvml.nvmlInit()
            n = int(nvml.nvmlDeviceGetCount())
            self._handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)}
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.reason = f"NVML unavailable: {type(e).__name__}: {e}"
            return self
        self.nvml = nvml
        self.available = bool(self._handles)
        self.reason = None if self.available else "NVML found no GPU"
        return self

    def close(self) -> None:
        """nvmlShutdown (errors ignored). Idempotent."""
        if self.nvml is not None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass
        self.nvml = None
        self.available = False
        self.reason = "closed"
        self._handles = {}

    @property
    def indices(self) -> list[int]:
        return sorted(self._handles)

    def read(self, indices=None) -> dict[int, dict[str, float]]:
        """{gpu index: {metric base name: value}} for ``indices`` (all GPUs when None;
        unknown indices skipped); values in the units of the names (MHz, W, %, bytes,
        deg C, bitmask). {} when unavailable. Never raises NVML errors."""
        if not self.available:
            return {}
        nv = self.nvml
        out: dict[int, dict[str, float]] = {}
        for i in self.indices if indices is None else indices:
            h = self._handles.get(i)
            if h is None:
                continue
            m: dict[str, float] = {}
            _try(m, "gpu_sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            _try(m, "gpu_power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
            _try(m, "gpu_util_pct", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu)
            _try(m, "gpu_mem_used_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h).used)
            _try(m, "gpu_temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
            reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
            if reasons is not None:
                _try(m, "gpu_throttle_reasons", lambda: reasons(h))
            out[i] = m
        return out

    def gpus_of(self, pids) -> list[int]:
        """Indices of the GPUs on which any of ``pids`` holds a compute context
        (``nvmlDeviceGetComputeRunningProcesses``); [] when unavailable."""
        if not self.available:
            return []
        want = set(pids)
        out = []
        for i, h in sorted(self._handles.items()):
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:
                continue
            if any(getattr(p, "pid", None) in want for p in procs):
                out.append(i)
        return out


def _try(m: dict, name: str, fn) -> None:
    try:
        m[name] = float(fn())
    except Exception:  # NVMLError_NotSupported and friends: leave the metric out
        pass
