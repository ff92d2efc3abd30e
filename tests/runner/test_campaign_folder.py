"""Two campaign files built into one folder (as the v2 datasets are): the second's
summary line and exit code count its own runs, while ``campaign.json`` lists the runs
of both. Real campaigns of one short fault-free run each on the ``local`` backend."""

from __future__ import annotations

import json

from tests.helpers import fl

CAMPAIGN = """\
name: {name}
seed: 5
runs: 1
controls: 1.0
base:
  testbed: {{backend: local, nodes: 2}}
  workload: {{kind: ddp, duration: 3s, hidden: 32, batch: 16}}
faults_per_run: [1, 1]
start: [1s, 1s]
duration: [1s, 1s]
types:
  process-pause: {{params: {{pause: [50ms], period: [400ms]}}}}
"""


def test_second_campaign_in_a_shared_folder_counts_its_own_runs(tmp_path):
    out = tmp_path / "runs"
    for name in ("first", "second"):
        f = tmp_path / f"{name}.yaml"
        f.write_text(CAMPAIGN.format(name=name))
        cp = fl("campaign", str(f), "--out", str(out), "--runs", "0:1", "--no-label", "--quiet")
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert f"campaign {name}: 1/1 runs complete" in cp.stdout, cp.stdout
    runs = json.loads((out / "campaign.json").read_text())["runs"]
    assert sorted(r["schedule"]["name"] for r in runs) == ["first-000", "second-000"]
