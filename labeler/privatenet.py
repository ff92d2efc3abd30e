"""A network namespace of the labeler's own, for the embedded Dask cluster.

The embedded cluster's scheduler and workers listen on ``127.0.0.1`` with mutual TLS,
which keeps another local user from running code there but not from connecting: Dask's
TLS listener waits for a handshake with no timeout, so a user holding a thousand idle
connections a port used up root's descriptors and held its labeling with no progress.
Root's cluster therefore starts in a fresh network namespace whose one interface is
its own loopback: nothing outside it reaches its ports. The namespace is entered by
the calling thread only (``unshare(CLONE_NEWNET)`` acts on a thread), for the block
that starts the cluster and its client: the threads and processes they start stay in
it, and the calling thread returns to its own namespace at the block's end.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct

#: ``unshare``/``setns`` flag of a network namespace (``<sched.h>``)
CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


@contextlib.contextmanager
def private_loopback():
    """Run the block in a fresh network namespace with its loopback up; yields True
    there, or False where none could be made (not root, or a kernel or container that
    refuses ``unshare``: the block then runs in the caller's namespace, as before).
    The calling thread is back in its own namespace afterwards; raises OSError if it
    cannot return (it then must not go on)."""
    if os.geteuid() != 0:
        yield False
        return
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            yield False
            return
        try:
            _loopback_up()
            yield True
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                e = ctypes.get_errno()
                raise OSError(e, f"could not return to this thread's network namespace: {os.strerror(e)}")
    finally:
        os.close(own)


def _loopback_up() -> None:
    """Set ``lo`` of the calling thread's network namespace up (a new one starts down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sh", fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sh", b"lo", 0)))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))
