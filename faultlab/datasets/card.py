"""The dataset card (``README.md``): a Hugging Face YAML header (license,
task_categories, size_categories, tags, ``configs`` with ``data_files`` per table and
split, ``dataset_info`` features) and datasheet sections (Gebru et al., "Datasheets for
Datasets", CACM 2021: motivation, composition, collection, labeling, uses, limits),
with loading snippets (pandas, ``datasets``, duckdb), every host metric's unit, each
fault type's severity unit and a citation, rendered with jinja2 from
``templates/card.md.j2``, with a leaderboard section that ``faultlab leaderboard
--card`` fills (:mod:`faultlab.datasets.cardtable`); and ``CITATION.cff`` (Citation File Format 1.2.0).

Task category: the Hub has no anomaly-detection category; the task here is telling,
per rank and step, straggling from not (``step_labels.is_straggler``), a binary
classification of table rows, so ``tabular-classification``, with the tags
``anomaly-detection`` and ``time-series-anomaly-detection`` naming the task.
``size_categories`` is the Hub's bucket of the rows of the main table: the rank-steps
(``steps`` and ``step_labels``), or for a public collection without steps (drive or
worker metrics) the ``host`` rows; that table is the default config.

A public collection (:mod:`faultlab.datasets.public`) has a section on its source: where
it is published, its license (the dataset's), the upstream citation (also in
``CITATION.cff``'s references), the upstream truth and how faultlab's labels relate to
it; its own metrics' units come from there."""

from __future__ import annotations

import time
from collections import Counter

import jinja2
import yaml

from faultlab.datasets import cardtable
from faultlab.datasets.layout import TABLES, table_schema
from faultlab.injectors import FAULT_TYPES
from faultlab.knobfaults import SEVERITY_UNITS
from faultlab.rundir import _version
from faultlab.telemetry.hostsampler import HOST_METRICS

#: the largest dataset card (README.md) faultlab reads back (bytes): the page that shows
#: it whole, the licence ``dataset relabel`` keeps
CARD_BYTES = 1 << 20

HF_DTYPE = {"string": "string", "int32": "int32", "int64": "int64", "double": "float64", "bool": "bool"}


def _features(table: str) -> list[dict]:
    return [{"name": f.name, "dtype": HF_DTYPE.get(str(f.type), str(f.type))} for f in table_schema(table)]


def hf_header(meta: dict) -> dict:
    """The YAML header as a dict (huggingface_hub's DatasetCardData fields): a config per
    table and a split per config where that table has rows in that split's runs (the
    `datasets` library refuses a split of no rows; a public collection without steps has
    no ``steps`` config)."""
    configs = []
    for t in TABLES:
        files = []
        for split in ("train", "test"):
            ids = meta["split"][split]
            if ids and any(meta["rows"].get(r, {}).get(t, 1) for r in ids):
                files.append({"split": split, "path": [f"data/{t}/run={r}/*.parquet" for r in ids]})
        if files:
            configs.append({"config_name": t, "data_files": files, **({"default": True} if t == meta["main_table"] else {})})
    info = [{"config_name": t, "features": _features(t)} for t in TABLES]
    return {
        "license": meta["license"],
        "pretty_name": meta["name"],
        "task_categories": ["tabular-classification"],
        "tags": ["anomaly-detection", "time-series-anomaly-detection", "straggler-detection", "fail-slow",
                 "distributed-training", "time-series", "faultlab"],
        "size_categories": [size_category(meta["n_rows"])],
        "configs": configs,
        "dataset_info": info,
    }


#: the Hub's size buckets: (upper bound, name), the last open
SIZE_BUCKETS = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"))


def size_category(n_rows: int) -> str:
    """The Hub's ``size_categories`` bucket of ``n_rows`` rows (``n>1T`` past 1B: ``1B<n<10B`` ...)."""
    for hi, name in SIZE_BUCKETS:
        if n_rows < hi:
            return name
    return "1B<n<10B" if n_rows < 10_000_000_000 else "n>1T"


def severity_units(fault_types) -> dict[str, str]:
    """Fault type -> what its ``severity`` measures and in what unit (the injector's
    ``severity_unit``, or a workload knob's, faultlab.knobfaults.SEVERITY_UNITS)."""
    out = {}
    for t in sorted(fault_types):
        cls = FAULT_TYPES.get(t)
        out[t] = cls.severity_unit if cls is not None else SEVERITY_UNITS.get(t, "type-specific")
    return out


def host_metrics(names, units: dict | None = None) -> list[dict]:
    """Per host metric base name: its unit and meaning (``units``, a public source's
    ``{name: (unit, meaning)}``, else faultlab.telemetry.hostsampler's)."""
    known = {**HOST_METRICS, **(units or {})}
    return [{"name": n, "unit": known.get(n, ("in the name", ""))[0], "meaning": known.get(n, ("", "see the name"))[1]}
            for n in sorted(names)]


def citation(meta: dict) -> dict:
    """Title, authors, version, year and BibTeX key the citation block and CITATION.cff
    give (no URL: the dataset is cited by name and the faultlab version that made it)."""
    return {"title": f"{meta['name']}: labeled fail-slow telemetry of synchronous distributed training",
            "author": "The faultlab authors", "version": meta["faultlab_version"], "year": meta["date"][:4],
            "date": meta["date"], "key": meta["name"].replace("-", "_")}


def citation_cff(meta: dict) -> str:
    """``CITATION.cff`` of the dataset (Citation File Format 1.2.0, type dataset)."""
    c = citation(meta)
    doc = {"cff-version": "1.2.0", "message": "If you use this dataset, please cite it as below.", "type": "dataset",
           "title": c["title"], "authors": [{"name": c["author"]}], "version": c["version"], "date-released": c["date"],
           "license": {"cc-by-4.0": "CC-BY-4.0", "apache-2.0": "Apache-2.0", "mit": "MIT"}.get(meta["license"], meta["license"]),
           "keywords": ["straggler detection", "fail-slow", "distributed training", "anomaly detection"]}
    prov = meta.get("provenance")
    if prov:
        doc["references"] = [{"type": "conference-paper", "title": prov["paper"], "authors": [{"name": prov["authors"]}],
                              "conference": {"name": prov["venue"]}, "year": prov["year"], "url": prov["url"],
                              "notes": f"the source of this dataset: {prov['source']}"}]
    return yaml.safe_dump(doc, sort_keys=False, width=1000)


def card_meta(name: str, infos: list[dict], split: dict, *, labeler: dict, description: str = "", license: str = "cc-by-4.0",
              source_note: str = "", relabeled: bool = False, provenance: dict | None = None) -> dict:
    """Everything the card and croissant.json say, from the runs' infos (runs.json);
    ``provenance``: a public collection's (faultlab.datasets.public.PROVENANCE entry)."""

    ft = Counter(t for i in infos for t in i["fault_types"])
    n_step_rows = sum(int(i.get("n_step_rows", 0)) for i in infos)
    src = Counter()
    for i in infos:
        src.update(i["labels_by_source"])
    return {
        "name": name, "description": description or f"{name}: labeled fail-slow telemetry of synchronous distributed training, made with faultlab",
        "license": license, "n_runs": len(infos), "split": split, "fault_types": dict(sorted(ft.items())),
        "labels_by_source": dict(sorted(src.items())), "n_labels": sum(i["n_labels"] for i in infos),
        "n_faults": sum(i["n_faults"] for i in infos), "ranks": sorted({i["n_ranks"] for i in infos}),
        "duration_s": sum(i["duration_s"] for i in infos), "campaigns": sorted({str(i["campaign"]) for i in infos}),
        "faultlab_version": _version(), "labeler": labeler, "relabeled": relabeled, "source_note": source_note,
        "tables": {t: _features(t) for t in TABLES}, "date": _today(),
        "rows": {i["run_id"]: table_rows(i) for i in infos},
        "n_rows": n_step_rows or sum(int(i.get("n_host_rows", 0)) for i in infos),
        "main_table": "steps" if n_step_rows or not provenance else "host", "provenance": provenance,
        "n_workload_faults": sum(int(i.get("n_workload_faults", 0)) for i in infos),
        "host_metrics": host_metrics({m for i in infos for m in i.get("host_metrics", [])}, (provenance or {}).get("metrics")),
        "severity_units": severity_units(ft),
    }


def table_rows(info: dict) -> dict[str, int]:
    """Rows of each table of a run, from its ``runs.json`` entry (a count it lacks: 1,
    as if the table had rows)."""
    steps = int(info.get("n_step_rows", 1))
    return {"steps": steps, "step_labels": steps, "host": int(info.get("n_host_rows", 1)), "injections": int(info.get("n_faults", 1)),
            "labels": int(info.get("n_labels", 1))}


def _today() -> str:

    return time.strftime("%Y-%m-%d", time.gmtime())


def render(meta: dict) -> str:
    """The card's text: ``---`` YAML header ``---`` then the datasheet."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("faultlab.datasets", "templates"), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    header = yaml.safe_dump(hf_header(meta), sort_keys=False, width=1000)
    return env.get_template("card.md.j2").render(header=header, m=meta, c=citation(meta), leaderboard_intro=cardtable.intro(meta["name"]),
                                                 labeler_yaml=yaml.safe_dump(meta["labeler"], sort_keys=True))
