"""Trusted folders on another node (ssh, docker): :mod:`faultlab.safefs`'s checks run
there, through descriptors held there, by a standard-library script the node's own
``python3 -I -S`` runs (the node's ranks and host sampler use that Python too).

:func:`read_on_node` reads a file whose whole path is trusted; :func:`write_on_node_argv`
is the argv that replaces a file in a trusted folder. Nothing is read, written,
chmodded or renamed through a path: each check is of the object opened, so a name
swapped for a link between a check and its use is never the one used.
"""

from __future__ import annotations

import errno

from faultlab.safefs import MAX_READ_BYTES, UntrustedPath

# Run there as ``python3 -I -S -c REMOTE_READ_PY FILE LIMIT PRIV UID...`` (standard library
# only; the node's own python3, which its ranks and host sampler use too). argv: the
# file, the most bytes read, PRIV (1: the file's folder must be 0700-or-stricter), and
# trusted uids besides 0 and the node's own effective uid. Opens the path from / one
# component at a time relative to the parent's descriptor, folders with
# O_DIRECTORY|O_NOFOLLOW and the file with O_NOFOLLOW|O_NONBLOCK (a FIFO never blocks),
# and checks each *opened* object with fstat: owned by a trusted uid, not group/other-
# writable (a root-owned sticky folder such as /tmp is allowed except as the file's own
# folder); the file regular, with one link, at most LIMIT bytes. Then reads that same
# descriptor, at most LIMIT bytes, and prints it. A name swapped for a link or another
# file between the checks and the read is never what is read: the checks are of what
# was opened. Exit 4: a component is missing; 3: untrusted (the reason on stderr).
REMOTE_READ_PY = r"""
import os, stat, sys
f, limit, priv = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
uids = {0, os.geteuid(), *map(int, sys.argv[4:])}
def bad(msg):
    sys.stderr.write(msg + "\n")
    sys.exit(3)
if not f.startswith("/"):
    bad(f"{f}: not an absolute path")
parts = [c for c in f.split("/") if c]
if not parts or any(c in (".", "..") for c in parts):
    bad(f"{f}: has a . or .. component, or no file name")
fd, cur = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), ""
for i, c in enumerate(parts):
    cur += "/" + c
    last = i == len(parts) - 1
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK | os.O_NOCTTY if last else os.O_DIRECTORY)
    try:
        nfd = os.open(c, flags, dir_fd=fd)
    except OSError as e:
        try:
            link = stat.S_ISLNK(os.lstat(c, dir_fd=fd).st_mode)
        except OSError:
            link = False
        if link:
            bad(f"{cur}: is a symlink")
        if isinstance(e, (FileNotFoundError, NotADirectoryError)):
            sys.exit(4)
        bad(f"{cur}: cannot be opened ({e.strerror})")
    os.close(fd)
    fd = nfd
    st = os.fstat(fd)
    a = stat.S_IMODE(st.st_mode)
    if st.st_uid not in uids:
        bad(f"{cur}: is owned by uid {st.st_uid}, not a trusted user")
    if last:
        if not stat.S_ISREG(st.st_mode):
            bad(f"{cur}: is not a regular file")
        if a & 0o022:
            bad(f"{cur}: is writable by group or others (mode {a:o})")
        if st.st_nlink != 1:
            bad(f"{cur}: has {st.st_nlink} hard links, not one")
        if st.st_size > limit:
            bad(f"{cur}: is larger than {limit} bytes")
    elif a & 0o022:
        if not (st.st_uid == 0 and a & 0o1000 and i < len(parts) - 2):
            bad(f"{cur}: is writable by group or others (mode {a:o})")
    elif priv and i == len(parts) - 2 and a & 0o077:
        bad(f"{cur}: is readable by group or others (mode {a:o}); it must be 0700")
data = b""
while len(data) <= limit:
    b = os.read(fd, limit + 1 - len(data))
    if not b:
        break
    data += b
if len(data) > limit:
    bad(f"{cur}: is larger than {limit} bytes")
view = memoryview(data)
while view:
    view = view[os.write(1, view):]
"""


# $1 the file, $2 its text, $3... uids trusted besides root and us. The file's folder is
# opened from / one component at a time relative to its parent's descriptor (folders
# O_DIRECTORY|O_NOFOLLOW, each checked as REMOTE_READ_PY checks them, the last 0700);
# the text goes into a fresh O_EXCL|O_NOFOLLOW temporary there ("$1".tmp.<hex>), mode
# 0644 set on its descriptor, renamed over the name in that folder: nothing is opened,
# changed or renamed by a path another user can swap (their folder, a temporary they
# relink between its creation and its write). Exit 3 and one line when a check fails.
REMOTE_WRITE_PY = r"""
import os, stat, sys
f, text = sys.argv[1], sys.argv[2].encode()
uids = {0, os.geteuid(), *map(int, sys.argv[3:])}
def bad(msg):
    sys.stderr.write(msg + "\n")
    sys.exit(3)
parts = [c for c in f.split("/") if c]
if not f.startswith("/") or len(parts) < 2 or any(c in (".", "..") for c in parts):
    bad(f"{f}: not an absolute path of a file in a folder")
fd, cur = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), ""
for i, c in enumerate(parts[:-1]):
    cur += "/" + c
    try:
        nfd = os.open(c, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError as e:
        bad(f"{cur}: is a symlink or not a folder ({e.strerror})")
    os.close(fd)
    fd = nfd
    st = os.fstat(fd)
    a = stat.S_IMODE(st.st_mode)
    if st.st_uid not in uids:
        bad(f"{cur}: is owned by uid {st.st_uid}, not a trusted user")
    if a & 0o022 and not (st.st_uid == 0 and a & 0o1000 and i < len(parts) - 2):
        bad(f"{cur}: is writable by group or others (mode {a:o})")
if a & 0o077:
    bad(f"{cur}: is readable by group or others (mode {a:o}); it must be 0700")
name = parts[-1]
tmp = name + ".tmp." + os.urandom(6).hex()
t = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
try:
    os.fchmod(t, 0o644)
    view = memoryview(text)
    while view:
        view = view[os.write(t, view):]
    os.close(t)
    os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
except BaseException:
    os.unlink(tmp, dir_fd=fd)
    raise
"""


def write_on_node_argv(path: str, text: str, *, uids=()) -> list[str]:
    """The argv that writes ``text`` into ``path`` on a node (any backend; see
    REMOTE_WRITE_PY), run there as its acting user: the file's folder trusted as
    :func:`read_on_node` trusts it (owned by root, the acting user or one of ``uids``,
    no symlink, 0700), the file replaced by a fresh one of mode 0644, never written,
    chmodded or renamed through a path. Exit 3 and one line on stderr when a check
    fails. For a folder another user owns on a node where faultlab cannot run as that
    user."""
    return ["python3", "-I", "-S", "-c", REMOTE_WRITE_PY, str(path), text, *[str(int(u)) for u in uids]]


def read_on_node(node, path: str, *, uids=(), private: bool = True) -> str:
    """The text of ``path`` on ``node`` (any backend: the checks run there, on the
    descriptors that are read; see REMOTE_READ_PY) when the whole path is trusted:
    owned by root, the node's acting user or one of ``uids``, no symlink, no
    group/other-writable folder (but a root sticky one above the file's own), the
    file's folder 0700 when ``private``, the file regular, one link, at most
    MAX_READ_BYTES.

    The node's output is bounded too (``Node.run(limit=)``). Raises FileNotFoundError
    when something on the path is missing, UntrustedPath (one line) when a check fails."""
    argv = ["python3", "-I", "-S", "-c", REMOTE_READ_PY, str(path), str(MAX_READ_BYTES), "1" if private else "0", *[str(int(u)) for u in uids]]
    cp = node.run(argv, timeout=getattr(node, "command_timeout_s", 30), limit=MAX_READ_BYTES)
    if cp.returncode == 4:
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
    if cp.returncode != 0:
        why = (cp.stderr or "").strip().splitlines() or [f"sent more than {MAX_READ_BYTES} bytes, or was killed (exit {cp.returncode})"]
        raise UntrustedPath(str(path), f"on node {getattr(node, 'name', '?')}: {why[-1]}",
                            "remove it; faultlab reads only files in its own private folders, never through links")
    return cp.stdout
