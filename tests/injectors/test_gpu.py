"""gpu-clock-cap and gpu-power-cap against a stand-in nvidia-smi.

``tests/fakes/nvidia-smi`` replaces a real GPU here (this machine has none): these tests
prove the commands, the ownership rules, the exact restore and the lease watchdog, not
that a driver really slows a GPU. ``perf/gpu_check.py`` is the real check, on a machine
with an NVIDIA GPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlab.errors import BadInput, FaultlabError, Refused
from faultlab.injectors import FAULT_TYPES, GpuClockCap, GpuPowerCap, apply, build
from faultlab.lifecycle.lease import load_leases, recover
from faultlab.nodes import LocalNode
from tests.helpers import FAKES, FL

SMI = str(FAKES / "nvidia-smi")


def _gpu(i: int, **over) -> dict:
    g = {
        "name": "NVIDIA H200", "uuid": f"GPU-fa1e0000-0000-0000-0000-00000000000{i}", "bus_id": f"00000000:0{i + 1}:00.0",
        "clock_sm_mhz": 1980, "clock_max_sm_mhz": 1980, "clock_min_mhz": 345, "clock_step_mhz": 15, "clock_mem_mhz": 3201,
        "locked": None, "app_clocks_active": False, "power_supported": True,
        "power_limit_w": 700.0, "power_default_w": 700.0, "power_min_w": 200.0, "power_max_w": 700.0,
        "power_draw_w": 95.5, "persistence_mode": "Enabled",
    }
    g.update(over)
    return g


class FakeSmi:
    """The stand-in's state file and invocation log."""

    def __init__(self, state: Path):
        self.state = state
        self.log = state.parent / "nvidia-smi.log"

    def read(self) -> dict:
        return json.loads(self.state.read_text())

    def write(self, st: dict) -> None:
        self.state.write_text(json.dumps(st, indent=1))

    def gpu(self, i: int = 0) -> dict:
        return self.read()["gpus"][i]

    def set(self, **top) -> None:
        st = self.read()
        st.update(top)
        self.write(st)

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(l)["argv"] for l in self.log.read_text().splitlines() if l.strip()]

    def changes(self) -> list[list[str]]:
        """Invocations that change the GPU (-lgc, -rgc, -pl)."""
        return [a for a in self.calls() if any(x in a for x in ("-lgc", "-rgc", "-pl"))]

    def smi(self, *args: str) -> subprocess.CompletedProcess:
        """Run the stand-in as a person would (e.g. to set a power limit first)."""
        return subprocess.run([SMI, *args], capture_output=True, text=True, check=True)


@pytest.fixture
def fake(tmp_path, monkeypatch) -> FakeSmi:
    """Two H200-like GPUs behind tests/fakes/nvidia-smi, first on PATH."""
    state = tmp_path / "smi" / "state.json"
    state.parent.mkdir()
    f = FakeSmi(state)
    f.write({"gpus": [_gpu(0), _gpu(1)], "non_root": False, "old_driver": False, "driver_loaded": True})
    monkeypatch.setenv("FAKE_NVIDIA_SMI_STATE", str(state))
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    return f


@pytest.fixture
def node() -> LocalNode:
    return LocalNode("local")


def test_registered():
    assert FAULT_TYPES["gpu-clock-cap"] is GpuClockCap and FAULT_TYPES["gpu-power-cap"] is GpuPowerCap
    assert GpuClockCap.options == frozenset({"--clock-mhz"}) and GpuPowerCap.options == frozenset({"--power-w"})


# -- plans (what --dry-run prints) ------------------------------------------------------
def test_clock_cap_plan_exact_commands(fake, node):
    inj = build("gpu-clock-cap", node, target="gpu:1", duration_s=30, opts={"--clock-mhz": "900"})
    facts = inj.probe()
    p = inj.plan(facts).render(node)
    assert p["type"] == "gpu-clock-cap" and p["target"] == "gpu:1"
    assert p["inject"] == [f"{SMI} -i 1 -lgc 345,900"]  # MIN = the lowest supported clock: a cap, not a pin
    assert p["revert"] == [f"{SMI} -i 1 -rgc"]
    assert facts["before"]["clock_max_sm_mhz"] == 1980 and facts["lock_min_mhz"] == 345
    assert inj.severity == pytest.approx(1980 / 900)
    assert fake.changes() == [], "probe and plan only read"


def test_power_cap_plan_exact_commands(fake, node):
    fake.smi("-i", "0", "-pl", "250")  # someone set a non-default limit before faultlab came
    inj = build("gpu-power-cap", node, target=None, duration_s=30, opts={"--power-w": "200"})
    facts = inj.probe()
    p = inj.plan(facts).render(node)
    assert p["target"] == "gpu:0"
    assert p["inject"] == [f"{SMI} -i 0 -pl 200"]
    assert p["revert"] == [f"{SMI} -i 0 -pl 250.00"], "the limit found, not power.default_limit"
    assert inj.severity == pytest.approx(250 / 200)
    assert len(fake.changes()) == 1  # only our own -pl 250 above


def test_cli_dry_run_prints_the_plan(fake):
    cp = subprocess.run(
        [*FL, "inject", "--type", "gpu-clock-cap", "--clock-mhz", "1200", "--target", "0",
         "--duration", "10s", "--node", "local", "--dry-run", "--json"],
        capture_output=True, text=True, timeout=60,
    )
    assert cp.returncode == 0, cp.stderr
    p = json.loads(cp.stdout)
    assert p["inject"] == [f"{SMI} -i 0 -lgc 345,1200"] and p["revert"] == [f"{SMI} -i 0 -rgc"]
    assert fake.changes() == []


# -- inject / verify / revert -----------------------------------------------------------
def test_clock_cap_round_trip_restores_exactly(fake, node, no_residue):
    before = fake.read()
    active = apply(GpuClockCap(node, 900, gpu=0), 30)
    try:
        assert fake.gpu(0)["locked"] == [345, 900] and fake.gpu(1)["locked"] is None
        ev = active.evidence["verify"]
        assert ev["ok"] and ev["before"]["clock_sm_mhz"] == 1980 and ev["after"]["clock_sm_mhz"] == 900
        assert ev["lock_range_mhz"] == [345, 900] and ev["lock_readable"] is False
        assert [le.fault_id for le in load_leases(node)] == [active.fault_id]
        row = active.injection_row("run1")
        assert row["severity"] == pytest.approx(2.2) and json.loads(row["params"])["clock_cap_mhz"] == 900
    finally:
        assert active.revert() == "reverted"
    assert active.revert() == "reverted"
    assert fake.read() == before, "clock lock removed, nothing else touched"
    assert [SMI, "-i", "0", "-rgc"] in fake.calls()
    assert not load_leases(node)


def test_power_cap_round_trip_restores_previous_non_default_limit(fake, node, no_residue):
    fake.smi("-i", "0", "-pl", "250")
    before = fake.read()
    assert before["gpus"][0]["power_limit_w"] == 250.0 and before["gpus"][0]["power_default_w"] == 700.0
    active = apply(GpuPowerCap(node, 200, gpu=0), 30)
    try:
        assert fake.gpu(0)["power_limit_w"] == 200.0
        ev = active.evidence["verify"]
        assert ev["ok"] and ev["before"]["power_limit_w"] == 250.0 and ev["after"]["power_limit_w"] == 200.0
        assert json.loads(active.injection_row("r")["params"]) == {"gpu_index": 0, "power_limit_w": 200.0, "power_limit_before_w": 250.0}
    finally:
        assert active.revert() == "reverted"
    assert fake.gpu(0)["power_limit_w"] == 250.0, "restored to 250 W, not the 700 W default"
    assert fake.read() == before
    assert fake.changes()[-1] == [SMI, "-i", "0", "-pl", "250.00"]


def test_failed_revert_keeps_the_lease_and_recover_finishes_it(fake, node, no_residue):
    active = apply(GpuClockCap(node, 600, gpu=1), 30)
    fake.set(non_root=True)  # the driver now refuses changes: -rgc fails
    assert active.revert() == "revert-failed"
    assert "GPU 1 locked clocks" in active.evidence["left_behind"][0]
    assert load_leases(node), "the lease stays for faultlab recover"
    fake.set(non_root=False)
    done = recover(node)
    assert [d["fault_id"] for d in done] == [active.fault_id]
    assert fake.gpu(1)["locked"] is None and not load_leases(node)


# -- refusals ---------------------------------------------------------------------------
@pytest.mark.parametrize("cls,arg", [(GpuClockCap, 900), (GpuPowerCap, 200)])
def test_refused_when_nvidia_smi_missing(cls, arg, no_residue, node, tmp_path, monkeypatch):
    # no_residue first: its check runs after monkeypatch has given PATH back
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink("/bin/sh", bin_dir / "sh")
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(Refused, match="nvidia-smi not found on node local") as e:
        apply(cls(node, arg), 10)
    assert "install the NVIDIA driver" in str(e.value) and e.value.field == "--type"
    assert not load_leases(node)


def test_refused_when_driver_not_loaded(fake, node):
    fake.set(driver_loaded=False)
    with pytest.raises(Refused, match="cannot reach the NVIDIA driver"):
        GpuClockCap(node, 900).probe()


@pytest.mark.parametrize("value", ["abc", "-5", "0", "12.5", "", "900x", "1e3"])
def test_bad_clock_mhz(value, node):
    with pytest.raises(BadInput) as e:
        build("gpu-clock-cap", node, target="0", duration_s=10, opts={"--clock-mhz": value})
    assert e.value.field == "--clock-mhz" and e.value.exit_code == 2


@pytest.mark.parametrize("value", ["abc", "-5", "0", "-0.5", "nan", "1e3", "200.123", "200 watts"])
def test_bad_power_w(value, node):
    with pytest.raises(BadInput) as e:
        build("gpu-power-cap", node, target="0", duration_s=10, opts={"--power-w": value})
    assert e.value.field == "--power-w"


def test_missing_option_and_bad_target(node):
    with pytest.raises(BadInput) as e:
        build("gpu-clock-cap", node, target="0", duration_s=10, opts={})
    assert e.value.field == "--clock-mhz"
    with pytest.raises(BadInput) as e:
        build("gpu-power-cap", node, target="0", duration_s=10, opts={"--clock-mhz": "900"})
    assert e.value.field == "--clock-mhz", "an option of the other type is refused by name"
    for bad in ("gpu:x", "-1", "eth0"):
        with pytest.raises(BadInput) as e:
            build("gpu-clock-cap", node, target=bad, duration_s=10, opts={"--clock-mhz": "900"})
        assert e.value.field == "--target"


@pytest.mark.parametrize("mhz,word", [(5000, "above"), (100, "below")])
def test_clock_out_of_range_names_the_valid_range(fake, node, mhz, word):
    with pytest.raises(BadInput, match=f"{word}.*give 345..1980 MHz") as e:
        apply(GpuClockCap(node, mhz), 10)
    assert e.value.field == "--clock-mhz"
    assert fake.changes() == [] and not load_leases(node)


@pytest.mark.parametrize("watts", [900, 50, 199.99])
def test_power_out_of_range_names_the_valid_range(fake, node, watts):
    with pytest.raises(BadInput, match=r"outside GPU 0's power limit range 200.00..700.00 W.*give 200..700 W") as e:
        apply(GpuPowerCap(node, watts), 10)
    assert e.value.field == "--power-w"
    assert fake.changes() == [] and not load_leases(node)


def test_gpu_that_does_not_exist(fake, node):
    with pytest.raises(BadInput, match=r"GPU 7 does not exist on node local \(GPUs there: 0 \(NVIDIA H200\), 1") as e:
        GpuPowerCap(node, 300, gpu=7).probe()
    assert e.value.field == "--target"


def test_double_inject_on_the_same_gpu_refused(fake, node, no_residue):
    a = apply(GpuClockCap(node, 900, gpu=0), 30)
    b = apply(GpuPowerCap(node, 300, gpu=0), 30)
    try:
        with pytest.raises(Refused, match=f"already under faultlab gpu-clock-cap fault {a.fault_id}") as e:
            GpuClockCap(node, 1200, gpu=0).probe()
        assert e.value.field == "--target" and f"faultlab revert {a.fault_id}" in str(e.value)
        with pytest.raises(Refused, match=b.fault_id):
            apply(GpuPowerCap(node, 250, gpu=0), 30)
        GpuClockCap(node, 1200, gpu=1).probe()  # another GPU is free
        assert fake.gpu(0)["locked"] == [345, 900] and fake.gpu(0)["power_limit_w"] == 300.0
    finally:
        assert b.revert() == "reverted" and a.revert() == "reverted"
    assert fake.gpu(0)["locked"] is None and fake.gpu(0)["power_limit_w"] == 700.0
    GpuClockCap(node, 1200, gpu=0).probe()  # free again


def test_non_root_driver_refusal_leaves_nothing(fake, node, no_residue):
    """The tool itself refuses a non-root change (exit 4): apply fails, nothing stays."""
    fake.set(non_root=True)
    before = fake.read()
    with pytest.raises(FaultlabError, match="inject step failed"):
        apply(GpuPowerCap(node, 300), 30)
    assert fake.read() == before and not load_leases(node)


def test_probe_refuses_a_non_root_node_user(fake):
    class NonRoot(LocalNode):
        def run(self, argv, **kw):
            if argv == ["id", "-u"]:
                return subprocess.CompletedProcess(argv, 0, "1000\n", "")
            return super().run(argv, **kw)

    with pytest.raises(Refused, match="needs root on node u1"):
        GpuClockCap(NonRoot("u1"), 900).probe()


def test_old_driver_query_field_spelling(fake, node):
    fake.set(old_driver=True)
    facts = GpuClockCap(node, 900).probe()
    assert facts["before"]["applications_clocks_setting"] == "Not Active"
    assert any("clocks_throttle_reasons.applications_clocks_setting" in " ".join(a) for a in fake.calls())


# -- the lease watchdog -----------------------------------------------------------------
def test_watchdog_reverts_both_after_controller_sigkill(fake, node, no_residue):
    """A controller applies a clock cap and a power cap for 6 s with no grace and is
    SIGKILLed: the on-node sh watchdog must run the revert script, which calls the
    stand-in nvidia-smi by its absolute path (-rgc, -pl OLD)."""
    fake.smi("-i", "0", "-pl", "250")
    before = fake.read()
    code = (
        "import time\n"
        "from faultlab.injectors import GpuClockCap, GpuPowerCap, apply\n"
        "from faultlab.nodes import LocalNode\n"
        "n = LocalNode('local')\n"
        "a = apply(GpuClockCap(n, 900, gpu=0), 6.0, grace_s=0.0)\n"
        "b = apply(GpuPowerCap(n, 200, gpu=0), 6.0, grace_s=0.0)\n"
        "print(a.fault_id, b.fault_id, a.evidence['verify']['ok'], b.evidence['verify']['ok'], flush=True)\n"
        "time.sleep(60)\n"
    )
    ctl = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        ids = ctl.stdout.readline().split()
    finally:
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait()
    assert len(ids) == 4 and ids[2:] == ["True", "True"], ids
    lines = [line for le in load_leases(node) for line in le.record["revert"]]
    assert sorted(lines) == sorted([f"{SMI} -i 0 -rgc", f"{SMI} -i 0 -pl 250.00"]), "the revert lines name nvidia-smi by its absolute path"
    deadline = time.time() + 30
    while time.time() < deadline and load_leases(node):
        time.sleep(0.2)
    assert not load_leases(node), "the watchdogs removed the leases at the deadline"
    assert fake.gpu(0)["locked"] is None and fake.gpu(0)["power_limit_w"] == 250.0
    assert fake.read() == before
    calls = fake.calls()
    assert [SMI, "-i", "0", "-rgc"] in calls and [SMI, "-i", "0", "-pl", "250.00"] in calls
