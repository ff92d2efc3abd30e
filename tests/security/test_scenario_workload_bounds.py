"""A scenario someone hands root cannot size its ranks' memory past the bounds the
scenario's workload keeps (``hidden``, ``batch``): a pipeline stage's layers and the
sequence-length knob's median tokens are bounded too, and a stage of no layer is
refused, each in one line naming the field before any testbed starts.

``layers_per_stage: [1, 100000000]`` (4 KB a layer at ``hidden: 8``, 1 GiB at 16384)
unbounded would have root's ``faultlab run --backend local`` grow its rank to a 3 GiB
address-space limit in under a minute; ``[0, 2]`` would fail only later, on the
rank's own argument error.
"""

from __future__ import annotations

import pytest

from tests.helpers import fl

CASES = {
    "a stage of 100 million layers": ("workload: {kind: pipeline, stages: 2, layers_per_stage: [1, 100000000], steps: 5}",
                                      "workload.layers_per_stage[1]", "<= 64"),
    "a stage of no layer": ("workload: {kind: pipeline, stages: 2, layers_per_stage: [0, 2], steps: 5}",
                            "workload.layers_per_stage[0]", ">= 1"),
    "100 million median tokens": ("workload: {kind: ddp, steps: 5, stragglers: {seq_len: {tokens: 100000000}}}",
                                  "workload.stragglers.seq_len.tokens", "<= 65536"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_scenarios_workload_that_sizes_a_ranks_memory_past_its_bounds_is_one_line_naming_the_field(tmp_path, case):
    body, field, fix = CASES[case]
    sc = tmp_path / "sc.yaml"
    sc.write_text(f"name: bounds\ntestbed: {{nodes: 2}}\n{body}\n")
    cp = fl("scenario", "validate", sc)
    err = cp.stderr.strip()
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "\n" not in err and field in err and fix in err, err
