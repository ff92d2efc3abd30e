"""faultlab dataset build|verify|info|export: the folder layout, the seeded split,
MANIFEST.sha256 naming a flipped or missing file, croissant.json validated by
mlcroissant, the card's YAML header read by huggingface_hub's card classes (offline),
TimeEval export, and --import of a public trace."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from faultlab.datasets import manifest
from faultlab.datasets.build import build, collect_runs, draw_split
from faultlab.datasets.layout import Dataset
from faultlab.datasets.synthetic import make_run
from faultlab.errors import BadInput
from tests.helpers import EXAMPLE_CAMPAIGN, PUBLIC, PUBLIC_BUILD, PUBLIC_COLLECTIONS, PUBLIC_HINT, PUBLISHED, REPO, SW_DATASET, fl, fl_many, one_line_error

#: the public traces: $FAULTLAB_PUBLIC_DATA, else ../shared/datasets/public beside the checkout (README)


def test_layout_split_and_tables(ds, campaign):
    for f in ("README.md", "croissant.json", "schema.json", "splits.json", "runs.json", "MANIFEST.sha256", "campaign/c.yaml"):
        assert (ds / f).is_file(), f
    d = Dataset(ds)
    assert sorted(d.run_ids("all")) == [f"c{i}" for i in range(5)] and len(d.splits["test"]) == 2
    assert d.splits == {k: v for k, v in draw_split([f"c{i}" for i in range(5)], 0.4, 3).items() if k in ("train", "test")}
    assert draw_split(list("abcdef"), 0.3, 1) == draw_split(list("fedcba"), 0.3, 1)  # seeded, order-free
    run = d.read_run("c1")
    src = pd.read_parquet(campaign / "run-1" / "labels.parquet")
    assert len(run.labels) == len(src) and set(run.injections.fault_type) == {"io-slow"}
    assert (ds / "data" / "steps" / "run=c1" / "part-0.parquet").is_file()
    schema = json.loads((ds / "schema.json").read_text())
    assert {c["name"] for c in schema["tables"]["steps"]} >= {"t_start", "compute_s", "step_s"}
    info = json.loads(fl("dataset", "info", ds, "--json").stdout)
    assert info["runs"] == 5 and info["fault_types"] == {"cpu-contention": 3, "io-slow": 2}
    table = fl("dataset", "info", ds).stdout  # a table: one row per figure, counts one per line, no dict repr
    assert "{" not in table and re.search(r"│ runs\s+│ 5 \(\d+ train, \d+ test", table), table
    assert re.search(r"│ cpu-contention: 3\s+│", table) and re.search(r"│ io-slow: 2\s+│", table), table


def test_verify_names_a_flipped_byte_and_a_missing_file(ds):
    assert fl("dataset", "verify", ds).returncode == 0
    part = ds / "data" / "labels" / "run=c2" / "part-0.parquet"
    b = bytearray(part.read_bytes())
    b[len(b) // 2] ^= 0x01
    part.write_bytes(bytes(b))
    p = fl("dataset", "verify", ds)
    assert p.returncode == 1 and "changed: data/labels/run=c2/part-0.parquet" in p.stderr
    (ds / "schema.json").unlink()
    p = fl("dataset", "verify", ds)
    assert p.returncode == 1 and "missing: schema.json" in p.stderr
    p = fl("dataset", "verify", ds, "--json")
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["ok"] is False and doc["missing"] == ["schema.json"], p.stdout
    assert doc["changed"] == ["data/labels/run=c2/part-0.parquet"] and doc["extra"] == []


def _score(ds, *extra):
    return fl("score", "--detector", "peer-median", "--dataset", ds, "--split", "all", "--boot", "0", "--json", *extra)


def test_score_refuses_a_dataset_that_differs_from_its_manifest(ds):
    import pyarrow.parquet as pq

    from faultlab import schema

    assert _score(ds).returncode == 0
    schema_json = (ds / "schema.json").read_text()
    (ds / "schema.json").write_text("{}")  # still valid JSON: decodes, and scoring never reads it
    one_line_error(_score(ds), "--dataset", "schema.json is changed since MANIFEST.sha256", "--no-verify")
    assert _score(ds, "--no-verify").returncode == 0  # the documented way to score it as it is
    (ds / "schema.json").write_text(schema_json)
    runs = json.loads((ds / "runs.json").read_text())
    runs[0]["n_labels"] += 1
    (ds / "runs.json").write_text(json.dumps(runs, indent=1))  # a changed row that still decodes
    one_line_error(_score(ds), "runs.json is changed")
    part = ds / "data" / "labels" / "run=c1" / "part-0.parquet"
    lab = pq.read_table(part).to_pandas()
    lab["end_ts"] = lab["end_ts"] + 30.0  # a label row moved: a valid Parquet file
    pq.write_table(schema.to_table("labels", lab), part)
    one_line_error(_score(ds), "data/labels/run=c1/part-0.parquet, runs.json are changed")
    (ds / "croissant.json").unlink()
    one_line_error(_score(ds), "runs.json are changed; croissant.json is missing since MANIFEST.sha256")


def test_build_says_when_a_run_is_given_twice(campaign, tmp_path):
    p = fl("dataset", "build", campaign / "run-0", campaign / "run-1", campaign / "run-0" / ".." / "run-0",
                 "--campaign", campaign, "--name", "dup", "--out", tmp_path)
    assert p.returncode == 0, p.stderr
    note = [line for line in p.stderr.splitlines() if "given more than once" in line]
    assert len(note) == 1 and "3 run folder(s) given more than once, built once" in note[0], p.stderr
    assert sorted(Dataset(tmp_path / "dup").run_ids("all")) == [f"c{i}" for i in range(5)]
    p = fl("dataset", "build", campaign / "run-0", campaign / "run-1", "--name", "nodup", "--out", tmp_path)
    assert p.returncode == 0 and "more than once" not in p.stderr


def test_croissant_validates_with_mlcroissant(ds):
    import mlcroissant as mlc  # a test extra: missing, the test fails (never skips)
    d = mlc.Dataset(jsonld=str(ds / "croissant.json"))
    assert {r.name for r in d.metadata.record_sets} == {"steps", "host", "injections", "labels", "step_labels", "splits", "run_splits"}
    recs = list(d.records("labels"))  # the FileSet globs and the fields resolve against the Parquet files
    assert len(recs) == sum(len(Dataset(ds).read_run(r).labels) for r in Dataset(ds).run_ids("all"))


def test_card_header_parses_with_huggingface_hub(ds):
    import huggingface_hub as hf  # a test extra: missing, the test fails (never skips)
    card = hf.DatasetCard.load(ds / "README.md")
    data = card.data.to_dict()
    assert data["license"] == "cc-by-4.0" and data["task_categories"]
    cfg = {c["config_name"]: c for c in data["configs"]}
    assert set(cfg) == {"steps", "injections", "labels", "step_labels"}  # the synthetic runs have no host metrics: no host config
    splits = {f["split"]: f["path"] for f in cfg["labels"]["data_files"]}
    assert len(splits["test"]) == 2 and all(p.startswith("data/labels/run=") for p in splits["train"])
    feats = {i["config_name"]: i["features"] for i in data["dataset_info"]}
    assert {"name": "compute_s", "dtype": "float64"} in feats["steps"]
    for section in ("## Motivation", "## Composition", "## Collection process", "## Labeling", "## Uses", "## Limits"):
        assert section in card.text
    assert "temporal_threshold" in card.text  # the labeler's configuration


def test_relabel_rebuilds_in_place_with_this_labeler(ds):
    import pyarrow.parquet as pq

    from faultlab import schema
    from faultlab.labeler import label

    before = Dataset(ds)
    run = before.read_run("c1")
    want = label(run.steps, injections=run.injections, host=run.host)
    # stale labels: as if an older labeler had found nothing in c1 (and its build had
    # written the manifest of them: relabel refuses a dataset that differs from it)
    stale = ds / "data" / "labels" / "run=c1" / "part-0.parquet"
    pq.write_table(schema.to_table("labels", schema.empty("labels")), stale)
    digests = manifest.read(ds)
    digests[stale.relative_to(ds).as_posix()] = manifest.sha256(stale)
    (ds / manifest.NAME).write_text(manifest.text(digests))
    assert Dataset(ds).read_run("c1").labels.empty
    p = fl("dataset", "relabel", ds, "--note", "re-labeled in a test")
    assert p.returncode == 0, p.stderr
    assert "re-labeled 5 runs" in p.stdout
    after = Dataset(ds)
    got = after.read_run("c1").labels
    assert len(got) == len(want) and list(got.component) == list(want.component)
    assert after.splits == before.splits and (ds / "campaign" / "c.yaml").is_file()
    assert fl("dataset", "verify", ds).returncode == 0  # a new manifest of the new files
    card = (ds / "README.md").read_text()
    assert "re-labeled in a test" in card and "re-labeled when the dataset was built" in card
    runs = json.loads((ds / "runs.json").read_text())
    assert [r["run_id"] for r in runs] == [f"c{i}" for i in range(5)] and runs[1]["n_labels"] == len(want)
    assert not list(ds.parent.glob(".t-v1*"))  # no building folder left
    p = fl("dataset", "relabel", ds.parent / "none")
    assert p.returncode == 2 and "--dataset" in p.stderr


def test_timeeval_export(ds, tmp_path):
    p = fl("dataset", "export", ds, "--format", "timeeval", "--out", tmp_path / "te")
    assert p.returncode == 0, p.stderr
    idx = pd.read_csv(tmp_path / "te" / "datasets.csv")
    assert len(idx) == 2 * 4 and {"collection_name", "dataset_name", "train_path", "test_path", "input_type", "contamination"} <= set(idx.columns)
    one = pd.read_csv(tmp_path / "te" / idx.test_path.iloc[0])
    assert list(one.columns[:1]) == ["timestamp"] and one.columns[-1] == "is_anomaly"
    assert idx.num_anomalies.sum() >= 2  # each test run's straggler
    assert fl("dataset", "export", ds, "--format", "nope").returncode == 2


def test_bad_input_is_refused_and_nothing_is_left(campaign, tmp_path):
    with pytest.raises(BadInput, match="--split"):
        draw_split(["a", "b"], 1.5, 0)
    p = fl("dataset", "build", "--campaign", campaign, "--name", "../x", "--out", tmp_path)
    assert p.returncode == 2 and "--name" in p.stderr
    p = fl("dataset", "build", "--campaign", tmp_path / "none", "--name", "x", "--out", tmp_path)
    assert p.returncode == 2 and "--campaign" in p.stderr
    unlabeled = tmp_path / "u"
    make_run(unlabeled, "u", seed=1)
    (unlabeled / "labels.parquet").unlink()
    with pytest.raises(BadInput, match="labels.parquet"):
        build(collect_runs([unlabeled]), "x", tmp_path)
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x*"))


@pytest.mark.skipif(not (PUBLIC / "straggler-trace-ST").is_dir(), reason=f"public traces not found at {PUBLIC}: {PUBLIC_HINT}")
def test_import_straggler_trace_to_dataset_form(tmp_path):
    p = fl("dataset", "build", "--import", "straggler-trace", PUBLIC / "straggler-trace-ST", "--name", "st", "--out", tmp_path)
    assert p.returncode == 0, p.stderr
    d = Dataset(tmp_path / "st")
    run = d.read_run(d.run_ids("all")[0])
    assert run.steps["rank"].nunique() > 1 and (run.steps.step_s > 0).all() and len(run.labels)
    assert fl("dataset", "verify", tmp_path / "st").returncode == 0
    p = fl("score", "--detector", "arrival-late", "--dataset", tmp_path / "st", "--split", "all", "--json", "--boot", "0")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["metrics"]["recall"]["value"] is not None  # the labels are on ranks, with times: scored
    # the labels are on the ranks of the stage the upstream what-if analysis blames most (result-ST.json)
    up = json.loads((PUBLIC / "straggler-trace-ST" / "result-ST.json").read_text())["blocking_decompose_by_stage"]
    worst = max(up, key=up.get)
    assert set(run.steps.peer_group) == {f"stage{k}" for k in up}  # peer group = pipeline stage
    ranks = set(run.steps.loc[run.steps.peer_group == f"stage{worst}", "rank"])
    assert set(run.labels.component) == {f"rank:{r}" for r in ranks} and run.labels.start_ts.notna().all()
    sl = pd.read_parquet(tmp_path / "st" / "data" / "step_labels")
    assert set(sl.loc[sl.is_straggler, "rank"]) == ranks
    # the upstream what-if result and the license travel with it, unchanged
    for f in ("result-ST.json", "LICENSE"):
        assert (tmp_path / "st" / "upstream" / f).read_bytes() == (PUBLIC / "straggler-trace-ST" / f).read_bytes()
    assert yaml.safe_load((tmp_path / "st" / "README.md").read_text().split("---")[1])["license"] == "apache-2.0"


@pytest.mark.skipif(not (PUBLIC / "perseus-cluster_A" / "metrics.parquet").is_file(), reason=f"public traces not found at {PUBLIC}: {PUBLIC_HINT}")
def test_import_perseus_to_dataset_form(tmp_path):
    # a slice (4 of the 30 hosts, both confirmed slow drives' hosts among them) copied to tmp
    src = PUBLIC / "perseus-cluster_A"
    keep = ["host_1", "host_2", "host_22", "host_25"]
    (tmp_path / "slice").mkdir()
    pd.read_parquet(src / "metrics.parquet", filters=[("host", "in", keep)]).to_parquet(tmp_path / "slice" / "metrics.parquet")
    (tmp_path / "slice" / "slow_drives.csv").write_bytes((src / "slow_drives.csv").read_bytes())
    p = fl("dataset", "build", "--import", "perseus", tmp_path / "slice", "--name", "px", "--out", tmp_path)
    assert p.returncode == 0, p.stderr
    assert fl("dataset", "verify", tmp_path / "px").returncode == 0
    d = Dataset(tmp_path / "px")
    runs = [d.read_run(r) for r in d.run_ids("all")]
    assert sorted(d.run_ids("all")) == [f"cluster_A-{h}" for h in sorted(keep)]  # a run per host
    for run in runs:
        assert run.steps.empty and run.injections.empty  # drive metrics only; nothing was injected
        host = run.run_id.split("-", 1)[1]
        assert set(run.host.metric) == {"latency", "throughput_bytes_per_s"} and {n.split("/")[0] for n in run.host.node} == {host}
        # each label's drive is a host-table node of its run
        assert {c.removeprefix("drive:") for c in run.labels.component} <= set(run.host.node)
    assert sum(run.host.node.nunique() for run in runs) == 48
    # the operators' confirmed slow drives are labeled; their list travels as the upstream truth
    assert {"drive:host_22/disk11", "drive:host_25/disk8"} <= {c for run in runs for c in run.labels.component}
    assert (tmp_path / "px" / "upstream" / "slow_drives.csv").read_bytes() == (src / "slow_drives.csv").read_bytes()
    info = json.loads(fl("dataset", "info", tmp_path / "px", "--json").stdout)
    assert info["runs"] == 4 and info["duration_s"] > 0
    # a public collection's labels are its importer's: relabel refuses it in one line
    p = fl("dataset", "relabel", tmp_path / "px")
    assert p.returncode == 2 and "--import perseus" in one_line_error(p)


def test_every_import_format_builds_a_dataset(tmp_path):
    from faultlab.datasets.public import MAPPERS, PROVENANCE
    from faultlab.importformats import REGISTRY

    assert set(MAPPERS) == set(REGISTRY) and set(PROVENANCE) <= set(REGISTRY)
    # a generic long file of two runs: one run each, components as the host table's nodes
    rng = np.random.default_rng(0)
    rows = [(run, f"disk{c}", "h", 1_700_000_000 + 10 * t, "lat", 1 + 0.01 * rng.random() + (run == "b" and c == 2 and 80 <= t < 140))
            for run in "ab" for c in range(4) for t in range(200)]
    pd.DataFrame(rows, columns=["run_id", "component", "peer_group", "timestamp", "metric", "value"]).to_csv(tmp_path / "m.csv", index=False)
    p = fl("dataset", "build", "--import", "long", tmp_path / "m.csv", "--name", "l", "--out", tmp_path, "--split", "test=0.5")
    assert p.returncode == 0, p.stderr
    d = Dataset(tmp_path / "l")
    a, b = d.read_run("a"), d.read_run("b")
    assert a.labels.empty and set(b.labels.component) == {"disk2"} and set(b.host.node) == {f"disk{c}" for c in range(4)}
    assert str(tmp_path) not in (tmp_path / "l" / "README.md").read_text() + (tmp_path / "l" / "runs.json").read_text()


@pytest.mark.skipif(not (PUBLIC / "alibaba-pai-minibatch").is_dir(), reason=f"public traces not found at {PUBLIC}: {PUBLIC_HINT}")
def test_import_pai_jobs_to_dataset_form(tmp_path):
    src = PUBLIC / "alibaba-pai-minibatch"
    p = fl("dataset", "build", "--import", "pai-minibatch", src, "--name", "pai", "--out", tmp_path, "--split", "test=0.5")
    assert p.returncode == 0, p.stderr
    d = Dataset(tmp_path / "pai")
    assert sorted(d.run_ids("all")) == ["job_2", "job_3"]  # a run per job
    for rid in ("job_2", "job_3"):
        run = d.read_run(rid)
        want = pd.read_csv(src / f"{rid}_norm.csv")
        assert set(run.host.metric) == {"batch_time_norm"} and len(run.host) == len(want)
        assert set(run.host.node) == {f"worker:{w}" for w in want.worker}
        assert set(run.labels.component) <= set(run.host.node)
    assert d.read_run("job_2").labels.empty  # the publisher: steady offsets, no episode
    card = (tmp_path / "pai" / "README.md").read_text()
    assert "license: cc-by-4.0" in card and "https://github.com/alibaba/clusterdata" in card and "AntMan" in card
    assert (tmp_path / "pai" / "upstream" / "LICENSE").read_bytes() == (src / "LICENSE").read_bytes()


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout")
def test_public_collections_are_built_never_committed():
    """The source's terms for this project: its data is not copied into the repository.
    No public collection is tracked, and one a developer builds into datasets/ is ignored."""
    git = ["git", "-C", str(REPO)]
    assert subprocess.run([*git, "ls-files", "--", "datasets/public-*"], capture_output=True, text=True, check=True).stdout == ""
    for name in PUBLIC_COLLECTIONS:
        assert subprocess.run([*git, "check-ignore", "-q", f"datasets/{name}/README.md"]).returncode == 0, name


def test_public_build_refuses_a_source_without_the_traces(tmp_path):
    """examples/public/build.sh given a folder without a trace's folder: one line naming
    it and where to get the traces, exit 2, nothing built."""
    (tmp_path / "src" / "straggler-trace-ST").mkdir(parents=True)
    p = subprocess.run(["bash", PUBLIC_BUILD, tmp_path / "src", tmp_path / "out"], capture_output=True, text=True, timeout=60)
    one_line_error(p, "alibaba-pai-minibatch", "docs/importing.md")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", PUBLIC_COLLECTIONS)
def test_built_public_collection_verifies_and_names_its_source(public_datasets, name):
    from faultlab.datasets.public import PROVENANCE

    ds = public_datasets / name
    assert fl("dataset", "verify", ds).returncode == 0
    fmt = json.loads((ds / "build.json").read_text())["import"]
    prov, card = PROVENANCE[fmt], (ds / "README.md").read_text()
    assert yaml.safe_load(card.split("---")[1])["license"] == prov["license"]
    assert prov["url"] in card and prov["citation"] in card and prov["truth"] in card
    assert (ds / "upstream" / "LICENSE").is_file() and all(list(ds.glob(f"upstream/{g}")) for g in prov["truth_files"])


#: the most one published dataset may weigh on disk (bytes)
MAX_DATASET_BYTES = 60e6


@pytest.mark.parametrize("name", [n for n in PUBLISHED if n not in PUBLIC_COLLECTIONS])
def test_published_dataset_is_intact_and_chance_sits_at_chance(name):
    from faultlab.scoring.api import score_dataset

    ds = REPO / "datasets" / name
    assert fl("dataset", "verify", ds).returncode == 0
    assert sum(f.stat().st_size for f in ds.rglob("*") if f.is_file()) <= MAX_DATASET_BYTES
    assert len(Dataset(ds).run_ids("all")) >= 20 and list((ds / "campaign").glob("*.yaml"))
    res = score_dataset([("random", {"draws": 20}), "constant", "peer-median", "temporal-z", "arrival-late"], ds,
                        split="all", by=None, n_boot=1000)
    rnd, const, real = res[0], res[1], res[2:]
    # at chance: its whole CI within 0.05 of 0. Not "the CI holds 0": the mean of 20 draws
    # over 110 runs has a CI so narrow that MCC's small finite-sample bias for independent
    # alarms (hw-v2, all runs: 0.009, its CI from 0.0002) can leave 0 just outside it
    lo, hi = rnd.ci("window_mcc")
    assert abs(rnd.window_mcc) <= 0.05 and -0.05 <= lo <= hi <= 0.05, (rnd.window_mcc, lo, hi)
    assert const.window_mcc == 0.0
    best = max(real, key=lambda r: r.window_mcc)
    assert best.ci("window_mcc")[0] > max(rnd.ci("window_mcc")[1], const.ci("window_mcc")[1]), best.detector


def test_verify_manifest_not_utf8(dataset):
    (dataset / "MANIFEST.sha256").write_bytes(b"garbage\n\xff\n")
    one_line_error(fl("dataset", "verify", str(dataset)), "MANIFEST.sha256")


#: damaged runs.json contents, and the commands that must refuse a dataset holding one
DAMAGED_RUNS_JSON = [b"[1, 2", b"\xff\xfe", b'{"runs": 1}', b"[1, 2]"]
RUNS_JSON_READERS = [["dataset", "info"], ["score", "--detector", "constant", "--split", "all", "--dataset"]]


@pytest.fixture(scope="module")
def damaged_runs_json(tmp_path_factory) -> dict[tuple[bytes, int], subprocess.CompletedProcess]:
    """For each content of DAMAGED_RUNS_JSON, a copy of the published faultlab-sw-v1
    whose runs.json holds it, and each command of RUNS_JSON_READERS run on it, all in
    one child process through faultlab's entry point (skips without the dataset)."""
    if not (SW_DATASET / "splits.json").is_file():
        pytest.skip(f"no published dataset at {SW_DATASET}")
    keys, argvs = [], []
    for i, content in enumerate(DAMAGED_RUNS_JSON):
        d = tmp_path_factory.mktemp(f"runs-json-{i}") / "ds"
        shutil.copytree(SW_DATASET, d)
        (d / "runs.json").write_bytes(content)
        for j, command in enumerate(RUNS_JSON_READERS):
            keys.append((content, j))
            argvs.append([*command, str(d)])
    return dict(zip(keys, fl_many(argvs)))


@pytest.mark.parametrize("content", DAMAGED_RUNS_JSON)
@pytest.mark.parametrize("command", range(len(RUNS_JSON_READERS)), ids=[" ".join(c[:2]) for c in RUNS_JSON_READERS])
def test_damaged_runs_json(damaged_runs_json, content, command):
    one_line_error(damaged_runs_json[(content, command)], "runs.json")


@pytest.mark.parametrize("what", ["folder", "symlink", "file"])
def test_build_force_never_removes_what_is_not_a_dataset(tmp_path, what):
    """`--force` over a folder of the user's (`--out / --name etc --force` must not
    remove /etc): refused, exit 2, the folder and its files kept; an earlier dataset is
    still replaced."""
    from faultlab.datasets.synthetic import make_run

    runs = [make_run(tmp_path / f"r{i}", f"r{i}", seed=i) for i in range(2)]
    out = tmp_path / "out"
    out.mkdir()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "precious.txt").write_text("keep me")
    if what == "folder":
        (out / "ds").mkdir()
        (out / "ds" / "precious.txt").write_text("keep me")
    elif what == "symlink":
        (out / "ds").symlink_to(mine)
    else:
        (out / "ds").write_text("keep me")
    cp = fl("dataset", "build", *map(str, runs), "--name", "ds", "--out", str(out), "--force")
    one_line_error(cp, "--name", "not a faultlab dataset")
    assert (mine / "precious.txt").read_text() == "keep me"
    if what == "folder":
        assert (out / "ds" / "precious.txt").read_text() == "keep me"
    # an earlier dataset is still replaced by --force
    ok = fl("dataset", "build", *map(str, runs), "--name", "ds2", "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    again = fl("dataset", "build", *map(str, runs), "--name", "ds2", "--out", str(out), "--force")
    assert again.returncode == 0, again.stderr


SHADOW_LIKE = "root:$6$s3cr3tSALT$h4shh4shh4sh:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n"


#: the --campaign-file cases refused: a missing file, a foreign one (a shadow-like file,
#: a Kubernetes manifest), a faultlab campaign with a bad fault, one file given twice
CAMPAIGN_FILE_CASES = ["missing", "shadow-like", "not-faultlab", "bad-fault", "twice"]


@pytest.fixture(scope="module")
def campaign_file_refusals(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """For each case of CAMPAIGN_FILE_CASES: the --out folder of ``faultlab dataset
    build`` of two synthetic runs with that --campaign-file, and the command, all in
    one child process through faultlab's entry point."""
    base = tmp_path_factory.mktemp("campaign-file-runs")
    runs = [str(make_run(base / f"r{i}", f"r{i}", seed=i)) for i in range(2)]
    outs, argvs = {}, []
    for case in CAMPAIGN_FILE_CASES:
        tmp = tmp_path_factory.mktemp(f"campaign-file-{case}")
        f = tmp / "c.yaml"
        extra = []
        if case == "shadow-like":
            f.write_text(SHADOW_LIKE)
        elif case == "not-faultlab":
            f.write_text("apiVersion: v1\nkind: Pod\n")
        elif case == "bad-fault":
            f.write_text("name: x\nfaults: [{type: bogus, at: 1s, duration: 1s}]\n")
        elif case == "twice":
            shutil.copy(EXAMPLE_CAMPAIGN, f)
            extra = ["--campaign-file", str(f)]
        outs[case] = tmp / "out"
        argvs.append(["dataset", "build", *runs, "--name", "ds", "--out", str(outs[case]), "--campaign-file", str(f), *extra])
    return {case: (outs[case], cp) for case, cp in zip(outs, fl_many(argvs))}


@pytest.mark.parametrize("case", CAMPAIGN_FILE_CASES)
def test_campaign_file_must_be_a_faultlab_campaign_or_scenario(campaign_file_refusals, case):
    """--campaign-file takes only a faultlab campaign or scenario (never, say,
    ``/etc/shadow`` copied into a dataset meant for publishing): each is checked with
    the scenario loader; a missing, foreign or bad one is one line naming
    --campaign-file, exit 2, no dataset made, and never a line of the refused file in
    the message."""
    out, cp = campaign_file_refusals[case]
    one_line_error(cp, "--campaign-file", "c.yaml")
    assert "s3cr3t" not in cp.stderr and "h4sh" not in cp.stderr
    if case == "bad-fault":
        assert "bogus" in cp.stderr  # the loader's own reason, for a file that is faultlab's
    assert not out.exists()


def test_campaign_file_accepted_is_copied_with_a_published_mode(tmp_path, two_runs):
    f = tmp_path / "sw.yaml"
    shutil.copy(EXAMPLE_CAMPAIGN, f)
    f.chmod(0o640)
    cp = fl("dataset", "build", *two_runs, "--name", "ds", "--out", str(tmp_path / "out"), "--campaign-file", str(f))
    assert cp.returncode == 0, cp.stderr
    got = tmp_path / "out" / "ds" / "campaign" / "sw.yaml"
    assert got.read_bytes() == EXAMPLE_CAMPAIGN.read_bytes()
    assert got.stat().st_mode & 0o044 == 0o044  # readable by all, as the dataset's other files
