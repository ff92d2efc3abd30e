"""Probe devices and orphan nic objects are seen, removed and named so that
``faultlab revert`` takes the name.

Real network namespaces (``testbed2``), real ifb devices and qdiscs: a controller
process stopped for real in the middle of doctor's qdisc probe and SIGKILLed there; a
real detached nic-slow whose lease is then destroyed (watchdog SIGKILLed, record
deleted)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys

import pytest

from faultlab.lifecycle.lease import LEASE_ID
from tests.helpers import FAULT_QDISC, fl, lease_dir, needs_root, wait_for

# doctor's own probe, stopped for real once the probe device has its qdisc: the
# controller prints the device and sleeps until it is SIGKILLed
STOPPED_DOCTOR = """
import sys, time
from faultlab import doctor
from faultlab.nodes import NetnsNode

node = NetnsNode(name=sys.argv[1], netns=sys.argv[1])
real = node.run
def run(argv, *a, **k):
    cp = real(argv, *a, **k)
    if argv[:3] == ["tc", "qdisc", "add"]:
        print(argv[argv.index("dev") + 1], flush=True)
        time.sleep(600)
    return cp
node.run = run
doctor._try_qdiscs(node)
"""


def _links(ns: str) -> str:
    return subprocess.run(["ip", "-n", ns, "-br", "link"], capture_output=True, text=True).stdout


def _status() -> list[dict]:
    cp = fl("status", "--json")
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def _kill_probe_mid_way(ns: str) -> str:
    ctl = subprocess.Popen([sys.executable, "-c", STOPPED_DOCTOR, ns], stdout=subprocess.PIPE, text=True)
    try:
        dev = ctl.stdout.readline().strip()
    finally:
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait()
    assert dev.startswith("flprb") and dev in _links(ns), (dev, _links(ns))
    return dev


@needs_root
@pytest.mark.parametrize("lease", ["kept", "lost"])
def test_a_probe_device_left_by_a_killed_doctor_is_seen_and_recovered(testbed2, no_residue, lease):
    ns = testbed2.nodes[0].netns
    dev = _kill_probe_mid_way(ns)
    try:
        hexid = dev[len("flprb"):]
        if lease == "lost":  # its lease destroyed too: the device's own mark still proves it faultlab's
            for r in _status():
                if r["fault_id"] == f"probe-{hexid}":
                    for pid in r["watchdog_pids"]:
                        os.killpg(pid, signal.SIGKILL)
            (lease_dir() / f"probe-{hexid}.json").unlink(missing_ok=True)
        rows = [r for r in _status() if dev in json.dumps(r) or r["fault_id"] == f"probe-{hexid}"]
        assert rows, f"faultlab status does not show the probe device {dev}"
        assert LEASE_ID.fullmatch(rows[0]["fault_id"]), rows
        rc = fl("recover")
        assert rc.returncode == 0, rc.stdout + rc.stderr
        assert dev not in _links(ns), f"recover left the probe device {dev}"
        assert wait_for(lambda: not list(lease_dir().glob(f"probe-{hexid}*")), 10)
    finally:
        subprocess.run(["ip", "-n", ns, "link", "del", dev], capture_output=True)
        (lease_dir() / f"probe-{dev[len('flprb'):]}.json").unlink(missing_ok=True)


@needs_root
def test_a_probe_named_device_faultlab_did_not_make_is_shown_never_removed(testbed2, no_residue):
    """Someone else's ifb named like a probe device (no faultlab mark, no lease) is a
    warning in status and is left by recover."""
    ns = testbed2.nodes[0].netns
    dev = f"flprb{secrets.token_hex(4)}"
    subprocess.run(["ip", "-n", ns, "link", "add", dev, "type", "ifb"], check=True)
    try:
        cp = fl("status")
        assert dev in cp.stderr and "not removed" in cp.stderr, cp.stdout + cp.stderr
        fl("recover")
        assert dev in _links(ns), "recover removed a device faultlab did not make"
    finally:
        subprocess.run(["ip", "-n", ns, "link", "del", dev], capture_output=True)


def _lose_lease(fid: str) -> None:
    for r in _status():
        if r["fault_id"] == fid:
            for pid in r["watchdog_pids"]:
                os.killpg(pid, signal.SIGKILL)
    (lease_dir() / f"{fid}.json").unlink()
    assert wait_for(lambda: not [r for r in _status() if r["fault_id"] == fid and r["watchdog_alive"]], 10)


@needs_root
@pytest.mark.parametrize("ifb", ["kept", "revert cut short"])
def test_every_orphan_id_status_shows_is_one_revert_takes(testbed2, no_residue, ifb):
    """A nic-slow whose lease is lost: its ifb, the ifb's qdisc, the ingress redirect
    and the root qdisc are one orphan under the fault's own id; or (a revert killed
    after its first two commands, the ingress and the ifb) the lone root qdisc, under
    ``nic-f<handle>``. Each id status shows is one ``faultlab revert`` takes and ends."""
    ns = testbed2.nodes[0].netns
    cp = fl("inject", "--type", "nic-slow", "--node", f"netns:{ns}", "--rate", "20mbit", "--duration", "120s", "--detach", "--json",
            timeout=120)
    assert cp.returncode == 0, cp.stderr
    fid = json.loads(cp.stdout)["fault_id"]
    _lose_lease(fid)
    if ifb == "revert cut short":  # the plan's first two revert commands ran, not the third
        subprocess.run(["ip", "-n", ns, "link", "del", f"flifb{fid.split('-')[1]}"], check=True)
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", testbed2.nodes[0].iface, "handle", "ffff:", "ingress"],
                       check=True)
    try:
        orphans = [r for r in _status() if r["orphan_objects"]]
        assert orphans, "no orphan shown"
        if ifb == "kept":  # one fault's objects (ifb, its qdisc, the ingress, the root qdisc) under one id
            assert [r["fault_id"] for r in orphans] == [fid] and len(orphans[0]["orphan_objects"]) == 4, orphans
        for r in orphans:
            assert LEASE_ID.fullmatch(r["fault_id"]), f"status shows {r['fault_id']}, which faultlab revert refuses"
            rc = fl("revert", r["fault_id"])
            assert rc.returncode == 0, (r, rc.stdout, rc.stderr)
        assert not [r for r in _status() if r["orphan_objects"]]
        q = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show"], capture_output=True, text=True).stdout
        assert not FAULT_QDISC.search(q) and "ingress" not in q, q
        assert "flifb" not in _links(ns)
    finally:
        fl("recover")
