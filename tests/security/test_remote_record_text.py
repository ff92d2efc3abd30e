"""An ssh node's lease records reach `status`/`revert --inventory` printable only.

A record on an ssh node is that node's word: its root may rewrite it, and
`lease.valid_record` takes any string as its ``fault_type`` and ``target``. The node
here is this host standing in for one (as in tests/lifecycle/test_lookalikes.py): a
real remote lease (record and ``REMOTE_WATCHDOG_SH`` watchdog) in a folder of the
test's, read by the ssh node's view (``remoteview.remote_view``); its record is
rewritten with ESC c (a full reset of root's terminal), an OSC title and a screen
clear. What ``remotecmds.status`` and ``revert`` print must hold no ESC.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import time

from rich.console import Console

from faultlab.lifecycle import remotecmds
from faultlab.lifecycle.lease_remote import RemoteLease
from faultlab.lifecycle.remoteview import remote_view
from faultlab.lifecycle.watchdog import REMOTE_WATCHDOG_SH
from faultlab.injectors.base import Cmd
from tests.helpers import needs_root, stand_in_ssh_node, wait_for

ESC = "\x1b"


@needs_root
def test_a_nodes_record_is_printed_printable_only(tmp_path, monkeypatch, no_residue):
    node, d = stand_in_ssh_node(tmp_path, monkeypatch)
    monkeypatch.setattr(remotecmds, "in_force", remote_view)  # the ssh node's view, on the stand-in node
    fid = f"process-{secrets.token_hex(3)}"
    rec = d / f"{fid}.json"
    RemoteLease.create_for(node, fid, "process-pause", "pid:0", {}, [Cmd(("true",))], time.time() + 120, REMOTE_WATCHDOG_SH)
    assert wait_for(rec.exists, 10)
    r = json.loads(rec.read_text())
    r.update(target=f"pid:1{ESC}c{ESC}]0;node-title{ESC}\\", fault_type=f"process-pause{ESC}[2J")
    tmp = d / "rewrite.tmp"
    tmp.write_text(json.dumps(r))
    os.chmod(tmp, 0o644)
    os.replace(tmp, rec)
    shown, reverted = io.StringIO(), io.StringIO()
    remotecmds.status([node], Console(file=shown, width=300), False)
    assert remotecmds.revert([node], fid, Console(file=reverted, width=300), False) == 0
    assert wait_for(lambda: not rec.exists(), 10), "the watchdog did not end the fault"
    assert fid in shown.getvalue() and "pid:1" in shown.getvalue(), shown.getvalue()
    assert ESC not in shown.getvalue() + reverted.getvalue(), repr(shown.getvalue())
