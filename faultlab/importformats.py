"""The import formats of ``faultlab label --import``, by name: where each importer
lives (``labeler/importers/``) and one line on what it reads. Apart from the labeler
package, whose import loads pandas and pyarrow, so that the CLI lists the formats in
its help at once; :data:`faultlab.labeler.importers.FORMATS` is built from it."""

from __future__ import annotations

#: format name -> (module, importer function, what it reads)
REGISTRY: dict[str, tuple[str, str, str]] = {
    "long": ("faultlab.labeler.importers.long", "import_long",
             "generic long-format CSV/TSV/Parquet: component, peer_group, timestamp, metric, value"),
    "pai-minibatch": ("faultlab.labeler.importers.pai", "import_pai", "Alibaba PAI per-worker mini-batch times (alibaba/clusterdata)"),
    "perseus": ("faultlab.labeler.importers.perseus", "import_perseus", "Perseus drive telemetry (FAST'23)"),
    "straggler-trace": ("faultlab.labeler.importers.trace", "import_trace", "StragglerAnalysis operation trace (OSDI'25)"),
}


def formats_help() -> str:
    """Every format with what it reads, for ``--import``'s help: ``long (generic ...) |
    pai-minibatch (...) | ...``."""
    return " | ".join(f"{name} ({what})" for name, (_, _, what) in REGISTRY.items())
