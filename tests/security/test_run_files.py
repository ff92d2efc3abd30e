"""Root never reads a run folder's own files (meta.json, events.jsonl, whatif.json,
steps/_layout.json) through another user's link, a FIFO or a device.

The other user is ``nobody`` (uid 65534, ``setpriv``) owning a run folder under the
sticky ``/tmp``. They plant a link to a root-only JSON file (0600 in root's 0700
folder) holding a token, or a FIFO, at one of those names. Root's real ``report``,
``label`` and ``export`` must refuse in one line naming the file, without waiting on
the FIFO, and nothing holding the token may reach the user's folder.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from faultlab import steptable
from faultlab.errors import BadInput
from faultlab.report.synthetic import make_run
from faultlab.rundir import RunDir
from tests.helpers import ROOT, fl, give_to_nobody, nobody_sh, one_line_error

TOKEN = "ROOT-ONLY-TOKEN-4711"
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv")



@pytest.fixture
def secret(tmp_path) -> Path:
    """A root-only JSON file (0600 in a 0700 folder) of a run's meta shape holding TOKEN."""
    d = tmp_path / "secret"
    d.mkdir(mode=0o700)
    p = d / "secret.json"
    p.write_text(json.dumps({"run_id": "r", "complete": True, "t0": 1.0, "api_token": TOKEN, "peer_groups": [{"group": TOKEN}]}))
    os.chmod(p, 0o600)
    return p


@pytest.fixture
def run(nobody_dir, tmp_path) -> Path:
    """A synthetic run folder owned by nobody."""
    r = nobody_dir / "run"
    shutil.move(make_run(tmp_path / "run", ranks=2, duration_s=5, label=False), r)
    give_to_nobody(r)
    return r


def token_in(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if not p.is_symlink() and p.is_file() and TOKEN.encode() in p.read_bytes()]


@pytest.mark.parametrize("name", ["meta.json", "whatif.json"])
def test_a_linked_run_file_is_refused_by_report(run, secret, name):
    nobody_sh('rm -f "$1/$2" && ln -s "$3" "$1/$2"', run, name, secret)
    cp = fl("report", run)
    err = (cp.stdout + cp.stderr).strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and name in err[0] and "symlink" in err[0], (cp.returncode, cp.stdout, cp.stderr[-800:])
    assert not (run / "report.html").exists() and token_in(run) == []


@pytest.mark.parametrize("cmd", ["report", "label", "export"])
def test_a_fifo_meta_is_refused_unread(run, cmd):
    """A FIFO nobody never writes to: each command refuses it in one line at once (a
    reader would wait for a writer for ever)."""
    nobody_sh('rm "$1/meta.json" && mkfifo "$1/meta.json"', run)
    cp = fl(cmd, run, timeout=90)
    err = (cp.stdout + cp.stderr).strip().splitlines()
    assert cp.returncode == 2 and "meta.json" in err[-1] and "not a regular file" in err[-1], (cp.returncode, cp.stdout, cp.stderr[-800:])


def test_a_fifo_journal_is_refused_unread(run):
    """meta.json without t0 makes the time origin come from the journal: a FIFO there
    is refused, not waited on."""
    meta = RunDir(run).meta
    del meta["t0"]
    RunDir(run).write_meta(meta)
    nobody_sh('rm -f "$1/events.jsonl" && mkfifo "$1/events.jsonl"', run)
    with pytest.raises(BadInput, match="events.jsonl: is not a regular file"):
        RunDir(run).time_origin()


def test_dev_zero_and_oversize_meta_are_refused_in_bounded_memory(run, secret):
    nobody_sh('rm "$1/meta.json" && ln -s /dev/zero "$1/meta.json"', run)
    with pytest.raises(BadInput, match="meta.json: is a symlink"):
        RunDir(run).meta
    nobody_sh('rm "$1/meta.json" && truncate -s 6G "$1/meta.json"', run)
    with pytest.raises(BadInput, match="meta.json: is 6442450944 bytes") as e:
        RunDir(run).meta
    assert "\n" not in str(e.value)


def test_a_linked_step_layout_is_refused(run, secret):
    """A partitioned steps folder whose _layout.json links to root's file."""
    nobody_sh('mkdir "$1/steps" && ln -s "$2" "$1/steps/_layout.json"', run, secret)
    with pytest.raises(BadInput, match="_layout.json: is a symlink"):
        steptable.layout(run / "steps")


def test_a_linked_child_of_a_folder_of_runs_is_not_followed(nobody_dir, tmp_path):
    """nobody's folder of runs holds their run and a link to root's private run (in a
    0700 folder): the page shows their run only, and the link is one note."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    make_run(private / "ROOTPRIVATE-run", ranks=2, duration_s=5, label=False)
    runs = nobody_dir / "runs"
    runs.mkdir()
    shutil.move(make_run(tmp_path / "mine", ranks=2, duration_s=5, label=False), runs / "mine")
    give_to_nobody(runs)
    nobody_sh('ln -s "$2" "$1/zz"', runs, private / "ROOTPRIVATE-run")
    cp = fl("report", runs)
    assert cp.returncode == 0, cp.stderr[-800:]
    notes = [x for x in cp.stderr.splitlines() if "zz" in x]
    assert len(notes) == 1 and "symlink" in notes[0], cp.stderr
    page = (runs / "report.html").read_text()
    assert "ROOTPRIVATE" not in page and "mine" in page


def test_a_linked_scores_file_of_a_folder_of_runs_is_refused(nobody_dir, tmp_path):
    """nobody's folder of runs holds scores.json linked to root's private run's
    metrics.json (in a 0700 folder): the page is refused in one line naming it."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret_scores = make_run(private / "r", ranks=2, duration_s=20) / "metrics.json"
    os.chmod(secret_scores, 0o600)
    runs = nobody_dir / "runs"
    runs.mkdir()
    shutil.move(make_run(tmp_path / "mine", ranks=2, duration_s=5, label=False), runs / "mine")
    give_to_nobody(runs)
    nobody_sh('ln -s "$2" "$1/scores.json"', runs, secret_scores)
    cp = fl("report", runs)
    err = (cp.stdout + cp.stderr).strip().splitlines()
    assert cp.returncode == 2 and "scores.json" in err[-1] and "symlink" in err[-1], (cp.returncode, cp.stderr[-800:])
    assert not (runs / "report.html").exists()


@pytest.mark.parametrize("field,value", [("t0", "1e400"), ("t0", "-1e300"), ("started_ts", "1e400")])
def test_a_run_time_no_calendar_holds_is_refused_in_one_line_or_left_out(run, field, value):
    """meta.json's times are its writer's: a t0 of 1e400 (read as infinity) or -1e300
    ended ``report`` in an IndexError or OverflowError traceback, and a started_ts of
    1e400 did too. The time origin is refused in one line naming it; started_ts, only
    shown on the page, is left out."""
    meta = json.loads((run / "meta.json").read_text())
    meta.pop(field, None)
    nobody_sh('printf %s "$2" > "$1/meta.json"', run, json.dumps(meta)[:-1] + f', "{field}": {value}}}')
    cp = fl("report", run)
    if field == "t0":
        one_line_error(cp, "meta.json", "t0")
    else:
        assert cp.returncode == 0 and "Traceback" not in cp.stderr, cp.stderr[-1500:]
