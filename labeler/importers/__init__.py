"""Importers of public fail-slow data, by format name (``faultlab label --import FORMAT``).

Each importer reads only the telemetry (and its meta file) of a dataset, never the
upstream answers kept beside it, and returns an :class:`ImportResult`: a labels frame
(faultlab.schema.LABELS columns) and, where a what-if slowdown applies, the what-if
dict, and where the format judges whole components, a components summary.
:func:`write_outputs` writes ``labels.parquet`` (+ ``whatif.json``,
``components.parquet``) to a folder.

Formats (:data:`FORMATS`):

- ``long``: generic long-format CSV/TSV/Parquet, columns ``component, peer_group,
  timestamp`` (unix s), ``metric, value`` (larger = slower), optional ``run_id`` and
  ``load`` (what the component served; the value is judged at that load). Labeled with the two views
  of the labeler (see :mod:`faultlab.labeler.importers.long`), plus a component-level judgement: which
  components are *persistently* slow (``components.parquet``, see
  :func:`~faultlab.labeler.importers.long.judge_persistence`).
- ``perseus``: Perseus drive telemetry (FAST'23), see :mod:`faultlab.labeler.importers.perseus`.
- ``straggler-trace``: StragglerAnalysis operation trace (OSDI'25 what-if), see
  :mod:`faultlab.labeler.importers.trace`.
- ``pai-minibatch``: Alibaba PAI per-worker mini-batch times (alibaba/clusterdata), read
  as published and labeled as ``long`` (see :mod:`faultlab.labeler.importers.pai`).

Rows left out and timestamp units are shared by every format (:mod:`.common`).
"""

from __future__ import annotations

import json
from importlib import import_module
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from faultlab import safefs, schema
from faultlab.errors import BadInput
from faultlab.importformats import REGISTRY
from faultlab.labeler.importers.common import ImportResult, SkipCount, seconds_timestamps
from faultlab.labeler.importers.long import (
    COMPONENT_COLUMNS,
    LONG_COLUMNS,
    OPTIONAL_COLUMNS,
    LongConfig,
    find_long_file,
    import_long,
    judge_persistence,
    label_long,
    label_long_components,
    read_long,
)
from faultlab.labeler.importers.pai import import_pai, read_pai
from faultlab.labeler.importers.perseus import import_perseus
from faultlab.labeler.importers.trace import import_trace
from faultlab.rundir import write_together
from faultlab.schema import json_safe


#: format name -> importer ``(path, config=None) -> ImportResult`` (the names and
#: modules in :data:`faultlab.importformats.REGISTRY`)
FORMATS: dict[str, Callable[..., ImportResult]] = {
    name: getattr(import_module(mod), fn) for name, (mod, fn, _) in REGISTRY.items()
}


def import_path(fmt: str, path: str | Path, config=None) -> ImportResult:
    """Run the importer of format ``fmt`` on ``path`` (a file or a dataset folder).

    Raises:
        BadInput naming ``--import`` and the known formats for an unknown format; the
        importer's BadInput for bad input.
    """
    if fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r}", field="--import", fix="formats: " + ", ".join(sorted(FORMATS)))
    return FORMATS[fmt](path, config)


#: files an importer may write into its output folder (:func:`write_outputs`); one
#: that a new result does not have is removed, so a re-used folder keeps no stale one
OUTPUT_FILES = ("labels.parquet", "whatif.json", "components.parquet", "drives.json", "import.json")


def write_outputs(result: ImportResult, out_dir: str | Path) -> dict[str, Path]:
    """Write the result's files into ``out_dir`` (created), all or nothing.

    The files: ``labels.parquet`` (faultlab.schema.LABELS), ``import.json`` (the format
    and the result's ``info``: source, counts, the rows skipped by reason),
    ``whatif.json`` when the result has one, ``components.parquet`` when it has a
    components summary, and the result's extra JSON files. All or nothing
    (:func:`faultlab.rundir.write_together`): every file goes to a temporary file first
    and all are renamed into place only when all are written; the :data:`OUTPUT_FILES`
    of an earlier import that this result does not have (a ``whatif.json`` when this one
    has no what-if, ...) are removed in the same step. Returns ``{file name: path}``.

    Raises:
        OSError when the folder cannot be written; its files are then as before.
    """
    out = Path(out_dir)
    # made from / with no link followed: a link planted on the path of --out must not
    # make root create folders wherever it points before the write is refused
    safefs.open_dir_nofollow(out.absolute(), create=True).close()
    labels = schema.to_table("labels", result.labels)
    writers: dict[str, Callable[[Path], Any]] = {"labels.parquet": lambda tmp: pq.write_table(labels, tmp)}
    if result.components is not None:
        comps = pa.Table.from_pandas(result.components, preserve_index=False)
        writers["components.parquet"] = lambda tmp: pq.write_table(comps, tmp)
    docs = dict(result.extra)
    # what was read and what was left out (nothing dropped in silence)
    docs["import.json"] = {"format": result.format, **{k: v for k, v in result.info.items() if k != "config"}}
    if result.whatif is not None:
        docs["whatif.json"] = result.whatif
    for name, doc in docs.items():
        text = json.dumps(json_safe(doc), indent=2, sort_keys=True)
        writers[name] = lambda tmp, text=text: tmp.write_text(text)
    stale = [n for n in OUTPUT_FILES if n not in writers]
    return write_together(out, writers, remove=stale)


__all__ = ["COMPONENT_COLUMNS", "FORMATS", "ImportResult", "LONG_COLUMNS", "LongConfig", "OPTIONAL_COLUMNS", "OUTPUT_FILES",
           "SkipCount", "find_long_file", "import_long", "import_pai", "import_path", "judge_persistence", "label_long",
           "label_long_components", "read_long", "read_pai", "seconds_timestamps", "write_outputs"]
