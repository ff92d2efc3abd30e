#!/usr/bin/env bash
# Builds the public collections public-st, public-pai and public-perseus-a from your
# own download of the public traces, with the importers and defaults of the faultlab
# on PATH (and the python3 on PATH, which needs pandas, for the Perseus slice).
#
#   examples/public/build.sh [SOURCE] [OUT]
#
# SOURCE: a folder laid out as docs/importing.md says, with the traces from
#   https://github.com/ByteDance-Seed/StragglerAnalysis (Apache-2.0)  -> straggler-trace-ST/
#   https://github.com/alibaba/clusterdata, cluster-trace-gpu-v2020/mini-batch-time (CC BY 4.0)
#                                                                     -> alibaba-pai-minibatch/
#   https://github.com/ucare-uchicago/kratos-failslow (MIT)           -> perseus-cluster_A/
#   (default, for this project's developers: ../shared/datasets/public beside the checkout).
# OUT: where the datasets go, OUT/public-* (default ./datasets; faultlab finds them there
#   by name, or anywhere through FAULTLAB_DATASETS). The folders are yours to use and, under
#   the sources' licenses, to share; this repository neither commits nor ships them.
#
# Perseus cluster A is cut to four of its 30 hosts (the two whose drives operators
# confirmed fail-slow, host_22 and host_25, and host_1, host_2) to keep the build short.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
public=${1:-$repo/../shared/datasets/public}
out=${2:-datasets}
for d in straggler-trace-ST alibaba-pai-minibatch perseus-cluster_A; do
    [ -d "$public/$d" ] || { echo "error: source: no folder $public/$d (fix: download the traces as docs/importing.md says and give their folder as the first argument)" >&2; exit 2; }
done
slice=$(mktemp -d)
trap 'rm -rf "$slice"' EXIT

faultlab dataset build --import straggler-trace "$public/straggler-trace-ST" --name public-st --out "$out" --force \
    --description "A production training job's operation trace (StragglerAnalysis sample ST, OSDI'25), straggling from pipeline-stage imbalance, in faultlab's dataset form with faultlab's labels and the upstream what-if result."
faultlab dataset build --import pai-minibatch "$public/alibaba-pai-minibatch" --name public-pai --out "$out" --split test=0.5 --force \
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
faultlab dataset build --import perseus "$slice/perseus-cluster_A" --name public-perseus-a --out "$out" --split test=0.5 --force \
    --description "Per-drive latency and throughput of four hosts of Perseus cluster A (FAST'23, via ucare-uchicago/kratos-failslow; drives as components), in faultlab's dataset form with faultlab's labels and the operators' confirmed fail-slow drives."
