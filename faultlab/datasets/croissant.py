"""``croissant.json``: MLCommons Croissant 1.0 metadata (JSON-LD) of a dataset folder:
one ``cr:FileSet`` of Parquet partitions and one ``cr:RecordSet`` per table, each
column a ``cr:Field`` extracted from the Parquet column of the same name. Validated in
the tests with ``mlcroissant`` (offline)."""

from __future__ import annotations

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
LICENSES = {"cc-by-4.0": "https://creativecommons.org/licenses/by/4.0/", "apache-2.0": "https://www.apache.org/licenses/LICENSE-2.0"}


def build(meta: dict) -> dict:
    """The Croissant document of a dataset described by ``meta`` (card.card_meta)."""
    dist, records = [], []
    for t in TABLES:
        fs = f"{t}-files"
        dist.append({"@type": "cr:FileSet", "@id": fs, "name": fs, "description": f"Parquet partitions of the {t} table, one per run",
                     "encodingFormat": "application/x-parquet", "includes": f"data/{t}/*/*.parquet"})
        fields = [{"@type": "cr:Field", "@id": f"{t}/{f['name']}", "name": f["name"], "description": COLUMN_DOCS.get(f["name"], f["name"]),
                   "dataType": DTYPE.get(f["dtype"], "sc:Text"), "source": {"fileSet": {"@id": fs}, "extract": {"column": f["name"]}}}
                  for f in meta["tables"][t]]
        records.append({"@type": "cr:RecordSet", "@id": t, "name": t, "description": f"the {t} table", "field": fields})
    return {
        "@context": CONTEXT, "@type": "sc:Dataset", "name": meta["name"], "description": meta["description"],
        "conformsTo": "http://mlcommons.org/croissant/1.0",
        "citeAs": f"faultlab dataset {meta['name']} (faultlab {meta['faultlab_version']})",
        "license": LICENSES.get(meta["license"], meta["license"]), "url": f"https://example.invalid/datasets/{meta['name']}",
        "version": "1.0.0", "datePublished": meta.get("date", ""), "keywords": ["straggler detection", "fail-slow", "distributed training", "time series"],
        "distribution": dist, "recordSet": records,
    }
