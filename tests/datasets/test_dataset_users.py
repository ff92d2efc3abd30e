"""What dataset users expect of a faultlab dataset: per-step labels beside the label
intervals, a card the Hub's classes read (task and size category, configs per table
and split, citation), Croissant records for every record set, TimeEval and TSB-AD
exports whose labels read back equal the per-step labels, datasets found by name
(``faultlab dataset list``, ``$FAULTLAB_DATASETS``), and no build machine's absolute
path in any published file."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from faultlab.datasets.card import size_category
from faultlab.datasets.layout import TABLES, Dataset
from faultlab.datasets.public import PROVENANCE
from faultlab.rundata import effect_labels
from faultlab.telemetry.hostsampler import HOST_METRICS
from tests.helpers import PUBLIC_COLLECTIONS, PUBLISHED, REPO, fl

def table_files(ds: Path, table: str) -> list[Path]:
    """The Parquet files of a table, one a run, in run order."""
    return sorted((ds / "data" / table).glob("run=*/part-0.parquet"))


def read(ds: Path, table: str) -> pd.DataFrame:
    return pd.concat([pq.read_table(p).to_pandas() for p in table_files(ds, table)], ignore_index=True)


def read_head(ds: Path, table: str, n: int) -> tuple[pd.DataFrame, int]:
    """A table's first ``n`` rows (its files read in order only until there are ``n``)
    and its row count (from every file's footer), so a check on the first rows of a
    dataset of any size reads a few of its files."""
    files = table_files(ds, table)
    head, rows = [], 0
    for p in files:
        if rows >= n:
            break
        head.append(pq.read_table(p).to_pandas())
        rows += len(head[-1])
    total = sum(pq.ParquetFile(p).metadata.num_rows for p in files)
    return pd.concat(head, ignore_index=True).head(n), total


# -- per-step labels ---------------------------------------------------------------------


def check_step_labels(ds: Path) -> None:
    """Every rank-step is one row; it is straggling exactly where an effect label of its
    rank or of the job covers its step, and its label_id names such a label."""
    steps, sl, lab = read(ds, "steps"), read(ds, "step_labels"), read(ds, "labels")
    assert len(sl) == len(steps) and not sl.duplicated(["run_id", "rank", "step"]).any()
    assert lab.label_id.is_unique
    effects = {rid: list(effect_labels(g)[["component", "start_step", "end_step"]].itertuples()) for rid, g in lab.groupby("run_id")}
    for (rid, rank), g in sl.groupby(["run_id", "rank"]):
        want = np.zeros(len(g), bool)
        for r in effects.get(rid, []):
            if r.component in (f"rank:{rank}", "job"):
                want |= (g.step >= r.start_step).to_numpy() & (g.step <= r.end_step).to_numpy()
        assert (g.is_straggler.to_numpy() == want).all(), (rid, rank)
    assert sl[~sl.is_straggler].label_id.isna().all()
    # each straggling step's label (all at once: a published dataset has thousands)
    strag = sl[sl.is_straggler]
    src = lab.set_index("label_id").reindex(strag.label_id)  # all-null where label_id names no label
    comp, step = src.component.to_numpy(), strag.step.to_numpy()
    ok = ((src.run_id.to_numpy() == strag.run_id.to_numpy())
          & ((comp == ("rank:" + strag["rank"].astype(str)).to_numpy()) | (comp == "job"))
          & (src.start_step.to_numpy() <= step) & (step <= src.end_step.to_numpy())
          & (src.source.to_numpy() != "injected-unmanifested") & (src.cause.to_numpy() == strag.cause.to_numpy()))
    assert ok.all(), strag[~ok].head()


def test_step_labels_follow_the_label_intervals(ds):
    check_step_labels(ds)
    assert read(ds, "step_labels").is_straggler.any()  # each synthetic run has a straggler


def test_published_step_labels_follow_the_label_intervals(published):
    check_step_labels(published)


# -- the card ---------------------------------------------------------------------------


def check_card(ds: Path) -> None:
    import huggingface_hub as hf  # a test extra: missing, the test fails (never skips)

    card = hf.DatasetCard.load(ds / "README.md")
    data = card.data.to_dict()
    assert data["task_categories"] == ["tabular-classification"]
    assert {"anomaly-detection", "time-series-anomaly-detection"} <= set(data["tags"])
    assert data["size_categories"] == [size_category(len(read(ds, "steps")) or len(read(ds, "host")))]
    d = Dataset(ds)
    cfg = {c["config_name"]: c for c in data["configs"]}
    for t in TABLES:  # a config per table and split that holds rows (the `datasets` library refuses a split of none)
        rows = read(ds, t).run_id.value_counts()
        files = {f["split"]: f["path"] for f in cfg[t]["data_files"]} if t in cfg else {}
        for split in ("train", "test"):
            want = sorted(f"data/{t}/run={r}/*.parquet" for r in d.splits[split]) if rows.reindex(d.splits[split]).sum() else []
            assert sorted(files.get(split, [])) == want, (t, split)
    assert "@misc{" in card.text and "## Citation" in card.text
    cff = yaml.safe_load((ds / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "dataset" and ds.name in cff["title"]
    for snippet in ("pd.read_parquet(", "load_dataset(", "duckdb"):
        assert snippet in card.text, snippet
    inj = read(ds, "injections")
    for t in set(inj.fault_type):
        assert re.search(rf"- `{re.escape(t)}`: \w", card.text), t  # each fault type's severity unit
    host = read(ds, "host")
    fmt = json.loads((ds / "build.json").read_text()).get("import") if (ds / "build.json").is_file() else None
    units = {**HOST_METRICS, **(PROVENANCE[fmt]["metrics"] if fmt in PROVENANCE else {})}  # a public source's own metrics
    for m in {str(x).split(":", 1)[0] for x in host.metric.unique()}:
        unit, _ = units[m]
        assert f"- `{m}`: {unit};" in card.text, m


def test_card_for_dataset_users(ds):
    check_card(ds)
    assert size_category(999) == "n<1K" and size_category(60_192) == "10K<n<100K" and size_category(10**6) == "1M<n<10M"


def test_published_card_for_dataset_users(published):
    check_card(published)


# -- Croissant and the datasets library --------------------------------------------------


#: the records generated per record set (mlcroissant yields one Python dict a record,
#: about 1,000 a second here): a larger table is checked on its first rows, which must
#: equal the Parquet files' first rows in order
CROISSANT_RECORDS = 20_000
#: the same for each published dataset: every record set of each is generated, its
#: first records compared, so the check costs the same for a dataset of 14 runs or of
#: 110; the synthetic dataset (``CROISSANT_RECORDS``) is the one read across its runs
PUBLISHED_CROISSANT_RECORDS = 2_000


def check_croissant(ds: Path, records: int = CROISSANT_RECORDS) -> None:
    import mlcroissant as mlc  # a test extra: missing, the test fails (never skips)

    doc = json.loads((ds / "croissant.json").read_text())
    assert not doc["url"].startswith(("http", "/")) and (ds / doc["url"]).is_file()
    for fo in (x for x in doc["distribution"] if x["@type"] == "cr:FileObject"):
        assert (ds / fo["contentUrl"]).is_file(), fo["contentUrl"]
    d = mlc.Dataset(jsonld=str(ds / "croissant.json"))
    for t in TABLES:  # every record up to `records`; past it those records equal the first rows
        want, total = read_head(ds, t, records)
        got = list(itertools.islice(d.records(t), records + 1))
        assert len(got) == min(total, records + 1), t
        if total > records:
            head = pd.DataFrame([{k.split("/", 1)[1]: v.decode() if isinstance(v, bytes) else v for k, v in r.items()}
                                 for r in got[:records]])
            for c in head.columns:  # a null number is None in a record, NaN in pandas
                w = want[c].head(records)
                got_c = pd.to_numeric(head[c]) if pd.api.types.is_numeric_dtype(w) and not pd.api.types.is_bool_dtype(w) else head[c]
                pd.testing.assert_series_equal(got_c, w, check_dtype=False, check_names=False, obj=f"{t}.{c}")
    assert sum(1 for _ in d.records("splits")) == 2
    runs = list(d.records("run_splits"))
    split = Dataset(ds).splits
    got = {(r["run_splits/run_id"].decode() if isinstance(r["run_splits/run_id"], bytes) else r["run_splits/run_id"],
            r["run_splits/split"].decode() if isinstance(r["run_splits/split"], bytes) else r["run_splits/split"]) for r in runs}
    assert got == {(r, s) for s in ("train", "test") for r in split[s]}


def test_croissant_generates_every_record_set(ds):
    check_croissant(ds)


def test_published_croissant_generates_every_record_set(published):
    check_croissant(published, PUBLISHED_CROISSANT_RECORDS)


def hf_datasets_installed() -> bool:
    """The Hugging Face ``datasets`` package is installed (the checkout's own
    ``datasets/`` folder is a namespace package of that name: it has no origin)."""
    spec = importlib.util.find_spec("datasets")
    return spec is not None and spec.origin is not None


@pytest.mark.skipif(not hf_datasets_installed(), reason="the Hugging Face `datasets` package is not installed (pip install datasets)")
def test_datasets_library_loads_every_config(published, tmp_path):
    from datasets import load_dataset

    ds = published
    split = Dataset(ds).splits
    import huggingface_hub as hf

    configs = hf.DatasetCard.load(ds / "README.md").data.to_dict()["configs"]
    assert configs and {c["config_name"] for c in configs} <= set(TABLES)
    for c in configs:  # each config and split the card names (check_card: every table and split with rows)
        t, want = c["config_name"], read(ds, c["config_name"])
        for s in (f["split"] for f in c["data_files"]):
            got = load_dataset(str(ds), t, split=s, cache_dir=str(tmp_path))  # its own cache: never an earlier build's
            assert got.num_rows == int(want.run_id.isin(split[s]).sum()) > 0, (t, s)
            assert got.column_names == list(want.columns), (t, s)


def test_python_in_a_checkouts_root_imports_hugging_faces_datasets_not_the_datasets_folder():
    code = "import datasets, faultlab.published; print(datasets.__file__); print(faultlab.published.__file__)"
    cp = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr[-2000:]
    hf, ours = (Path(x) for x in cp.stdout.split())
    assert REPO not in hf.parents and hf.parent.name == "datasets", hf
    assert ours == REPO / "datasets" / "__init__.py", ours


# -- exports ------------------------------------------------------------------------------


def step_truth(ds: Path) -> dict:
    sl = read(ds, "step_labels").sort_values(["run_id", "rank", "step"])
    return {(rid, int(rank)): g.is_straggler.to_numpy(int) for (rid, rank), g in sl.groupby(["run_id", "rank"])}


def test_timeeval_export_round_trips(ds, tmp_path):
    p = fl("dataset", "export", ds, "--format", "timeeval", "--out", tmp_path / "te")
    assert p.returncode == 0, p.stderr
    truth, d = step_truth(ds), Dataset(ds)
    idx = pd.read_csv(tmp_path / "te" / "datasets.csv")
    assert set(idx.faultlab_split) == {"test"} and len(idx) == sum(1 for r, _ in truth if r in d.splits["test"])
    assert set(idx.train_type) == {"supervised"} and idx.train_path.nunique() == 1
    for row in idx.itertuples():
        rid, rank = row.dataset_name.rsplit("-rank", 1)
        te = pd.read_csv(tmp_path / "te" / row.test_path)
        assert list(te.columns[[0, -1]]) == ["timestamp", "is_anomaly"] and row.dimensions == te.shape[1] - 2
        assert (te.is_anomaly.to_numpy() == truth[(rid, int(rank))]).all()
    train = pd.read_csv(tmp_path / "te" / idx.train_path.iloc[0])
    order = [k for r in d.splits["train"] for k in sorted(truth) if k[0] == r]  # the runs in split order, ranks in order
    want = np.concatenate([truth[k] for k in order])
    assert list(train.columns) == list(te.columns) and (train.is_anomaly.to_numpy() == want).all()


def test_tsb_ad_export_round_trips(ds, tmp_path):
    p = fl("dataset", "export", ds, "--format", "tsb-ad", "--out", tmp_path / "tsb")
    assert p.returncode == 0, p.stderr
    truth = step_truth(ds)
    files = pd.read_csv(tmp_path / "tsb" / "File-List.csv")
    assert len(files) == len(truth)
    pattern = re.compile(r"(\d{3})_([A-Za-z0-9]+)_id_(\d+)_([A-Za-z]+)_tr_(\d+)_1st_(\d+)\.csv")
    for k, row in enumerate(files.itertuples(), start=1):
        m = pattern.fullmatch(Path(row.file).name)
        assert m and int(m[1]) == k, row.file
        df = pd.read_csv(tmp_path / "tsb" / row.file)
        y = truth[(row.run_id, int(row.rank))]
        assert df.columns[-1] == "Label" and (df.Label.to_numpy() == y).all()
        first = int(np.argmax(y)) if y.any() else len(y)
        assert int(m[6]) == first and 1 <= int(m[5]) <= max(1, len(y) // 2)


# -- finding datasets by name -------------------------------------------------------------


def test_datasets_are_found_by_name_outside_a_checkout(ds, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"FAULTLAB_DATASETS": str(ds.parent)}
    p = fl("dataset", "list", "--json", env=env, cwd=empty)
    assert p.returncode == 0, p.stderr
    assert [x["name"] for x in json.loads(p.stdout)] == [ds.name]
    p = fl("score", "--detector", "peer-median", "--dataset", ds.name, "--json", "--boot", "0", env=env, cwd=empty)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["n_runs"] == len(Dataset(ds).splits["test"])
    p = fl("score", "--detector", "peer-median", "--dataset", "no-such-v1", env=env, cwd=empty)
    assert p.returncode == 2 and "no-such-v1" in p.stderr and str(ds.parent) in p.stderr


def test_published_datasets_are_package_data():
    from faultlab.datasets.registry import list_datasets, package_dir

    assert package_dir() is not None and package_dir().resolve() == (REPO / "datasets").resolve()
    names = {d["name"] for d in list_datasets()}
    assert {n for n in PUBLISHED if n not in PUBLIC_COLLECTIONS} <= names


# -- no build machine's path ----------------------------------------------------------------

#: an absolute path of a build machine: a home, a work or temp folder, a checkout
ABS_PATH = re.compile(r"(?<![\w./-])/(?:work|home|root|tmp|Users|mnt|srv|opt)/")


def absolute_paths(root: Path) -> list[str]:
    """Every absolute path of a build machine in the files under ``root`` (a Parquet
    file's string columns, any other file as text), as ``FILE: MATCH...``."""
    hits = []
    for f in sorted(f for f in root.rglob("*") if f.is_file() and "__pycache__" not in f.parts):
        if f.suffix == ".parquet":
            t = pq.read_table(f)
            texts = [v for c in t.column_names if str(t.schema.field(c).type) == "string" for v in t.column(c).to_pylist() if v]
        else:
            texts = [f.read_text(errors="replace")]
        hits += [f"{f.relative_to(root)}: {m.group(0)}..." for x in texts for m in ABS_PATH.finditer(x)]
    return hits


def test_no_published_file_holds_an_absolute_path():
    hits = absolute_paths(REPO / "datasets")
    assert not hits, hits[:10]
    assert ABS_PATH.search('"source": "/work/lead/datasets/x"') and not ABS_PATH.search("dir: /var/tmp/faultlab-data")


def test_no_built_public_collection_holds_an_absolute_path(public_datasets):
    """Built from the traces' absolute path into a temporary folder, no file of a public
    collection names either."""
    hits = absolute_paths(public_datasets)
    assert not hits, hits[:10]
