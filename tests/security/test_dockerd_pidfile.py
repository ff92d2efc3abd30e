"""faultlab's dockerd is found by its PID file (``/run/faultlab/dockerd/docker.pid``),
which dockerd leaves behind when it is killed (SIGKILL, the OOM killer). Any user may
then run a process under that PID (PIDs are reused) with dockerd's argv: it is never
taken for root's dockerd, so root's ``testbed down`` never signals it, and a failed
start never calls it "faultlab's dockerd".

Real: nobody's look-alike runs while root's code runs in the sandbox of
``tests.helpers.sandboxed_root_beside_records`` (a tmpfs over ``/run/faultlab``), whose
stale PID file names the look-alike.
"""

from __future__ import annotations

import json
import sys

from tests.helpers import needs_root, sandboxed_root_beside_records

pytestmark = needs_root

# as nobody: a process whose argv[0] ends in dockerd and names faultlab's socket; a
# stale PID file naming it; then root's dockerd.stop() and _our_pid(), and whether
# nobody's process still runs
_STALE_PIDFILE = r"""
set -e
setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import subprocess
subprocess.Popen(["/usr/bin/dockerd", "-c", "import time; time.sleep(300)", "-H", "unix:///run/faultlab/dockerd/docker.sock"],
                 executable="/usr/bin/python3", start_new_session=True)
'
sleep 1
pid=$(pgrep -u 65534 -f "unix:///run/faultlab/dockerd/docker.sock")
mkdir -p -m 0700 /run/faultlab/dockerd
echo "$pid" > /run/faultlab/dockerd/docker.pid
exec "$@" "$pid"
"""

_STOP = r"""
import json, os, sys
from faultlab.nodes import dockerd
pid = int(sys.argv[1])
found = dockerd._our_pid()
dockerd.stop(wait_s=2)
try:
    os.kill(pid, 0)
    alive = True
except ProcessLookupError:
    alive = False
print(json.dumps({"found": found, "alive": alive}))
"""


def test_another_users_process_under_a_stale_dockerd_pid_file_is_not_roots_dockerd():
    cp = sandboxed_root_beside_records(0, ["sh", "-c", _STALE_PIDFILE, "sh", sys.executable, "-c", _STOP], timeout=120)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    got = json.loads(cp.stdout.splitlines()[-1])
    assert got["found"] is None, got
    assert got["alive"], "root's dockerd.stop() signalled nobody's process"
