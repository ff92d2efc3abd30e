"""``faultlab leaderboard --verify SCORES.json``: re-score a submission (a
leaderboard.json: each dataset's digest, the detectors with their parameters, the
settings) with exactly its settings and refuse it, in one line, unless every number
comes out the same.

A detector team submits its package and the leaderboard.json of
``faultlab leaderboard --detector NAME --dataset DIR --out DIR``; whoever installs the
package re-scores it here. Scoring is deterministic (seeded bootstrap, seeded chance
detectors), so an honest file matches to the last digit; :data:`TOLERANCE` absorbs
only float printing.
"""

from __future__ import annotations

import math
from pathlib import Path

from faultlab import inputfile, safefs
from faultlab.datasets import manifest
from faultlab.errors import BadInput, FaultlabError
from faultlab.scoring.lookup import available_detectors
from faultlab.scoring.leaderboard.compute import FORMAT, DatasetBoard, dataset_board, settings_of

#: the most datasets a leaderboard.json may list, and rows (detectors with their
#: parameters) in all its datasets together: its page draws a figure a dataset and a
#: CI bar a row and panel (some 8 CPU ms and 175 KB a row: a file of 2,000 rows, 250 KB,
#: took 17 CPU s and 525 MB; 16 MiB of rows would take some 20 minutes and 20 GB), and
#: ``--verify`` re-scores every row. faultlab has 12 built-in detectors
MAX_DATASETS = 64
MAX_ROWS = 1024
#: relative and absolute difference two numbers may have and still be the same
TOLERANCE = 1e-9
FIX_FILE = "give the leaderboard.json that faultlab leaderboard --out wrote"


def load_scores(path: str | Path, field: str = "--verify") -> dict:
    """The scores file at ``path``, shape-checked: ``format`` :data:`FORMAT`, a
    ``settings`` object of exactly :func:`settings_of`'s keys, and ``datasets``, each
    with a ``name``, ``path``, ``digest``, ``run_ids`` (a list, when there) and ``rows``
    of ``detector`` (text), ``params`` (object), ``metrics`` (object) and ``vs_next``
    (an object, when there).

    Raises BadInput (``field``: the option or argument that named the file) naming what
    is wrong."""
    p = Path(path)
    text = inputfile.read_text(p, field, limit=inputfile.JSON_BYTES, fix=FIX_FILE)
    try:
        d = safefs.parse_json(text, str(p))
    except ValueError as e:  # bad or too deeply nested JSON
        raise BadInput(f"{p} could not be read ({type(e).__name__}: {e})", field=field, fix=FIX_FILE) from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise BadInput(f"{p} is not a {FORMAT} file", field=field, fix=FIX_FILE)
    want = set(settings_of())
    got = d.get("settings")
    if not isinstance(got, dict) or set(got) != want:
        raise BadInput(f"{p}: settings must have exactly {', '.join(sorted(want))}", field=field, fix=FIX_FILE)
    sets = d.get("datasets")
    if not isinstance(sets, list) or not sets or not all(_dataset_ok(x) for x in sets):
        raise BadInput(f"{p}: 'datasets' must list objects with name, path, digest, run_ids and rows (detector, params, metrics, vs_next)",
                       field=field, fix=FIX_FILE)
    rows = sum(len(x["rows"]) for x in sets)
    if len(sets) > MAX_DATASETS or rows > MAX_ROWS:
        raise BadInput(f"{p} lists {len(sets)} dataset(s) and {rows} row(s), more than a leaderboard holds "
                       f"(at most {MAX_DATASETS} datasets and {MAX_ROWS} rows)", field=field, fix=FIX_FILE)
    return d


def _dataset_ok(x) -> bool:
    return (isinstance(x, dict) and all(isinstance(x.get(k), str) for k in ("name", "path", "digest")) and isinstance(x.get("rows"), list)
            and len(x["rows"]) > 0 and isinstance(x.get("run_ids", []), list)
            and all(isinstance(r, dict) and isinstance(r.get("detector"), str) and isinstance(r.get("params"), dict)
                    and isinstance(r.get("metrics"), dict) and isinstance(r.get("vs_next") or {}, dict) for r in x["rows"]))


def _same(a, b) -> bool:
    """Two recorded numbers are the same: both undefined (None/NaN) or within
    :data:`TOLERANCE`."""
    na = a is None or (isinstance(a, float) and math.isnan(a))
    nb = b is None or (isinstance(b, float) and math.isnan(b))
    if na or nb:
        return na and nb
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))


def _fmt(v) -> str:
    return "undefined" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.6g}" if isinstance(v, (int, float)) else repr(v)


def _first_difference(rec: dict, db: DatasetBoard) -> str | None:
    """The first number of the recorded dataset ``rec`` that the re-score ``db``
    does not reproduce, as a phrase; None when all match."""
    if list(rec.get("run_ids") or []) != list(db.run_ids):
        return f"the runs scored differ ({len(rec.get('run_ids') or [])} recorded, {len(db.run_ids)} re-scored)"
    now = {(r.detector, repr(sorted(r.params.items()))): r.to_dict() for r in db.rows}
    for row in rec["rows"]:
        got = now[(row["detector"], repr(sorted(row["params"].items())))]
        who = f"{rec['name']} / {row['detector']}"
        for name, m in row["metrics"].items():
            g = got["metrics"].get(name)
            if g is None or not isinstance(m, dict):
                return f"{who}: metric {name!r} is not one faultlab scores"
            for part in ("value", "ci"):
                a, b = m.get(part), g.get(part)
                pairs = zip(a, b) if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) else [(a, b)]
                if not all(_same(x, y) for x, y in pairs):
                    return f"{who}: {name} {part} is {_fmt(a) if part == 'value' else a} in the file, {_fmt(b) if part == 'value' else b} re-scored"
        a, b = row.get("vs_next") or {}, got["vs_next"] or {}
        for part in ("diff", "ci", "better"):
            x, y = a.get(part), b.get(part)
            pairs = zip(x, y) if isinstance(x, list) and isinstance(y, list) and len(x) == len(y) else [(x, y)]
            if not all(_same(u, v) for u, v in pairs):
                return f"{who}: paired bootstrap against the next row ({part}) is {x} in the file, {y} re-scored"
        if row.get("rank") != got["rank"]:
            return f"{who}: rank {row.get('rank')} in the file, {got['rank']} re-scored"
    return None


def verify(path: str | Path, datasets=()) -> list[DatasetBoard]:
    """Re-score the scores file ``path`` and compare every number.

    ``datasets``: folders to find a recorded dataset in by name (default: the path the
    file records). Each must have the recorded manifest digest.

    Returns: the re-scored boards (all numbers matched).
    Raises:
        BadInput (exit 2) for a malformed file, a dataset that is not found or has
        another digest, or a detector that cannot be loaded: the settings cannot be
        reproduced.
        FaultlabError (exit 1) naming the first number that differs.
    """
    sub = load_scores(path)
    try:
        settings = settings_of(**sub["settings"])
    except (TypeError, ValueError, OverflowError) as e:  # a setting of the wrong type: the file is malformed
        raise BadInput(f"{path}: its settings cannot be read: {e}", field="--verify", fix="verify a leaderboard.json as faultlab leaderboard --out wrote it") from None
    by_name = {Path(d).name: Path(d) for d in datasets}
    out = []
    for rec in sub["datasets"]:
        where = by_name.get(rec["name"], Path(rec["path"]))
        if not (where / manifest.NAME).is_file():
            raise BadInput(f"{path}: dataset {rec['name']!r} is not at {where}", field="--dataset", fix="give its folder with --dataset DIR")
        digest = manifest.digest(where)
        if digest != rec["digest"]:
            raise BadInput(f"{path}: dataset {rec['name']!r} at {where} has manifest digest {digest[:12]}, the scores file {rec['digest'][:12]}: "
                           "another dataset or version", field="--verify", fix="re-score on the dataset the file names, or give its folder with --dataset")
        specs = [(r["detector"], dict(r["params"])) for r in rec["rows"]]
        _installed_only(path, specs)
        db = dataset_board(where, specs, settings)
        diff = _first_difference(rec, db)
        if diff is not None:
            raise FaultlabError(f"{path} does not reproduce: {diff}", field="--verify",
                                fix="numbers must be those this faultlab and the submitted detector give with the file's settings")
        out.append(db)
    return out


def _installed_only(path, specs: list[tuple[str, dict]]) -> None:
    """BadInput unless every detector of a submitted file is built in or installed (an
    entry point of ``faultlab.detectors``): a ``module:Class`` spec in a file would
    make verifying it import and construct whatever the file names, as whoever runs
    ``--verify`` (root, on a shared machine)."""
    known = set(available_detectors())
    for name, _ in specs:
        if name not in known:
            raise BadInput(f"{path}: detector {name!r} is neither built in nor installed", field="--verify",
                           fix="install the submission's package (its faultlab.detectors entry point), then verify; module:Class specs are not run from a scores file")
