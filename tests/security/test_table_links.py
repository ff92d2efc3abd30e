"""Root never reads a table through another user's link: dataset tables, run-folder
tables and run ids.

The other user is ``nobody`` (uid 65534, ``setpriv``) owning a dataset or a run folder
under the sticky ``/tmp`` in which one table is a link to a root-only Parquet file
(0600 in root's 0700 folder) holding a marker value. Root's real commands (``dataset
export``, ``dataset relabel``, ``export``) must refuse with one line naming the file,
and nothing holding the marker may appear in the user's folder or the output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faultlab.datasets import manifest
from faultlab.datasets.layout import Dataset
from faultlab.errors import BadInput
from faultlab.report.synthetic import make_run
from tests.helpers import FL, REPO, ROOT, fl, give_to_nobody

NOBODY = 65534
MARKER = 777.125
pytestmark = pytest.mark.skipif(not ROOT or not shutil.which("setpriv"), reason="needs root (to act as nobody) and setpriv")


def as_nobody(script: str) -> None:
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sh", "-ec", script], check=True, timeout=30)


@pytest.fixture
def secret(tmp_path):
    """A root-only steps table (0600 in a 0700 folder) whose step times are MARKER."""
    d = tmp_path / "secret"
    make_run(d, ranks=2, duration_s=5, label=False)
    os.chmod(d, 0o700)
    p = d / "steps.parquet"
    df = pd.read_parquet(p)
    df["step_time_s"] = MARKER
    df.to_parquet(p)
    os.chmod(p, 0o600)
    return p



def marker_in(folder: Path) -> list[str]:
    """Files under ``folder`` (no link followed) whose bytes or table hold MARKER."""
    hits = []
    for p in folder.rglob("*"):
        if p.is_symlink() or not p.is_file():
            continue
        if p.suffix == ".parquet":
            df = pd.read_parquet(p)
            if "step_time_s" in df and (df["step_time_s"] == MARKER).any():
                hits.append(str(p))
        elif b"777.125" in p.read_bytes():
            hits.append(str(p))
    return hits


@pytest.fixture
def linked_dataset(nobody_dir, secret):
    """nobody's copy of faultlab-sw-v1 with one run's steps part linked to ``secret``."""
    ds = nobody_dir / "ds"
    shutil.copytree(REPO / "datasets" / "faultlab-sw-v1", ds)
    give_to_nobody(ds)
    rid = json.loads((ds / "splits.json").read_text())["test"][0]
    part = ds / "data" / "steps" / f"run={rid}" / "part-0.parquet"
    as_nobody(f"rm {part} && ln -s {secret} {part}")
    return ds, rid


def test_dataset_table_link_is_refused_by_export_and_relabel(linked_dataset, tmp_path):
    ds, rid = linked_dataset
    out = tmp_path / "out"
    for args in (["dataset", "export", ds, "--out", out], ["dataset", "relabel", ds]):
        cp = fl(*args)
        assert cp.returncode == 2, (args, cp.stdout, cp.stderr[-500:])
        err = cp.stderr.strip().splitlines()
        assert len(err) == 1 and f"run={rid}/part-0.parquet" in err[0] and "symlink" in err[0], cp.stderr
    assert marker_in(ds) == [] and (not out.exists() or marker_in(out) == [])


def test_dataset_table_link_is_refused_when_read(linked_dataset):
    ds, rid = linked_dataset
    with pytest.raises(BadInput, match="symlink"):
        Dataset(ds).read_run(rid)


def test_changed_dataset_is_refused_by_export(nobody_dir, tmp_path):
    """A part file replaced by another regular file (the user's own) fails the manifest."""
    ds = nobody_dir / "ds"
    shutil.copytree(REPO / "datasets" / "faultlab-sw-v1", ds)
    rid = json.loads((ds / "splits.json").read_text())["test"][0]
    part = ds / "data" / "injections" / f"run={rid}" / "part-0.parquet"
    shutil.copy(ds / "data" / "injections" / f"run={json.loads((ds / 'splits.json').read_text())['test'][1]}" / "part-0.parquet", part)
    cp = fl("dataset", "export", ds, "--out", tmp_path / "out")
    assert cp.returncode == 2 and "is changed since MANIFEST.sha256" in cp.stderr and "--no-verify" not in cp.stderr, cp.stderr


@pytest.mark.parametrize("rid", ["x/../../..", "..", "a b"])
def test_run_id_must_be_a_name(tmp_path, rid):
    ds = tmp_path / "ds"
    shutil.copytree(REPO / "datasets" / "faultlab-sw-v1", ds)
    sp = json.loads((ds / "splits.json").read_text())
    sp["test"][0] = rid
    (ds / "splits.json").write_text(json.dumps(sp))
    with pytest.raises(BadInput, match="is not a plain name") as e:
        Dataset(ds)
    assert "splits.json" in str(e.value) and "\n" not in str(e.value)


def test_run_folder_table_link_is_refused_by_export(nobody_dir, secret, tmp_path):
    run = nobody_dir / "run"
    shutil.move(make_run(tmp_path / "run", ranks=2, duration_s=5, label=False), run)
    give_to_nobody(run)
    as_nobody(f"rm {run}/steps.parquet && ln -s {secret} {run}/steps.parquet")
    cp = fl("export", run)
    assert cp.returncode != 0, cp.stdout
    err = cp.stderr.strip().splitlines()
    assert len(err) == 1 and "steps.parquet" in err[0] and "symlink" in err[0], cp.stderr
    assert not (run / "trace.json").exists() and marker_in(run) == []


def test_parquet_bomb_is_refused_from_its_footer(tmp_path):
    """A steps part of 40M equal values (a few hundred KB on disk, run-length encoded)
    is refused from its footer's row count, before anything is decoded."""
    ds = tmp_path / "ds"
    shutil.copytree(REPO / "datasets" / "faultlab-sw-v1", ds)
    rid = json.loads((ds / "splits.json").read_text())["test"][0]
    part = ds / "data" / "steps" / f"run={rid}" / "part-0.parquet"
    pq.write_table(pa.table({"step": pa.repeat(pa.scalar(7, pa.int8()), 40_000_000)}), part)
    assert part.stat().st_size < 4 << 20
    with pytest.raises(BadInput, match="40000000 rows") as e:
        Dataset(ds).read_run(rid)
    assert f"run={rid}/part-0.parquet" in str(e.value)


def test_a_dictionary_bomb_is_refused_before_its_text_is_decoded(tmp_path):
    """A steps part of 200,000 rows whose peer group is one 1 MiB dictionary value
    (a few KB on disk; its footer states a 1 MiB column) decodes to 200 GB: root's
    ``score`` (under a 3 GiB address-space limit, so a miss cannot fill the host)
    refuses it in one line naming the file, at once and without a traceback."""
    ds = tmp_path / "ds"
    shutil.copytree(REPO / "datasets" / "faultlab-sw-v1", ds)
    rid = json.loads((ds / "splits.json").read_text())["test"][0]
    part = ds / "data" / "steps" / f"run={rid}" / "part-0.parquet"
    pq.write_table(_dictionary_bomb(pq.read_table(part), 200_000, steps=False), part, store_schema=False, compression="zstd", dictionary_pagesize_limit=1 << 30)
    assert part.stat().st_size < 64 << 10
    # the manifest rewritten to match, as the dataset's owner may
    (ds / manifest.NAME).write_text(manifest.text({f.relative_to(ds).as_posix(): manifest.sha256(f, ds) for f in manifest._files(ds)}))
    cp = subprocess.run(["prlimit", f"--as={3 << 30}", "--", *FL, "score", "--detector", "peer-median", "--boot", "0", "--dataset", str(ds)],
                        capture_output=True, text=True, timeout=120)
    err = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and f"run={rid}/part-0.parquet" in err[0] and "decode" in err[0], cp.stderr[-800:]


def _dictionary_bomb(real: pa.Table, n: int, *, steps: bool = True) -> pa.Table:
    """``real``'s columns over ``n`` rows, its peer group one 1 MiB dictionary value
    every row names; ``step`` counts 0..n-1 (a run folder's table) or, with
    ``steps=False``, repeats the first row's (a few KB on disk once compressed)."""
    cols = {}
    for f in real.schema:
        if pa.types.is_string(f.type):
            value = "x" * (1 << 20) if f.name == "peer_group" else real.column(f.name)[0].as_py()
            cols[f.name] = pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([value]))
        else:
            cols[f.name] = pa.array(list(range(n)) if steps and f.name == "step" else [real.column(f.name)[0].as_py()] * n, f.type)
    return pa.table(cols)


@pytest.mark.parametrize("cmd", ["score", "report", "export"])
def test_a_run_folders_dictionary_bomb_is_refused_before_its_text_is_decoded(tmp_path, cmd):
    """The same bomb as a run folder's steps.parquet (200 GB decoded): root's score,
    report and export (under a 3 GiB address-space limit) refuse it in one line
    naming the file."""
    run = make_run(tmp_path / "run", ranks=2, duration_s=20)
    pq.write_table(_dictionary_bomb(pq.read_table(run / "steps.parquet"), 200_000), run / "steps.parquet", store_schema=False,
                   compression="zstd", dictionary_pagesize_limit=1 << 30)
    args = {"score": ["score", "--detector", "peer-median", "--boot", "0", "--run", str(run)],
            "report": ["report", str(run), "--out", str(tmp_path / "page.html")], "export": ["export", str(run)]}[cmd]
    cp = subprocess.run(["prlimit", f"--as={3 << 30}", "--", *FL, *args], capture_output=True, text=True, timeout=120)
    err = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(err) == 1 and "steps.parquet" in err[0] and "decode" in err[0], cp.stderr[-800:]


def test_manifest_refuses_hashing_a_huge_sparse_file(tmp_path):
    """A 1 TB sparse file listed in the manifest is refused by size, not hashed."""
    ds = tmp_path / "ds"
    shutil.copytree(REPO / "datasets" / "faultlab-sw-v1", ds)
    pad = ds / "data" / "padding.bin"
    with open(pad, "wb") as f:
        f.truncate(1 << 40)
    with open(ds / "MANIFEST.sha256", "a") as f:
        f.write(f"{'0' * 64}  data/padding.bin\n")
    cp = fl("dataset", "verify", ds, timeout=60)
    assert cp.returncode == 2 and "padding.bin" in cp.stderr and "bytes" in cp.stderr, cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1


def test_run_folder_raw_step_records_link_is_refused(nobody_dir, tmp_path):
    """With no steps table, the raw step records are read: a link among them to a
    root-only file is refused in one line naming it."""
    run = nobody_dir / "run"
    shutil.move(make_run(tmp_path / "run", ranks=2, duration_s=5, label=False), run)
    (run / "steps.parquet").unlink()
    secret = tmp_path / "secret-steps.jsonl"
    secret.write_text(json.dumps({"marker": MARKER}) + "\n")
    os.chmod(secret, 0o600)
    (run / "telemetry").mkdir(exist_ok=True)
    give_to_nobody(run)
    as_nobody(f"ln -s {secret} {run}/telemetry/steps-0.jsonl")
    cp = fl("export", run)
    assert cp.returncode != 0, cp.stdout
    err = cp.stderr.strip().splitlines()
    assert len(err) == 1 and "steps-0.jsonl" in err[0] and "symlink" in err[0], cp.stderr
    assert not (run / "trace.json").exists() and marker_in(run) == []


def test_a_steps_folder_swapped_after_its_listing_is_not_read(nobody_dir, tmp_path):
    """A partitioned steps table is listed, then its reads come later (seconds later on
    the out-of-core labeler's workers): nobody swaps ``steps/`` for a link to root's
    private run's ``steps/`` of the same layout between the two. The read of a listed
    part is refused in one line naming the symlink, never root's rows."""
    from faultlab import steptable, synthrun

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    synthrun.write_run(private / "run", 2, 4000, seed=2, run_id="ROOTPRIVATE", block_rows=4000)
    synthrun.write_run(tmp_path / "run", 2, 4000, seed=1, run_id="userrun", block_rows=4000)
    run = Path(shutil.move(tmp_path / "run", nobody_dir / "run"))
    give_to_nobody(run)
    listed = steptable.blocks(run / "steps")
    assert len(listed) > 1
    as_nobody(f'cd {run} && mv steps steps.mine && ln -s {private / "run" / "steps"} steps')
    with pytest.raises(BadInput) as e:
        steptable.read_lean_files(listed[0][1])
    assert "symlink" in str(e.value) and "\n" not in str(e.value), str(e.value)
