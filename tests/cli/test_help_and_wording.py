"""The CLI reads well: --version, help with metavars wrapped at word boundaries, one
rate vocabulary, explicit node backends, campaign dry-run as a table, `verified` in
words, examples that do what their headers say, the README's namespace recipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
from importlib.metadata import version

import pytest

from faultlab.errors import BadInput
from faultlab.evidence import verify_text
from faultlab.scenario import load
from faultlab.units import parse_rate
from tests.helpers import REPO, fl, needs_root



@pytest.fixture(autouse=True)
def _narrow_terminal(monkeypatch):
    """Help is read as a 72-column terminal shows it (wrapping at word boundaries)."""
    monkeypatch.setenv("COLUMNS", "72")


def test_version():
    cp = fl("--version")
    assert cp.returncode == 0 and cp.stdout.strip() == f"faultlab {version('faultlab')}"


def test_help_shows_metavars_and_wraps_at_word_boundaries():
    from faultlab.cli import inject

    cp = fl("inject", "--help")
    assert cp.returncode == 0
    text = cp.stdout
    assert "<str>" not in text
    for opt, meta in (("--rate", "RATE"), ("--duration", "DURATION"), ("--cpu-fraction", "FRACTION"), ("--read-bps", "RATE"),
                      ("--node", "BACKEND:NAME"), ("--pause", "DURATION")):
        assert re.search(rf"{re.escape(opt)}\s+{re.escape(meta)}\b", text), opt
    # every option's help text appears with its words whole, in order (a word cut at a
    # line end would break the match); box characters and indentation may sit between
    import inspect

    gap = r"(?:\s|│)+"
    for p in inspect.signature(inject).parameters.values():
        words = (p.default.help or "").split()
        if words:
            assert re.search(gap.join(map(re.escape, words)), text), p.default.help
    # the command list joins a docstring's lines (no break in mid-sentence)
    top = fl("--help").stdout
    assert re.search(r"reverts at the" + gap + r"end, on Ctrl-C", top)


def test_one_rate_vocabulary():
    assert parse_rate("50mbit") == 50e6 and parse_rate("6mb") == 48e6 and parse_rate("512kb") == 512e3 * 8
    assert parse_rate("1mib") == 2**20 * 8
    for bad, why in (("6mbps", "ambiguous"), ("50", "no unit"), ("50 mbit", "space"), ("50mbit/s", "already per second")):
        with pytest.raises(BadInput, match=why) as e:
            parse_rate(bad, "--rate")
        assert "6mb for bytes/s" in str(e.value) or "100mbit" in str(e.value)
    cp = fl("inject", "--type", "nic-slow", "--node", "local", "--target", "lo", "--rate", "6mbps", "--dry-run")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "--rate" in cp.stderr and "6mb for bytes/s" in cp.stderr
    # io-slow takes the same byte units and names the fix for bits
    cp = fl("inject", "--type", "io-slow", "--target", "1", "--path", "/", "--read-bps", "80mbit", "--dry-run")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "--read-bps" in cp.stderr and "10mb" in cp.stderr


def test_node_without_backend_is_refused_with_the_backends():
    cp = fl("doctor", "--node", "mynode")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1
    assert "--node" in cp.stderr and "local" in cp.stderr and "netns:NAME" in cp.stderr
    cp = fl("doctor", "--node", "zz:x")
    assert cp.returncode == 2 and "unknown backend 'zz'" in cp.stderr and "netns:NAME" in cp.stderr


def test_campaign_dry_run_is_a_table_and_json_on_request():
    f = str(REPO / "examples" / "hardware-faults.yaml")
    cp = fl("campaign", f, "--dry-run")
    assert cp.returncode == 0
    head = cp.stdout.splitlines()[:6]
    assert any(all(c in line for c in ("run", "seed", "type", "node", "start", "duration")) for line in head), head
    assert "hardware-000" in cp.stdout and not cp.stdout.lstrip().startswith("[")
    raw = json.loads(fl("campaign", f, "--dry-run", "--json").stdout)
    assert len(raw) == 20 and {"name", "seed", "faults"} <= set(raw[0])
    rows = [line for line in cp.stdout.splitlines() if re.search(r"│\s*\d+\s*│", line)]
    assert len(rows) == sum(len(r["faults"]) for r in raw)


def test_examples_do_what_their_headers_say():
    """Every fault kind a campaign example's header names is drawn by its schedule."""
    words = {"link slowdowns": "nic-slow", "CPU contention": "cpu-contention", "I/O throttling": "io-slow",
             "intermittent stalls": "process-pause"}
    for f in sorted((REPO / "examples").glob("*.yaml")):
        header = "".join(line for line in f.read_text().splitlines(True) if line.startswith("#"))
        c = load(f)
        if not hasattr(c, "scenarios"):
            continue
        drawn = {x.type for s in c.scenarios() for x in s.faults}
        for phrase, typ in words.items():
            if phrase in header:
                assert typ in drawn, f"{f.name} promises {phrase} but draws no {typ}"


def test_verified_says_what_was_measured_against_what():
    nic = {"tc_egress": True, "tc_ingress": True, "cap_bit_per_s": 50e6, "ingress_measured_bit_per_s": 15.5e6,
           "egress_measured_bit_per_s": 17.0e6, "throughput_under_cap": True, "ok": True}
    t = verify_text(nic, "nic-slow")
    assert t.startswith("verified: tc cap qdiscs in place") and "15.5 Mbit/s in" in t and "17.0 out" in t
    assert "<= 57.5 Mbit/s" in t and "50.0 Mbit/s cap" in t
    t = verify_text({"pids_in_cgroup": [1], "cpu_stat": {"nr_throttled": 3, "nr_periods": 8}, "ok": True}, "cpu-contention")
    assert t == "verified: 1 PID(s) in the fault's cgroup; its CPU quota throttled them in 3 of 8 CFS periods (checked > 0)"
    assert verify_text({"stopped_seen": False, "samples": 40, "ok": False}, "process-pause").startswith("NOT verified: target seen stopped")
    assert verify_text(None, "nic-slow") == "NOT verified: no measurement recorded"
    # a caller without the fault type gets the sentence of the type whose measurement the evidence holds
    assert verify_text(nic) == verify_text(nic, "nic-slow")
    assert verify_text({"workers": [{}], "worker_cpu_rate": {"1": 0.9}, "memcpy_gbps_before": 9, "memcpy_gbps_during": 4, "ok": True},
                       "mem-bw") == "verified: 1 memory-bandwidth worker(s) running; memcpy 9 -> 4 GB/s"
    assert verify_text({"workers": [{}], "worker_cpu_rate": {"1": 0.9}, "ok": True}, "cpu-contention") == \
        "verified: 1 of 1 pinned stress worker(s) seen busy (> 5% of a CPU)"


@needs_root
def test_readme_namespace_recipe_works_as_written(tmp_path):
    """The README's recipe, run as written (the name swapped for one of ours): both
    ends of the link come up with carrier, and the namespace reaches the host end."""
    text = (REPO / "README.md").read_text()
    m = re.search(r"```sh\n(ip netns add mynode .*?eth0 up)\n", text, re.S)
    assert m, "the recipe block"
    name = f"flrd{os.getpid() % 10000:04d}"
    script = m.group(1).replace("mynode", name).replace("10.0.0.", "10.254.77.")
    try:
        cp = subprocess.run(["bash", "-ec", script], capture_output=True, text=True, timeout=30)
        assert cp.returncode == 0, cp.stderr
        inner = subprocess.run(["ip", "-n", name, "link", "show", "eth0"], capture_output=True, text=True).stdout
        outer = subprocess.run(["ip", "link", "show", f"{name}-h"], capture_output=True, text=True).stdout
        assert "NO-CARRIER" not in inner and "LOWER_UP" in inner, inner
        assert "LOWER_UP" in outer, outer
        ping = subprocess.run(["ip", "netns", "exec", name, "ping", "-c", "1", "-W", "2", "10.254.77.2"], capture_output=True, text=True)
        assert ping.returncode == 0, ping.stdout + ping.stderr
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        subprocess.run(["ip", "link", "del", f"{name}-h"], capture_output=True)

