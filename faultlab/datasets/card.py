"""The dataset card (``README.md``): a Hugging Face YAML header (license,
task_categories, ``configs`` with ``data_files`` per table and split, ``dataset_info``
features) and datasheet sections (Gebru et al., "Datasheets for Datasets", CACM 2021:
motivation, composition, collection, labeling, uses, limits), rendered with jinja2
from ``templates/card.md.j2``."""

from __future__ import annotations

import time
from collections import Counter

import jinja2
import yaml

from faultlab import schema
from faultlab.datasets.layout import TABLES
from faultlab.rundir import _version

HF_DTYPE = {"string": "string", "int32": "int32", "int64": "int64", "double": "float64", "bool": "bool"}


def _features(table: str) -> list[dict]:
    return [{"name": f.name, "dtype": HF_DTYPE.get(str(f.type), str(f.type))} for f in schema.TABLES[table]]


def hf_header(meta: dict) -> dict:
    """The YAML header as a dict (huggingface_hub's DatasetCardData fields)."""
    configs = []
    for t in TABLES:
        files = []
        for split in ("train", "test"):
            ids = meta["split"][split]
            if ids:
                files.append({"split": split, "path": [f"data/{t}/run={r}/*.parquet" for r in ids]})
        configs.append({"config_name": t, "data_files": files, **({"default": True} if t == "steps" else {})})
    info = [{"config_name": t, "features": _features(t)} for t in TABLES]
    return {
        "license": meta["license"],
        "pretty_name": meta["name"],
        "task_categories": ["time-series-forecasting"],
        "tags": ["anomaly-detection", "straggler-detection", "fail-slow", "distributed-training", "time-series", "faultlab"],
        "size_categories": ["n<1K"],
        "configs": configs,
        "dataset_info": info,
    }


def card_meta(name: str, infos: list[dict], split: dict, *, labeler: dict, description: str = "", license: str = "cc-by-4.0",
              source_note: str = "", relabeled: bool = False) -> dict:
    """Everything the card and croissant.json say, from the runs' infos (runs.json)."""

    ft = Counter(t for i in infos for t in i["fault_types"])
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
    }


def _today() -> str:

    return time.strftime("%Y-%m-%d", time.gmtime())


def render(meta: dict) -> str:
    """The card's text: ``---`` YAML header ``---`` then the datasheet."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("faultlab.datasets", "templates"), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    header = yaml.safe_dump(hf_header(meta), sort_keys=False, width=1000)
    return env.get_template("card.md.j2").render(header=header, m=meta, labeler_yaml=yaml.safe_dump(meta["labeler"], sort_keys=True))
