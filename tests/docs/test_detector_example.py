"""docs/detectors.md's complete example scores as the page says: its code block is
written to a module, scored on the published faultlab-hw-v1 (all runs, offline,
defaults) and its window MCC compared, to the page's two decimals, with the figure
the page states; the same code with ``compute_s`` in place of ``local_s`` gives the
page's second figure (what leaving the dataloader out of local time costs)."""

from __future__ import annotations

import re
from pathlib import Path

from faultlab.scoring import score_dataset

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "detectors.md"
HW = ROOT / "datasets" / "faultlab-hw-v1"
CODE = re.compile(r"```python\n(# mydet\.py.*?)```", re.S)
FIGURES = re.compile(r"window\s+MCC (\d\.\d\d)\*\*; built on `compute_s` alone it scores window MCC (\d\.\d\d)")


def test_the_documented_example_scores_the_documented_window_mcc(tmp_path, monkeypatch):
    text = DOC.read_text()
    code = CODE.search(text).group(1)
    local, compute = (float(x) for x in FIGURES.search(" ".join(text.split())).groups())
    (tmp_path / "mydet.py").write_text(code)
    (tmp_path / "mydet_compute.py").write_text(code.replace('"local_s"', '"compute_s"'))
    assert '"local_s"' in code, "the example reads the labeler's local time"
    monkeypatch.syspath_prepend(str(tmp_path))
    got = {mod: score_dataset(f"{mod}:OwnHistory", HW, split="all").metrics["window_mcc"]["value"] for mod in ("mydet", "mydet_compute")}
    assert round(got["mydet"], 2) == local, f"docs/detectors.md says window MCC {local}, the example scores {got['mydet']:.3f}"
    assert round(got["mydet_compute"], 2) == compute, f"docs say {compute} on compute_s alone, measured {got['mydet_compute']:.3f}"
