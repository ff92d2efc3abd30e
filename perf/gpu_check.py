"""The real check of gpu-clock-cap and gpu-power-cap, on a real NVIDIA GPU (as root).

The tests run against a stand-in nvidia-smi (tests/fakes/nvidia-smi); this script is
what shows that the faults really slow a GPU and that revert really restores it. It
measures dense matmul throughput (bf16 and fp16, torch, about ``--seconds`` each) and
the SM clock and power draw under that load (nvidia-smi sampled beside it):

1. before any fault (baseline);
2. during gpu-clock-cap at about half the maximum SM clock (``faultlab.injectors.apply``);
3. during gpu-power-cap at about 60% of the current power limit;
4. after both are reverted.

Then it checks that the GPU is back as found: ``power.limit`` exactly the value read
before (the printed string), both reverts ``reverted``, no lease left, and the loaded SM
clock and throughput back within 10% of the baseline (the lock itself cannot be read
through nvidia-smi). It prints the ratios side by side.

    sudo python3 perf/gpu_check.py [--gpu 0] [--seconds 3] [--json out.json] [--allow-busy]

Exit codes: 0 all good; 1 something was not restored, or a fault failed to apply (the
script then resets the GPU itself: ``-rgc`` and ``-pl <value found>``); 2 cannot run
here (no nvidia-smi, no CUDA torch, not root, GPU busy with other processes); 3 restored,
but a cap had no measurable effect. About 1 minute on an H100/H200.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIELDS = "index,name,persistence_mode,clocks.sm,clocks.max.sm,power.draw,power.limit,power.default_limit,power.min_limit,power.max_limit"


def die(msg: str, code: int = 2) -> None:
    print(f"gpu_check: {msg}", file=sys.stderr)
    sys.exit(code)


def smi(*args: str, check: bool = True) -> str:
    """nvidia-smi's stdout; on failure RuntimeError, or "" when not ``check``."""
    cp = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    if cp.returncode != 0:
        if check:
            raise RuntimeError(f"nvidia-smi {' '.join(args)} failed (rc {cp.returncode}): {(cp.stdout + cp.stderr).strip()[:300]}")
        return ""  # nvidia-smi prints its errors on stdout: never parse them as data
    return cp.stdout


def query(gpu: int, fields: str = FIELDS) -> dict[str, str]:
    names = fields.split(",")
    line = smi(f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", str(gpu)).strip().splitlines()[0]
    return dict(zip(names, [v.strip() for v in line.split(",")]))


def num(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def import_faultlab():
    """faultlab's injectors: installed, or straight from this checkout."""
    try:
        from faultlab.injectors import apply
        from faultlab.injectors import GpuClockCap, GpuPowerCap
        from faultlab.lifecycle.lease import load_leases
        from faultlab.nodes import LocalNode
    except ImportError:
        sys.path.insert(0, str(ROOT))
        import faultlab

        faultlab.__path__.append(str(ROOT))  # faultlab.injectors lives in ./injectors
        from faultlab.injectors import apply
        from faultlab.injectors import GpuClockCap, GpuPowerCap
        from faultlab.lifecycle.lease import load_leases
        from faultlab.nodes import LocalNode
    return apply, GpuClockCap, GpuPowerCap, load_leases, LocalNode


class Sampler:
    """nvidia-smi clocks.sm and power.draw every ``period_s`` while a benchmark runs."""

    def __init__(self, gpu: int, period_s: float = 0.25):
        self.gpu, self.period_s = gpu, period_s
        self.clock, self.power = [], []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            try:
                q = query(self.gpu, "clocks.sm,power.draw")
                if num(q["clocks.sm"]) is not None:
                    self.clock.append(num(q["clocks.sm"]))
                if num(q["power.draw"]) is not None:
                    self.power.append(num(q["power.draw"]))
            except Exception:
                pass
            self._stop.wait(self.period_s)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(5)

    def medians(self) -> tuple[float | None, float | None]:
        med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
        return med(self.clock), med(self.power)


def matmul_tflops(torch, dev, dtype, n: int, seconds: float) -> float:
    """Dense n x n matmul throughput in TFLOP/s over about ``seconds``."""
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    for _ in range(5):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize(dev)
    iters, t0 = 0, time.perf_counter()
    while True:
        for _ in range(10):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize(dev)
        iters += 10
        dt = time.perf_counter() - t0
        if dt >= seconds:
            break
    del a, b, c
    return 2.0 * n**3 * iters / dt / 1e12


def measure(torch, dev, gpu: int, n: int, seconds: float) -> dict:
    """bf16 then fp16 throughput, with the median SM clock and power draw under load."""
    out = {}
    with Sampler(gpu) as s:
        out["bf16_tflops"] = matmul_tflops(torch, dev, torch.bfloat16, n, seconds)
        out["fp16_tflops"] = matmul_tflops(torch, dev, torch.float16, n, seconds)
    out["sm_clock_mhz"], out["power_draw_w"] = s.medians()
    out["power_limit_w"] = num(query(gpu, "power.limit")["power.limit"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0, help="nvidia-smi index of the GPU (default 0)")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per throughput measurement (default 3)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--allow-busy", action="store_true", help="run even when other processes use the GPU (they are slowed too)")
    args = ap.parse_args()

    # -- can it run here? ----------------------------------------------------------------
    if not shutil.which("nvidia-smi"):
        die("nvidia-smi not found: this needs a machine with an NVIDIA GPU and its driver (the tests use tests/fakes/nvidia-smi instead)")
    cp = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    if cp.returncode != 0 or f"GPU {args.gpu}:" not in cp.stdout:
        die(f"no GPU {args.gpu} here (nvidia-smi -L rc {cp.returncode}: {(cp.stdout + cp.stderr).strip()[:200]})")
    if os.geteuid() != 0:
        die("needs root: nvidia-smi -lgc and -pl change the GPU (run with sudo)")
    try:
        info = query(args.gpu)
    except (RuntimeError, IndexError) as e:
        die(f"cannot read GPU {args.gpu}'s clocks and power limit: {e}")
    line = next(l for l in cp.stdout.splitlines() if l.startswith(f"GPU {args.gpu}:"))
    info["uuid"] = line.partition("(UUID: ")[2].rstrip(")").strip() or "?"
    info["driver_version"] = (smi("--query-gpu=driver_version", "--format=csv,noheader", "-i", str(args.gpu), check=False).strip() or "?").splitlines()[0]
    busy = [l for l in smi("--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader", check=False).splitlines() if l.strip()]
    busy = [l for l in busy if info["uuid"] in l]
    if busy and not args.allow_busy:
        die(f"GPU {args.gpu} runs other processes ({len(busy)}: {'; '.join(busy)[:200]}); capping it would slow them too (--allow-busy to go on)")
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # torch numbers GPUs as nvidia-smi does
    try:
        import torch
    except ImportError:
        die("torch is not installed (pip install torch, a CUDA build)")
    if not torch.cuda.is_available():
        die("torch sees no CUDA device (a CPU build of torch, or no driver access)")
    dev_index = args.gpu
    for i in range(torch.cuda.device_count()):  # match by UUID where torch tells it
        u = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        if u is not None and str(u).replace("GPU-", "") == info["uuid"].replace("GPU-", ""):
            dev_index = i
    dev = torch.device("cuda", dev_index)
    apply, GpuClockCap, GpuPowerCap, load_leases, LocalNode = import_faultlab()
    node = LocalNode("local")

    supported = sorted(int(x) for x in smi("--query-supported-clocks=graphics", "--format=csv,noheader,nounits", "-i", str(args.gpu), check=False).split() if x.strip().isdigit())
    max_clock = int(float(info["clocks.max.sm"]))
    half = [c for c in supported if c <= max_clock // 2]
    clock_cap = max(half) if half else (min(supported) if supported else max_clock // 2)
    limit_text = info["power.limit"]
    limit, lo_limit = num(limit_text), num(info["power.min_limit"])
    power_cap = round(max(lo_limit, 0.6 * limit)) if limit is not None and lo_limit is not None else None  # None: no settable limit
    mem_gib = torch.cuda.get_device_properties(dev).total_memory / 2**30
    n = 8192 if mem_gib >= 8 else 4096

    print(f"GPU {args.gpu}: {info['name']} ({info['uuid']}), driver {info['driver_version']}, persistence mode {info['persistence_mode']}, torch cuda:{dev_index}")
    print(f"  SM clock {info['clocks.sm']} MHz now, max {max_clock} MHz, supported {supported[0] if supported else '?'}..{supported[-1] if supported else '?'} MHz")
    print(f"  power limit {limit_text} W (default {info['power.default_limit']} W, range {info['power.min_limit']}..{info['power.max_limit']} W), draw {info['power.draw']} W")
    print(f"  faults: gpu-clock-cap {clock_cap} MHz (~half of {max_clock}), "
          + (f"gpu-power-cap {power_cap} W (~60% of {limit_text})" if power_cap else "no gpu-power-cap (power.limit not settable)")
          + f"; matmul n={n}, {args.seconds:g} s per dtype")

    results: dict[str, dict] = {}
    statuses: dict[str, str] = {}
    problems: list[str] = []
    actives = []
    try:
        results["baseline"] = measure(torch, dev, args.gpu, n, args.seconds)
        faults = [("clock-cap", GpuClockCap(node, clock_cap, gpu=args.gpu))]
        if power_cap:
            faults.append(("power-cap", GpuPowerCap(node, power_cap, gpu=args.gpu)))
        for name, inj in faults:
            t0 = time.perf_counter()
            active = apply(inj, duration_s=120, grace_s=30)  # the lease's watchdog reverts at 150 s if this script dies
            actives.append(active)
            inject_s = time.perf_counter() - t0
            if not active.evidence.get("verify", {}).get("ok"):
                problems.append(f"{name}: verify not ok: {active.evidence.get('verify')}")
            results[name] = measure(torch, dev, args.gpu, n, args.seconds)
            results[name]["inject_s"] = inject_s
            results[name]["verify"] = active.evidence.get("verify")
            t0 = time.perf_counter()
            statuses[name] = active.revert()
            results[name]["revert_s"] = time.perf_counter() - t0
            if statuses[name] != "reverted":
                problems.append(f"{name}: revert status {statuses[name]} ({active.evidence.get('left_behind')})")
        results["after"] = measure(torch, dev, args.gpu, n, args.seconds)
    except BaseException as e:  # noqa: BLE001 - report, restore, exit 1
        problems.append(f"error: {type(e).__name__}: {e}")
    finally:
        for a in actives:
            try:
                a.revert()
            except Exception as e:  # noqa: BLE001
                problems.append(f"revert of {a.fault_id} raised {e}")

    # -- restored? --------------------------------------------------------------------------
    now = query(args.gpu)
    if now["power.limit"] != limit_text:
        problems.append(f"power.limit is {now['power.limit']} W, was {limit_text} W before")
    ids = {a.fault_id for a in actives}
    left = [le.fault_id for le in load_leases(node) if le.fault_id in ids]
    if left:
        problems.append(f"leases left: {left}")
    base, after = results.get("baseline"), results.get("after")
    if base and after:
        if base["sm_clock_mhz"] and after["sm_clock_mhz"] and after["sm_clock_mhz"] < 0.9 * base["sm_clock_mhz"]:
            problems.append(f"SM clock under load {after['sm_clock_mhz']:.0f} MHz after revert, {base['sm_clock_mhz']:.0f} MHz before (a lock left?)")
        if after["bf16_tflops"] < 0.9 * base["bf16_tflops"]:
            problems.append(f"bf16 throughput after revert is {after['bf16_tflops'] / base['bf16_tflops']:.2f} of the baseline")

    # -- the table --------------------------------------------------------------------------
    def r(x, y):
        return f"{x / y:.2f}" if x and y else "-"

    bb = base or {}

    print()
    print(f"{'phase':<10} {'SM MHz':>7} {'draw W':>7} {'limit W':>8} {'bf16 TF/s':>10} {'ratio':>6} {'fp16 TF/s':>10} {'ratio':>6}")
    for ph in ("baseline", "clock-cap", "power-cap", "after"):
        m = results.get(ph)
        if not m:
            print(f"{ph:<10} (not measured)")
            continue
        f = lambda v, d=0: f"{v:.{d}f}" if v is not None else "-"  # noqa: E731
        print(f"{ph:<10} {f(m['sm_clock_mhz']):>7} {f(m['power_draw_w']):>7} {f(m['power_limit_w'], 1):>8} "
              f"{m['bf16_tflops']:>10.1f} {r(m['bf16_tflops'], bb.get('bf16_tflops')):>6} {m['fp16_tflops']:>10.1f} {r(m['fp16_tflops'], bb.get('fp16_tflops')):>6}")
    if base and results.get("clock-cap") and base["sm_clock_mhz"]:
        print(f"\nclock-cap: expected throughput ratio about {clock_cap / base['sm_clock_mhz']:.2f} (cap / baseline clock under load), "
              f"measured {r(results['clock-cap']['bf16_tflops'], base['bf16_tflops'])} (bf16)")
    if base and results.get("power-cap"):
        print(f"power-cap: baseline draw {base['power_draw_w'] or 0:.0f} W vs cap {power_cap} W; measured ratio {r(results['power-cap']['bf16_tflops'], base['bf16_tflops'])} (bf16)")
    print(f"statuses: {statuses}; power.limit {limit_text} W before, {now['power.limit']} W after")

    no_effect = []
    if base and results.get("clock-cap") and results["clock-cap"]["bf16_tflops"] > 0.85 * base["bf16_tflops"] and clock_cap < 0.8 * (base["sm_clock_mhz"] or max_clock):
        no_effect.append("gpu-clock-cap did not slow bf16 matmul by 15% or more")
    if base and results.get("power-cap") and (base["power_draw_w"] or 0) > 1.1 * power_cap and results["power-cap"]["bf16_tflops"] > 0.97 * base["bf16_tflops"]:
        no_effect.append("gpu-power-cap did not slow bf16 matmul although the baseline drew more than the cap")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": info, "clock_cap_mhz": clock_cap, "power_cap_w": power_cap, "results": results,
                                               "statuses": statuses, "problems": problems, "no_effect": no_effect}, indent=1, default=str))
    if problems:
        print("\nNOT RESTORED / FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        if actives:  # something was applied: put the GPU back by hand, as found
            print(f"resetting GPU {args.gpu} by hand: nvidia-smi -rgc, -pl {limit_text}", file=sys.stderr)
            smi("-i", str(args.gpu), "-rgc", check=False)
            smi("-i", str(args.gpu), "-pl", limit_text, check=False)
        return 1
    if no_effect:
        print("\nrestored, but: " + "; ".join(no_effect), file=sys.stderr)
        return 3
    print("\nOK: both faults slowed the GPU and the GPU is back as found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
