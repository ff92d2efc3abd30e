#!/usr/bin/env bash
# Rebuilds the published public collections datasets/public-* from the public traces
# (default ../shared/datasets/public; first argument to change it), with the importers
# and defaults of this checkout. Perseus cluster A is cut to four of its 30 hosts (the
# two whose drives operators confirmed fail-slow, host_22 and host_25, and host_1,
# host_2) so that the dataset stays small enough to ship inside the package.
set -euo pipefail
cd "$(dirname "$0")/../.."
public=${1:-../shared/datasets/public}
slice=$(mktemp -d)
trap 'rm -rf "$slice"' EXIT

faultlab dataset build --import straggler-trace "$public/straggler-trace-ST" --name public-st --force \
    --description "A production training job's operation trace (StragglerAnalysis sample ST, OSDI'25), straggling from pipeline-stage imbalance, in faultlab's dataset form with faultlab's labels and the upstream what-if result."
faultlab dataset build --import pai-minibatch "$public/alibaba-pai-minibatch" --name public-pai --split test=0.5 --force \
    --description "Per-worker mini-batch times of two distributed training jobs on Alibaba PAI (alibaba/clusterdata, AntMan OSDI'20), in faultlab's dataset form with faultlab's labels."

mkdir "$slice/perseus-cluster_A"
python3 -c '
import shutil, sys, pandas as pd
src, dst = sys.argv[1], sys.argv[2]
hosts = ["host_1", "host_2", "host_22", "host_25"]
pd.read_parquet(f"{src}/metrics.parquet", filters=[("host", "in", hosts)]).to_parquet(f"{dst}/metrics.parquet", index=False)
for f in ("slow_drives.csv", "LICENSE"):
    shutil.copy(f"{src}/{f}", f"{dst}/{f}")
' "$public/perseus-cluster_A" "$slice/perseus-cluster_A"
faultlab dataset build --import perseus "$slice/perseus-cluster_A" --name public-perseus-a --split test=0.5 --force \
    --description "Per-drive latency and throughput of four hosts of Perseus cluster A (FAST'23, via ucare-uchicago/kratos-failslow; drives as components), in faultlab's dataset form with faultlab's labels and the operators' confirmed fail-slow drives."
