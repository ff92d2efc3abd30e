"""Root never writes an output file through a link another user planted: ``score
--out``, ``dataset export --out``, ``dataset build --out`` and a campaign's
``campaign.json``.

The other user is ``nobody`` (uid 65534, ``setpriv``) who owns the folder root was
asked to write into (under the sticky ``/tmp``) and plants links there; the victim is
a root-only file (or folder) in root's own temporary folder. Each write is made as
root by the real code and the victim is checked unchanged; the output is root's own
fresh file.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from faultlab.datasets.synthetic import make_run
from tests.helpers import fl
from tests.security.test_link_writes import NOBODY, ROOT, as_nobody, assert_unchanged, run_dir, victim  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv")

REPO = Path(__file__).resolve().parents[2]
DATASET = REPO / "datasets" / "faultlab-sw-v1"
CAMPAIGN = REPO / "examples" / "software-stragglers.yaml"


def _roots_own(p: Path) -> None:
    st = os.lstat(p)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_nlink == 1, (p, oct(st.st_mode), st.st_uid)


def _export_names(tmp_path: Path) -> list[str]:
    """The files ``dataset export`` writes for DATASET (relative paths), from an export
    into a folder of root's."""
    cp = fl("dataset", "export", DATASET, "--out", tmp_path / "probe", timeout=300)
    assert cp.returncode == 0, cp.stderr
    return sorted(p.relative_to(tmp_path / "probe").as_posix() for p in (tmp_path / "probe").rglob("*") if p.is_file())


@pytest.mark.parametrize("command", ["score", "dataset export", "campaign"])
def test_an_output_file_is_never_written_through_a_planted_link(command, run_dir, nobody_dir, victim, tmp_path):
    """nobody links every name the command writes in their folder (and ``NAME.tmp``)
    to root's file: root's command replaces each link by a fresh file of its own and
    the victim stays as it was."""
    out = nobody_dir / "out"
    as_nobody("mkdir", "-p", str(out / "multivariate"))
    if command == "score":
        names = ["scores.json"]
        args = ["score", "--detector", "peer-median", "--run", run_dir, "--out", out / "scores.json", "--boot", "50"]
    elif command == "dataset export":
        names = _export_names(tmp_path)
        args = ["dataset", "export", DATASET, "--out", out]
    else:
        names = ["campaign.json"]
        args = ["campaign", CAMPAIGN, "--out", out]  # each run is refused (nobody's folder); campaign.json is still written
    for n in names:
        as_nobody("ln", "-s", str(victim), str(out / n))
        as_nobody("ln", "-s", str(victim), str(out / f"{n}.tmp"))
    cp = fl(*args, timeout=300)
    assert cp.returncode == (1 if command == "campaign" else 0), cp.stdout + cp.stderr
    assert_unchanged(victim)
    for n in names:
        _roots_own(out / n)


def test_dataset_build_refuses_an_out_root_reached_through_a_link(run_dir, nobody_dir, tmp_path):
    """``--out USERDIR/link`` with ``link -> a root folder`` planted by nobody:
    refused in one line naming the link; nothing is made in the root folder."""
    target = tmp_path / "root-folder"
    target.mkdir(mode=0o700)
    as_nobody("ln", "-s", str(target), str(nobody_dir / "link"))
    cp = fl("dataset", "build", run_dir, "--name", "ds", "--out", nobody_dir / "link", timeout=300)
    assert cp.returncode != 0
    line = cp.stderr.strip()
    assert "\n" not in line and f"{nobody_dir}/link" in line and "symlink" in line, cp.stderr
    assert list(target.iterdir()) == []


# nobody's side of the swap: once root's building folder appears in nobody's folder $1,
# move it away and link its name to root's folder $2; then answer root's read of the
# FIFO $4 (blocked until now) with meta.json $3, which also takes the FIFO's name for
# every later read
_SWAP = textwrap.dedent("""\
    while :; do for d in "$1"/.ds.building-*; do [ -d "$d" ] && break 2; done; sleep 0.005; done
    mv "$d" "$1/moved" && ln -s "$2" "$d"
    exec 4>"$4"
    cp "$3" "$4.new" && mv "$4.new" "$4"
    cat "$3" >&4
    exec 4>&-
""")


def test_dataset_build_never_writes_through_a_building_folder_swapped_for_a_link(nobody_dir, tmp_path):
    """nobody owns the output root and a run folder whose ``meta.json`` is a FIFO: while
    root's build waits on it, nobody moves root's building folder away and links its
    name to a root folder. Nothing is written into the root folder; the build stops
    with one line saying its folder was replaced."""
    from faultlab.datasets.build import build
    from faultlab.errors import FaultlabError

    target = tmp_path / "root-folder"
    target.mkdir(mode=0o700)
    run = nobody_dir / "run"
    shutil.copytree(make_run(tmp_path / "src", "r0", seed=0), run)
    meta = nobody_dir / "meta.json"
    shutil.move(run / "meta.json", meta)
    for p in [run, meta, *run.rglob("*")]:
        os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
    as_nobody("mkfifo", "-m", "0644", str(run / "meta.json"))
    swap = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sh", "-c", _SWAP, "sh",
                             str(nobody_dir), str(target), str(meta), str(run / "meta.json")], start_new_session=True)
    try:
        with pytest.raises(FaultlabError) as e:
            build([run], "ds", nobody_dir)
    finally:
        if swap.poll() is None:
            os.killpg(swap.pid, signal.SIGKILL)
        swap.wait()
    assert list(target.iterdir()) == []
    # the FIFO is refused when opened (a run's meta.json is read only as a regular
    # file), so the build may stop on it before the swap lands: either line is one line
    msg = str(e.value)
    assert "\n" not in msg and ("replaced" in msg or "meta.json" in msg and "not a regular file" in msg), msg


@pytest.mark.parametrize("out", [None, "link/sub"])
def test_a_campaigns_folder_is_never_made_through_a_planted_link(out, nobody_dir, tmp_path):
    """nobody links ``faultlab-runs`` (the default output folder where root stands) or a
    folder of ``--out`` to a root folder: root's campaign stops in one line naming the
    link and makes nothing in the root folder (it made ``NAME-TIME/`` there first)."""
    target = tmp_path / "root-folder"
    target.mkdir(mode=0o700)
    as_nobody("ln", "-s", str(target), str(nobody_dir / ("faultlab-runs" if out is None else "link")))
    cp = fl("campaign", CAMPAIGN, *([] if out is None else ["--out", nobody_dir / out]), cwd=nobody_dir, timeout=300)
    assert cp.returncode == 1 and "symlink" in cp.stderr and cp.stderr.count("\n") == 1, cp.stdout + cp.stderr
    assert list(target.iterdir()) == []


def test_a_campaign_chunk_never_reads_an_earlier_manifest_through_a_link(nobody_dir, tmp_path):
    """``--runs`` adds to the folder's ``campaign.json``: nobody links it to a root-only
    manifest, whose runs root's campaign copied into the new one it wrote there (0644);
    now it stops in one line naming the link."""
    secret = tmp_path / "secret.json"
    secret.write_text('{"runs": [{"schedule": {"name": "root-only-run"}, "code": 0}]}')
    os.chmod(secret, 0o600)
    out = nobody_dir / "out"
    as_nobody("mkdir", str(out))
    as_nobody("ln", "-s", str(secret), str(out / "campaign.json"))
    cp = fl("campaign", CAMPAIGN, "--out", out, "--runs", "0:1", timeout=300)
    assert cp.returncode == 2 and "campaign.json" in cp.stderr and "symlink" in cp.stderr, cp.stdout + cp.stderr
    assert os.path.islink(out / "campaign.json") and "root-only-run" not in cp.stdout


def test_an_imports_out_folder_is_never_made_through_a_planted_link(nobody_dir, tmp_path):
    """``label --import FORMAT PATH --out DIR``: nobody links a folder on the path of
    ``--out`` to a root folder; root's import stops in one line naming the link and
    makes nothing in the root folder (it made ``sub/`` there first)."""
    from tests.labeler.test_importers import long_frame

    data = tmp_path / "tele.csv"
    long_frame().to_csv(data, index=False)
    target = tmp_path / "root-folder"
    target.mkdir(mode=0o700)
    as_nobody("ln", "-s", str(target), str(nobody_dir / "link"))
    cp = fl("label", "--import", "long", data, "--out", nobody_dir / "link" / "sub")
    assert cp.returncode != 0 and "symlink" in cp.stderr and cp.stderr.count("\n") == 1, cp.stdout + cp.stderr
    assert list(target.iterdir()) == []
