"""What a dataset's score records is what its manifest vouches for.

``score`` (and so ``leaderboard``) hashes every file against ``MANIFEST.sha256`` and
records the manifest's digest beside the scores, then opens each part again to read
it. The dataset's owner, told by inotify when the hash has closed a part, may rename
another table over it or rewrite it in place meanwhile: the scores were of the new
bytes, recorded under the digest of the old ones (a board claiming the published
dataset's digest for numbers of another). Each part read must be the bytes hashed, or
the read is refused in one line naming the part.
"""

from __future__ import annotations

import json
import os
import shutil

import pyarrow.parquet as pq
import pytest

from faultlab.datasets import manifest
from faultlab.errors import BadInput
from faultlab.report.html import write_report
from faultlab.scoring import api
from tests.helpers import REPO


@pytest.fixture
def dataset(tmp_path):
    ds = tmp_path / "ds"
    shutil.copytree(REPO / "datasets" / "faultlab-hw-v1", ds)
    return ds


def _labels_part(ds):
    rid = json.loads((ds / "splits.json").read_text())["test"][0]
    return ds / "data" / "labels" / f"run={rid}" / "part-0.parquet"


def _emptied(part) -> bytes:
    """The part's bytes with no label: the same table, columns and run, 0 rows."""
    out = part.with_name(".emptied")
    pq.write_table(pq.read_table(part).slice(0, 0), out)
    data = out.read_bytes()
    out.unlink()
    return data


def _swap(part, how: str) -> None:
    data = _emptied(part)
    if how == "renamed-over":
        new = part.with_name(".new")
        new.write_bytes(data)
        os.rename(new, part)
    else:  # rewritten in place: the same file, new bytes
        with open(part, "r+b") as f:
            f.truncate(0)
            f.write(data)


@pytest.mark.parametrize("how", ["renamed-over", "rewritten-in-place"])
def test_a_part_changed_after_the_manifest_check_is_not_scored_under_its_digest(dataset, monkeypatch, how):
    part = _labels_part(dataset)
    honest = api.score_dataset("constant", dataset)
    checked = manifest.require_intact

    def check_then_swap(*a, **kw):
        out = checked(*a, **kw)
        _swap(part, how)
        return out

    monkeypatch.setattr(manifest, "require_intact", check_then_swap)
    try:
        r = api.score_dataset("constant", dataset)
    except BadInput as e:
        assert part.relative_to(dataset).as_posix() in str(e) and "\n" not in str(e), str(e)
        return
    pytest.fail(f"scored the part changed after the check under the manifest's digest {r.dataset_digest[:12]} "
                f"(the same digest as the honest score's, {honest.dataset_digest[:12]})")


def test_a_dataset_page_that_says_nothing_of_its_manifest_shows_no_part_changed_after_the_check(dataset, monkeypatch, tmp_path):
    """The page of a dataset whose files match its manifest carries no NOT VERIFIED
    note: a run whose part changed after that check is not drawn, and the page says
    why (a run that could not be read)."""
    part = _labels_part(dataset)
    checked = manifest.verify

    def check_then_swap(*a, **kw):
        out = checked(*a, **kw)
        _swap(part, "renamed-over")
        return out

    monkeypatch.setattr(manifest, "verify", check_then_swap)
    page = write_report(dataset, tmp_path / "page.html").read_text()
    rel = part.relative_to(dataset).as_posix()
    assert f"{rel} changed since MANIFEST.sha256 was checked" in page, "the page drew the part changed after its check"
