"""Writable cpu and blkio cgroups in a host-like node, made from the host.

docker mounts a container's cgroup hierarchies read-only. A host-like node (the ssh
backend's stand-in for a host, faultlab.nodes.docker_testbed) needs its cgroup v1
``cpu`` and ``blkio`` hierarchies writable so that its root can make a fault's cgroup
(cpu-contention, io-slow), as root on a host does. Remounting them from inside would
need CAP_SYS_ADMIN in the container, and with it the container's root, which is uid 0
on the host (faultlab's dockerd has no user-namespace remap), could remount anything
else as well: the read-only binds of the controller's Python and faultlab's source,
``/proc/sys`` (``core_pattern``), ``/sys``, or mount a cgroup hierarchy and its
``release_agent``. So the container never holds CAP_SYS_ADMIN, and the host changes
those two mounts' read-only flag instead, once, when the node starts: a child of the
host's own Python (``python -I -S``, nothing run from the container's files) enters the
container's mount namespace (``setns``) and remounts each one (``MS_REMOUNT|MS_BIND``,
``nosuid,nodev,noexec`` kept), after checking through an ``O_PATH|O_NOFOLLOW``
descriptor that the folder is a cgroup v1 mount holding that controller's files.

With a private cgroup namespace the mount's root is the container's own cgroup, so its
root can make and fill cgroups below it and write its own cgroup's cpu and blkio files
(docker sets no limits there on a testbed node), never a cgroup outside the container
and never a hierarchy's ``release_agent`` (only the hierarchy's root has one). On a
host with cgroup v2 only there is no such mount: nothing is remounted and cpu and io
faults are refused on the node by their probe (``faultlab doctor`` says why).
"""

from __future__ import annotations

import os
import subprocess
import sys

from faultlab.errors import NodeError

#: the v1 hierarchies a host-like node's root may write, and a file that only that
#: controller's hierarchy holds (checked before the remount)
HIERARCHIES = {"cpu": "cpu.cfs_quota_us", "blkio": "blkio.reset_stats"}

#: run as ``python -I -S -c REMOUNT_PY NSFD NAME FILE [NAME FILE ...]``; prints the names
#: remounted, exits 1 with one line on stderr when a call fails
REMOUNT_PY = r"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CGROUP_SUPER_MAGIC = 0x20000, 0x27E0EB
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 2, 4, 8, 32, 4096

def fail(what):
    sys.stderr.write(f"{what}: {os.strerror(ctypes.get_errno())}\n")
    sys.exit(1)

if libc.setns(int(sys.argv[1]), CLONE_NEWNS) != 0:
    fail("setns")
done, args = [], sys.argv[2:]
for name, marker in zip(args[::2], args[1::2]):
    try:
        fd = os.open("/sys/fs/cgroup/" + name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY)
    except FileNotFoundError:
        continue
    buf = ctypes.create_string_buffer(256)
    if libc.fstatfs(fd, buf) != 0:
        fail("fstatfs " + name)
    if struct.unpack_from("l", buf)[0] != CGROUP_SUPER_MAGIC:
        continue  # not a cgroup v1 mount (a plain folder, cgroup2): nothing to remount
    try:
        os.stat(marker, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        continue
    os.fchdir(fd)
    if libc.mount(None, b".", None, ctypes.c_ulong(MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC), None) != 0:
        fail("remount " + name)
    done.append(name)
print(" ".join(done))
"""


def make_writable(ct, pid: int) -> list[str]:
    """Remount the cpu and blkio hierarchies of the running container ``ct`` (docker
    SDK object) read-write, ``pid`` being its PID 1 as the host sees it. Returns the
    names remounted (none on a cgroup v2 host). Raises NodeError when the container is
    gone or no longer has that PID, or a call fails (the line names it)."""
    try:
        nsfd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise NodeError(f"cannot reach the mount namespace of container {ct.name}: {e.strerror}", field="testbed") from None
    try:
        ct.reload()  # the namespace is the container's: it still runs with that PID 1
        if not ct.attrs["State"].get("Running") or int(ct.attrs["State"]["Pid"]) != pid:
            raise NodeError(f"container {ct.name} stopped while it was set up", field="testbed", fix="run `faultlab testbed up` again")
        args = [x for name, marker in HIERARCHIES.items() for x in (name, marker)]
        cp = subprocess.run([sys.executable, "-I", "-S", "-c", REMOUNT_PY, str(nsfd), *args], pass_fds=(nsfd,),
                            capture_output=True, text=True, timeout=30)
    finally:
        os.close(nsfd)
    if cp.returncode != 0:
        why = (cp.stderr.strip().splitlines() or ["?"])[-1]
        raise NodeError(f"cannot make the cgroups of container {ct.name} writable ({why})", field="testbed")
    return cp.stdout.split()
