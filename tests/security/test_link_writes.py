"""Root never writes through another user's link: reports, traces, known_hosts and run
folders.

The other user is ``nobody`` (uid 65534, ``setpriv``) planting links in a folder of
theirs under the sticky ``/tmp``; the victim is a root-only file (or folder) in root's
own temporary folder. Each write is made as root by the real code (the CLI where it
has one) and the victim is checked unchanged, mode and content.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from faultlab.nodes.backends import SshTestbed
from faultlab.report.synthetic import make_run
from tests.helpers import ROOT, docker_testbed, fl

NOBODY = 65534
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv")

VICTIM_TEXT = b"root's own file\n"


def as_nobody(*argv: str) -> None:
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv], check=True, timeout=30)


@pytest.fixture
def victim(tmp_path):
    """A root-only file (0640) in root's folder: what a planted link points at."""
    v = tmp_path / "victim"
    v.write_bytes(VICTIM_TEXT)
    os.chmod(v, 0o640)
    return v


def assert_unchanged(victim: Path) -> None:
    st = os.lstat(victim)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640 and st.st_uid == 0, oct(st.st_mode)
    assert victim.read_bytes() == VICTIM_TEXT


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("links-run") / "syn-run", ranks=2, duration_s=20)


# -- reports and traces -----------------------------------------------------------------
@pytest.mark.parametrize("what", ["report", "export"])
def test_report_and_trace_never_write_through_a_planted_tmp_link(run_dir, nobody_dir, victim, what):
    """``NAME.tmp -> victim`` and ``NAME -> victim`` planted by nobody in the folder the
    page (or trace) goes to: root's ``faultlab report``/``export`` writes a fresh file
    there and leaves the victim as it was."""
    name = "report.html" if what == "report" else "trace.json"
    out = nobody_dir / name
    as_nobody("ln", "-s", str(victim), str(out) + ".tmp")
    as_nobody("ln", "-s", str(victim), str(out))
    args = ["report", str(run_dir), "--out", str(out)] if what == "report" else ["export", str(run_dir), "--format", "perfetto", "--out", str(out)]
    cp = fl(*args)
    assert cp.returncode == 0, cp.stderr
    assert_unchanged(victim)
    st = os.lstat(out)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_nlink == 1
    assert out.read_bytes().lstrip()[:1] == (b"<" if what == "report" else b"{")


def test_report_refuses_a_folder_reached_through_a_link_one_line(run_dir, nobody_dir, tmp_path):
    """``--out USERDIR/link/report.html`` with ``link -> a root folder`` planted by
    nobody: refused in one line naming the link; nothing is written in the folder."""
    target = tmp_path / "root-folder"
    target.mkdir(mode=0o700)
    as_nobody("ln", "-s", str(target), str(nobody_dir / "link"))
    cp = fl("report", str(run_dir), "--out", str(nobody_dir / "link" / "report.html"))
    assert cp.returncode != 0
    line = cp.stderr.strip()
    assert "\n" not in line and f"{nobody_dir}/link" in line and "symlink" in line, cp.stderr
    assert list(target.iterdir()) == []


# -- known_hosts -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stb(dockerd):
    """One ssh node (sshd in a host-like container), removed afterwards."""
    with docker_testbed(dockerd, SshTestbed(1)) as tb:
        yield tb


def _plant_known_hosts(case: str, nobody_dir: Path, own: Path, victim: Path) -> Path:
    if case == "link in another user's folder":
        kh = nobody_dir / "known_hosts"
        as_nobody("ln", "-s", str(victim), str(kh))
    elif case == "link in our own folder":
        kh = own / "known_hosts"
        os.symlink(victim, kh)
    else:  # another user's file in our folder
        kh = own / "known_hosts"
        kh.write_bytes(VICTIM_TEXT)
        os.chmod(kh, 0o640)
        os.chown(kh, NOBODY, NOBODY)
    return kh


@pytest.mark.parametrize("case", ["link in another user's folder", "link in our own folder", "another user's file"])
def test_pinning_a_host_key_refuses_a_planted_known_hosts(stb, nobody_dir, victim, tmp_path, case, no_residue):
    """``--accept-new-host-key`` never appends to or chmods a known_hosts that is a
    symlink, another user's file or in another user's folder: one line naming the
    path and the fix, nothing pinned, the victim (or that file) unchanged."""
    from faultlab.errors import NodeError
    from faultlab.nodes.ssh import SshNode

    own = tmp_path / "ssh"
    own.mkdir(mode=0o700)
    kh = _plant_known_hosts(case, nobody_dir, own, victim)
    n0 = stb.nodes[0]
    node = SshNode(name=n0.name, address=n0.address, iface="eth0", user="root", key=n0.key, known_hosts=str(kh), accept_new=True)
    try:
        with pytest.raises(NodeError) as e:
            node.run(["true"])
    finally:
        node.close()
    msg = str(e.value)
    assert "\n" not in msg and str(kh.parent if case.endswith("another user's folder") else kh) in msg, msg
    if case == "another user's file":
        st = os.lstat(kh)
        assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_uid == NOBODY and kh.read_bytes() == VICTIM_TEXT
    assert_unchanged(victim)


def test_pinning_a_host_key_into_our_own_known_hosts_still_works(stb, tmp_path, no_residue):
    """The same pin into a known_hosts of our own (0600, in a 0700 folder of ours):
    the key is appended and the next connection is accepted without ``accept_new``."""
    from faultlab.nodes.ssh import SshNode

    own = tmp_path / "ssh"
    own.mkdir(mode=0o700)
    kh = own / "known_hosts"
    kh.write_text("# pinned keys\n")
    n0 = stb.nodes[0]
    args = dict(name=n0.name, address=n0.address, iface="eth0", user="root", key=n0.key, known_hosts=str(kh))
    node = SshNode(**args, accept_new=True)
    try:
        assert node.run(["true"]).returncode == 0
    finally:
        node.close()
    text = kh.read_text()
    assert text.startswith("# pinned keys\n") and f"{n0.address} ssh-" in text
    assert stat.S_IMODE(os.lstat(kh).st_mode) == 0o600
    again = SshNode(**args)
    try:
        assert again.run(["true"]).returncode == 0
    finally:
        again.close()


# -- run names ----------------------------------------------------------------------------------
def _scenario(path: Path, name: str) -> Path:
    path.write_text(textwrap.dedent(f"""\
        name: {name!r}
        testbed: {{backend: local, nodes: 2}}
        workload: {{steps: 3, hidden: 8, batch: 4}}
    """))
    return path


@pytest.mark.parametrize("kind", ["traversing", "absolute", "hidden"])
def test_run_refuses_a_scenario_name_that_is_not_one_plain_name(tmp_path, kind):
    """``faultlab run`` (and ``scenario validate``) of a scenario named
    ``../../NAME``, ``/tmp/NAME`` or ``.NAME``: exit non-zero, one line naming
    ``name`` and the fix, and no folder made anywhere (neither where the name points
    nor under ``./faultlab-runs``)."""
    tok = os.urandom(3).hex()
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    name = {"traversing": f"../../escaped-{tok}", "absolute": f"/tmp/fl-links-abs-{tok}", "hidden": f".hidden-{tok}"}[kind]
    sc = _scenario(tmp_path / "sc.yaml", name)
    try:
        for args in (["scenario", "validate", str(sc)], ["run", str(sc), "--no-label"]):
            cp = fl(*args, cwd=cwd)
            assert cp.returncode != 0, (args, cp.stdout, cp.stderr)
            line = cp.stderr.strip()
            assert "\n" not in line and "name" in line and "[A-Za-z0-9._-]" in line, cp.stderr
        assert not list(tmp_path.rglob(f"*{tok}*")) and not list(Path("/tmp").glob(f"fl-links-abs-{tok}*"))
        assert not (cwd / "faultlab-runs").exists()
    finally:
        for p in [*tmp_path.rglob(f"*escaped-{tok}*"), *Path("/tmp").glob(f"fl-links-abs-{tok}*")]:
            shutil.rmtree(p, ignore_errors=True)


def test_campaign_name_is_one_plain_name():
    """A campaign's name names the folders of its runs: the same rule, one line."""
    from faultlab.scenario import Campaign, Scenario

    with pytest.raises(ValueError, match=r"\[A-Za-z0-9._-\]"):
        Campaign.model_validate({"name": "../x", "runs": 1, "types": {"cpu-contention": {}}})
    with pytest.raises(ValueError, match="at most"):
        Scenario.model_validate({"name": "x" * 200})
    assert Scenario.model_validate({"name": "ok-Name_1.2"}).name == "ok-Name_1.2"


@pytest.mark.parametrize("where", ["sticky /tmp", "another user's folder"])
def test_run_folder_is_never_made_through_a_planted_link(nobody_dir, tmp_path, where):
    """The run folder's parent is a link nobody planted (``faultlab-runs -> a root
    folder``, in the sticky /tmp or in a folder of theirs): RunDir.create (what
    ``faultlab run`` calls) refuses in one line naming the link (or the foreign
    folder); nothing is made in the root folder."""
    from faultlab.errors import FaultlabError
    from faultlab.rundir import RunDir

    target = tmp_path / "root-folder"
    target.mkdir(mode=0o700)
    base = Path(f"/tmp/fl-links-runs-{os.urandom(3).hex()}") if where == "sticky /tmp" else nobody_dir / "faultlab-runs"
    as_nobody("ln", "-s", str(target), str(base))
    try:
        with pytest.raises(FaultlabError) as e:
            RunDir.create(base / "r-1", run_id="r-1", scenario={"name": "r"})
    finally:
        if where == "sticky /tmp":
            base.unlink()
    msg = str(e.value)
    named = str(base) if where == "sticky /tmp" else str(nobody_dir)
    assert "\n" not in msg and f"{named}:" in msg, msg
    assert list(target.iterdir()) == []


# -- labeling another user's run folder -------------------------------------------------
def test_labeling_a_users_run_folder_never_writes_through_planted_links(nobody_dir, victim, tmp_path):
    """Root labels a run folder that nobody owns, where nobody planted links at every
    name root writes (``labels.parquet``, ``whatif.json``, their ``.tmp`` names and
    ``events.jsonl``): the victim stays as it was; the tables are root's fresh files;
    the event journal, a link, is refused in one line rather than appended through."""
    src = make_run(tmp_path / "syn", ranks=2, duration_s=20, label=False)
    run = nobody_dir / "run"
    shutil.copytree(src, run)
    for p in [run, *run.rglob("*")]:
        os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
    (run / "events.jsonl").unlink(missing_ok=True)
    for name in ("labels.parquet", "labels.parquet.tmp", "whatif.json", "whatif.json.tmp", "events.jsonl"):
        as_nobody("ln", "-s", str(victim), str(run / name))
    cp = fl("label", str(run))
    assert_unchanged(victim)
    for name in ("labels.parquet", "whatif.json"):
        st = os.lstat(run / name)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_nlink == 1, name
    assert cp.returncode != 0 and "events.jsonl" in cp.stderr and "symlink" in cp.stderr, cp.stdout + cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1, cp.stderr
