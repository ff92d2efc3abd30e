"""``croissant.json``: MLCommons Croissant 1.0 metadata (JSON-LD) of a dataset folder:
one ``cr:FileSet`` of Parquet partitions (globs relative to the folder) and one
``cr:RecordSet`` per table, each column a ``cr:Field`` extracted from the Parquet
column of the same name; ``cr:FileObject`` entries for ``splits.json`` and
``runs.json`` (relative ``contentUrl`` and their SHA-256); the split as data: a
``splits`` record set of ``dataType`` ``cr:Split`` (train, test) and a ``run_splits``
record set (``run_id`` -> ``split``, which references ``splits/name``), that every
table's ``run_id`` references. Validated in the tests with ``mlcroissant`` (offline),
records generated for every record set."""

from __future__ import annotations

from faultlab.datasets.card import citation
from faultlab.datasets.layout import COLUMN_DOCS, TABLES

CONTEXT = {
    "@language": "en", "@vocab": "https://schema.org/", "citeAs": "cr:citeAs", "column": "cr:column",
    "conformsTo": "dct:conformsTo", "cr": "http://mlcommons.org/croissant/", "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"}, "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/", "examples": {"@id": "cr:examples", "@type": "@json"}, "extract": "cr:extract",
    "field": "cr:field", "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject", "fileSet": "cr:fileSet",
    "format": "cr:format", "includes": "cr:includes", "isLiveDataset": "cr:isLiveDataset", "jsonPath": "cr:jsonPath",
    "key": "cr:key", "md5": "cr:md5", "parentField": "cr:parentField", "path": "cr:path", "recordSet": "cr:recordSet",
    "references": "cr:references", "regex": "cr:regex", "repeated": "cr:repeated", "replace": "cr:replace",
    "sc": "https://schema.org/", "separator": "cr:separator", "source": "cr:source", "subField": "cr:subField",
    "transform": "cr:transform", "samplingRate": "cr:samplingRate", "equivalentProperty": "cr:equivalentProperty",
}
DTYPE = {"string": "sc:Text", "int32": "sc:Integer", "int64": "sc:Integer", "float64": "sc:Float", "bool": "sc:Boolean"}
LICENSES = {"cc-by-4.0": "https://creativecommons.org/licenses/by/4.0/", "apache-2.0": "https://www.apache.org/licenses/LICENSE-2.0",
            "mit": "https://opensource.org/license/mit"}


def _split_sets(meta: dict) -> list[dict]:
    """The ``splits`` (cr:Split) and ``run_splits`` record sets, inline data."""
    field = lambda rs, n, **kw: {"@type": "cr:Field", "@id": f"{rs}/{n}", "name": n, "dataType": "sc:Text", **kw}  # noqa: E731
    runs = [{"run_splits/run_id": r, "run_splits/split": s} for s in ("train", "test") for r in meta["split"][s]]
    return [
        {"@type": "cr:RecordSet", "@id": "splits", "name": "splits", "description": "the splits: train (fit detectors) and test (score them)",
         "dataType": "cr:Split", "key": {"@id": "splits/name"}, "field": [field("splits", "name")],
         "data": [{"splits/name": "train"}, {"splits/name": "test"}]},
        {"@type": "cr:RecordSet", "@id": "run_splits", "name": "run_splits", "description": "the split of each run (splits.json); split by run, seeded",
         "key": {"@id": "run_splits/run_id"},
         "field": [field("run_splits", "run_id"), field("run_splits", "split", references={"field": {"@id": "splits/name"}})],
         "data": runs},
    ]


def build(meta: dict, digests: dict[str, str] | None = None) -> dict:
    """The Croissant document of a dataset described by ``meta`` (card.card_meta);
    ``digests``: SHA-256 of the folder's files by relative path (the FileObjects')."""
    digests = digests or {}
    dist = [{"@type": "cr:FileObject", "@id": f, "name": f, "description": d, "contentUrl": f, "encodingFormat": "application/json",
             "sha256": digests[f]} for f, d in (("splits.json", "the train/test split by run"), ("runs.json", "per run: campaign, faults, labels"))
            if f in digests]
    records = []
    for t in TABLES:
        fs = f"{t}-files"
        dist.append({"@type": "cr:FileSet", "@id": fs, "name": fs, "description": f"Parquet partitions of the {t} table, one per run",
                     "encodingFormat": "application/x-parquet", "includes": f"data/{t}/*/*.parquet"})
        fields = [{"@type": "cr:Field", "@id": f"{t}/{f['name']}", "name": f["name"], "description": COLUMN_DOCS.get(f["name"], f["name"]),
                   "dataType": DTYPE.get(f["dtype"], "sc:Text"), "source": {"fileSet": {"@id": fs}, "extract": {"column": f["name"]}}}
                  for f in meta["tables"][t]]
        records.append({"@type": "cr:RecordSet", "@id": t, "name": t, "description": f"the {t} table", "field": fields})
    records += _split_sets(meta)
    c = citation(meta)
    return {
        "@context": CONTEXT, "@type": "sc:Dataset", "name": meta["name"], "description": meta["description"],
        "conformsTo": "http://mlcommons.org/croissant/1.0",
        "citeAs": f"@misc{{{c['key']}, title = {{{c['title']}}}, author = {{{c['author']}}}, year = {{{c['year']}}}, note = {{made with faultlab {c['version']}}}}}",
        "license": LICENSES.get(meta["license"], meta["license"]), "url": "README.md",
        "version": "1.0.0", "datePublished": meta.get("date", ""), "keywords": ["straggler detection", "fail-slow", "distributed training", "time series"],
        "distribution": dist, "recordSet": records,
    }
