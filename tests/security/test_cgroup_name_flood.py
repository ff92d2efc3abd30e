"""A container's root can make any number of cgroups named like faultlab's in its own
cgroup subtree (a host-like docker node's cpu hierarchy is writable on cgroup v1).
Root's host view must cost a bounded amount a cgroup: each subtree is scanned for a
container's processes once a view, and an orphan is matched against the faults that
have revert lines (and by its name), never against every other orphan. Both were
quadratic: beside 1,000 such cgroups root's ``status`` took 137 s.

Real: root's host view runs in a private mount namespace (``unshare``) with a tmpfs
over ``/sys/fs/cgroup`` holding 300 such cgroups, so no cgroup of the host is made.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO, needs_root

pytestmark = [needs_root, pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare (util-linux)")]

N = 300

_VIEW = r"""
import json, sys
from pathlib import Path
n = int(sys.argv[1])
top = Path("/sys/fs/cgroup/cpu/system.slice/docker-fl-test.scope")
top.mkdir(parents=True)
(top / "cgroup.procs").write_text("")
for i in range(n):
    d = top / f"faultlab-cpu-{i:06x}"
    d.mkdir()
    (d / "cgroup.procs").write_text("")
from faultlab.lifecycle import hostview
reads, claims = [0], [0]
real_read, real_claims = Path.read_text, hostview._claims
def read_text(self, *a, **k):
    reads[0] += self.name == "cgroup.procs"
    return real_read(self, *a, **k)
def counted_claims(v, o):
    claims[0] += 1
    return real_claims(v, o)
Path.read_text, hostview._claims = read_text, counted_claims
views, problems = hostview.host_view()
ours = [o for v in views for o in v.objects if o.kind == "cgroup" and "docker-fl-test.scope" in o.what]
print(json.dumps({"reads": reads[0], "claims": claims[0], "orphans": len(ours)}))
"""


def test_root_looks_at_many_cgroups_named_like_faultlabs_in_linear_time():
    cp = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                         'mount -t tmpfs fl-test /sys/fs/cgroup && exec "$@"', "sh", sys.executable, "-c", _VIEW, str(N)],
                        capture_output=True, text=True, timeout=600, cwd=REPO)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    assert got["orphans"] == N, got
    # each cgroup.procs of the subtree read once (it was once for every orphan: N * N)
    assert got["reads"] <= N + 1, got
    # an orphan is matched against the faults with revert lines and by its name (it was
    # against every orphan made before it: N * N / 2)
    assert got["claims"] <= 20 * N, got
