"""An ssh node's ``host-NODE.jsonl`` (written by the node's root or login user, copied
back up to ``collect.MAX_FILE_BYTES``) costs the controller bounded memory: the file is
read a line at a time with one sample held back, at most the run's length of samples
make rows, and a sample's TCP rows name at most ``MAX_TCP_PEERS`` peers. Parsed whole,
a file of fat samples took about 13 times its size (1 GiB of it: ~13 GiB of root's
controller)."""

from __future__ import annotations

import json
import subprocess
import sys

from faultlab.telemetry import remote

# the controller's reading, in a process of its own so that its peak RSS is its own
_MEASURE = """
import resource, sys
from faultlab.telemetry import remote
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
df = remote.host_rows(sys.argv[1], ["n1"], {}, "r")
print(len(df), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def _sample(k: int, **extra) -> str:
    rec = {"ts": k, "mono": k, "hz": 100, "cpu": [k, 2 * k], "procs": {"1:1": [k, 0]}, "net": None, **extra}
    return json.dumps(rec, separators=(",", ":")) + "\n"


def test_a_nodes_fat_host_samples_are_read_a_line_at_a_time(tmp_path):
    (tmp_path / "n1").mkdir()
    fat = {f"{i}:{i}": [i, i] for i in range(20000)}  # ~0.4 MB a line, under collect.MAX_LINE_BYTES
    size = 0
    with open(tmp_path / "n1" / "host-n1.jsonl", "w") as f:
        k = 0
        while size < 24 << 20:
            size += f.write(_sample(k, procs=fat))
            k += 1
    cp = subprocess.run([sys.executable, "-P", "-c", _MEASURE, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    rows, grew = map(int, cp.stdout.split())
    assert rows >= 2 * (k - 1)  # every sample still made its rows
    assert grew < size // 2, f"reading {size >> 20} MiB of samples grew the controller by {grew >> 20} MiB"


def test_a_node_sends_no_more_samples_than_its_run_is_long(tmp_path):
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "host-n1.jsonl").write_text("".join(_sample(k) for k in range(500)))
    skipped: dict[str, int] = {}
    df = remote.host_rows(tmp_path, ["n1"], {}, "r", max_samples=100, skipped=skipped)
    assert df.ts.nunique() == 99  # the first 100 samples: rows from the second on
    assert skipped == {"n1": 100}
    assert remote.max_samples(1000.0, now=1100.0) == 160  # 100 s at one a second, and a minute's slack
    df = remote.host_rows(tmp_path, ["n1"], {}, "r", max_samples=1000, skipped=(within := {}))
    assert df.ts.nunique() == 499 and within == {}


def test_a_samples_tcp_rows_name_few_peers_known_nodes_first(tmp_path):
    (tmp_path / "n1").mkdir()
    conns = [f"ESTAB 0 0 10.0.0.1:29500 10.9.{i // 250}.{i % 250}:40000 ino:{1000 + i} sk:1 <->\n"
             "\t cubic rtt:1.5/0.75 cwnd:10 bytes_acked:1 bytes_received:1" for i in range(300)]
    ss = "\n".join(conns) + "\n"
    ino = list(range(1000, 1300))
    (tmp_path / "n1" / "host-n1.jsonl").write_text("".join(_sample(k, ss=ss, ino=ino) for k in range(3)))
    df = remote.host_rows(tmp_path, ["n1"], {"10.9.1.7": "n7"}, "r")
    peers = {m.split(":", 1)[1] for m in df.metric if m.startswith("tcp_conns:")}
    assert len(peers) == remote.MAX_TCP_PEERS and "n7" in peers
