"""Trusted folders: open a folder so nobody else can steer what faultlab reads or writes.

faultlab runs as root and reads back state it wrote earlier (testbed state, leases,
deadlines, agent commands and status, PID files). Whoever can write a folder on the
way to such a file, or plant a symlink in it, can make root act on their content or
write through their link. This module is the one place that opens such folders:

* the folder is opened component by component from ``/`` with
  ``O_DIRECTORY | O_NOFOLLOW`` relative to the parent's descriptor (``openat``), so a
  symlink anywhere on the path is refused and a folder swapped after the check is
  never the one used;
* every component must be owned by root or by the acting user (``os.geteuid()``), and
  not writable by group or others; a root-owned *sticky* folder (``/tmp``) is allowed
  as a parent only (others can create names in it but not rename or remove ours);
* files are then opened relative to that descriptor with ``O_NOFOLLOW`` (a symlink at
  the last component is refused as well), must be regular files of an allowed owner, not
  group/other-writable, and small; writes are atomic (a new temporary file created with
  ``O_EXCL``, fsync, rename, fsync of the folder).

Standard library only (``faultlab.benchmarks.agent`` imports it inside training
processes). Every failure is an ``UntrustedPath`` (a ``FaultlabError``): one line
naming the path, what is wrong and the fix.

Usage::

    with open_dir("/run/faultlab/leases", create=True) as d:
        d.write_atomic("flt-1a2b3c.json", b"{...}")
        data = d.read_bytes("flt-1a2b3c.json")
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import secrets
import stat
from pathlib import Path

from faultlab.errors import FaultlabError

#: the largest file read back (bytes): state and command files are small
MAX_READ_BYTES = 1 << 20

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: renameat2(2) flag: swap the two names at once
_RENAME_EXCHANGE = 2


def open_file(name: str, dir_fd: int | None = None) -> int:
    """A read descriptor of ``name`` in folder ``dir_fd`` (None: the working folder's,
    ``O_NOFOLLOW``), opened for
    reading only once ``O_PATH`` showed it a regular file: opening a FIFO wakes the
    writer waiting on it, and opening a device node acts on the device (a hard link of
    one in another user's folder, where ``fs.protected_hardlinks`` is 0). Anything else
    gets its ``O_PATH`` descriptor back, which the caller's ``fstat`` refuses and which
    reads nothing. Raises OSError as ``open`` does (ELOOP for a symlink)."""
    pfd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        mode = os.fstat(pfd).st_mode
        if stat.S_ISLNK(mode):  # O_PATH|O_NOFOLLOW opens the link itself
            raise OSError(errno.ELOOP, "is a symlink", name)
        if not stat.S_ISREG(mode):
            fd, pfd = pfd, -1
            return fd
        return os.open(f"/proc/self/fd/{pfd}", _FILE_FLAGS & ~os.O_NOFOLLOW)  # the same inode, no path looked up again
    finally:
        if pfd >= 0:
            os.close(pfd)


class UntrustedPath(FaultlabError, PermissionError):
    """A folder or file faultlab would trust is owned by someone else, writable by
    others, a symlink, or not what it should be. ``path`` names it. Also a
    PermissionError, so code that handles OSError (the agent, a workload) refuses too."""

    def __init__(self, path: str, message: str, fix: str):
        self.path = path
        self.reason = f"{path}: {message}"  # what is wrong, without the fix
        super().__init__(self.reason, fix=fix)


class TooLarge(UntrustedPath):
    """A file larger than faultlab reads of it (``path`` names it): skipped, not read."""


class NotAFolder(UntrustedPath):
    """A component of a folder's path is a file, not a folder (and not a link)."""


def allowed_uids() -> frozenset[int]:
    """Owners faultlab trusts: root and the acting (effective) user."""
    return frozenset({0, os.geteuid()})


def check_name(name: str) -> str:
    """``name`` when it is one plain path component (no ``/``, not ``.``/``..``, no NUL,
    not empty); else UntrustedPath. Guards names built from file content (an ``id``)."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UntrustedPath(repr(name), "is not a plain file name", "names must be one path component")
    return name


#: a name read from a file someone else wrote (a run id) that faultlab joins to a path
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")


def is_plain_name(v) -> bool:
    """Whether ``v`` is a string of ``[A-Za-z0-9._-]``, not ``.`` or ``..``: one path
    component that is safe to join to a folder's path."""
    return isinstance(v, str) and bool(_PLAIN_NAME.fullmatch(v)) and v not in (".", "..")


def parse_json(data: bytes | str, what: str):
    """``json.loads(data)``, where a value nested too deeply for the parser
    (RecursionError) or too large to hold (MemoryError) is a ValueError naming ``what``
    (a file, a line), as bad JSON is: input someone else wrote never ends in a traceback."""
    try:
        return json.loads(data)
    except (RecursionError, MemoryError) as e:
        raise ValueError(f"{what}: JSON nested too deeply or too large to read ({type(e).__name__})") from None


def _owner_ok(st: os.stat_result, uids: frozenset[int]) -> bool:
    return st.st_uid in uids


def _owners_text(uids: frozenset[int]) -> str:
    """The trusted owners as a person reads them: ``root or uid 1000``."""
    return " or ".join("root" if u == 0 else f"uid {u}" for u in sorted(uids))


def _check_dir_stat(path: str, st: os.stat_result, uids: frozenset[int], *, last: bool, private: bool) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedPath(path, "is not a folder", "remove it; faultlab creates its own folders")
    if not _owner_ok(st, uids):
        raise UntrustedPath(path, f"is owned by uid {st.st_uid}, not {_owners_text(uids)}",
                            f"remove it or `chown {os.geteuid()} {path}`; faultlab trusts only its own user's folders")
    writable = st.st_mode & 0o022
    sticky_root = st.st_uid == 0 and st.st_mode & stat.S_ISVTX
    if writable and (last or not sticky_root):
        raise UntrustedPath(path, f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})",
                            f"`chmod go-w {path}`, or use a private folder")
    if last and private and stat.S_IMODE(st.st_mode) & 0o077:
        raise UntrustedPath(path, f"is readable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); it must be 0700",
                            f"`chmod 700 {path}`")


def _components(path: str) -> list[str]:
    absolute = os.path.abspath(os.fspath(path))  # lexical only: symlinks are not resolved
    return [c for c in absolute.split("/") if c]


class _DirFd:
    """A folder held open by its descriptor (``fd``) and named ``path``. A context
    manager: closing releases the descriptor."""

    def __init__(self, fd: int, path: str):
        self.fd = fd
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self):  # pragma: no cover - a forgotten close
        try:
            self.close()
        except Exception:
            pass


class TrustedDir(_DirFd):
    """A folder opened and checked by ``open_dir``; file operations are relative to its
    descriptor (``fd``). A context manager: closing releases the descriptor."""

    def __init__(self, fd: int, path: str, uids: frozenset[int]):
        super().__init__(fd, path)
        self.uids = uids

    def _p(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"

    # -- reading ---------------------------------------------------------------------
    def listdir(self) -> list[str]:
        """Names in the folder (sorted)."""
        fd = os.dup(self.fd)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def lstat(self, name: str) -> os.stat_result | None:
        """``lstat`` of ``name`` in the folder (a symlink is not followed), or None."""
        try:
            return os.stat(check_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def exists(self, name: str) -> bool:
        return self.lstat(name) is not None

    def check_file(self, name: str) -> os.stat_result:
        """The stat of ``name`` when it is a trusted regular file (not a symlink, owned
        by root or us, not group/other-writable), else UntrustedPath."""
        st = self.lstat(name)
        if st is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", self._p(name))
        self._check_file_stat(name, st)
        return st

    def _check_file_stat(self, name: str, st: os.stat_result) -> None:
        p = self._p(name)
        if stat.S_ISLNK(st.st_mode):
            raise UntrustedPath(p, "is a symlink", f"remove it (`rm {p}`); faultlab never follows links in its folders")
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedPath(p, "is not a regular file", f"remove it (`rm {p}`)")
        if st.st_uid not in self.uids:
            raise UntrustedPath(p, f"is owned by uid {st.st_uid}, not {_owners_text(self.uids)}",
                                f"remove it (`rm {p}`); faultlab acts only on files its own user wrote")
        if st.st_mode & 0o022:
            raise UntrustedPath(p, f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})",
                                f"remove it (`rm {p}`)")
        # a folder trusted for another user too (root reading theirs): each file in it is
        # its owner's, as faultlab writes them. Where fs.protected_hardlinks is 0 that user
        # may link any file they can see into it, a lease record of root's included, which
        # then kept root's owner (and read as root's) after root removed its own name
        if self.uids - allowed_uids():
            owner = os.fstat(self.fd).st_uid
            if st.st_uid != owner:
                raise UntrustedPath(p, f"is owned by uid {st.st_uid}, not by its folder's owner (uid {owner})",
                                    f"remove it (`rm {p}`)")

    def read_bytes(self, name: str, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """The content of the trusted regular file ``name``. Raises FileNotFoundError
        when absent, UntrustedPath when a symlink, foreign, other-writable or larger
        than ``max_bytes``."""
        try:
            fd = open_file(check_name(name), self.fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                p = self._p(name)
                raise UntrustedPath(p, "is a symlink", f"remove it (`rm {p}`); faultlab never follows links in its folders") from None
            raise
        try:
            st = os.fstat(fd)
            self._check_file_stat(name, st)
            if st.st_size > max_bytes:
                raise UntrustedPath(self._p(name), f"is {st.st_size} bytes, more than {max_bytes}", "remove it")
            chunks, left = [], max_bytes + 1
            while left > 0:
                b = os.read(fd, min(left, 65536))
                if not b:
                    break
                chunks.append(b)
                left -= len(b)
            data = b"".join(chunks)
            if len(data) > max_bytes:
                raise UntrustedPath(self._p(name), f"is more than {max_bytes} bytes", "remove it")
            return data
        finally:
            os.close(fd)

    def read_text(self, name: str, max_bytes: int = MAX_READ_BYTES) -> str:
        return self.read_bytes(name, max_bytes).decode("utf-8", errors="replace")

    def read_json(self, name: str, max_bytes: int = MAX_READ_BYTES):
        """The parsed JSON of ``name`` (any JSON value: validate it before use). Raises
        FileNotFoundError, UntrustedPath, or ValueError for bad or too deeply nested JSON."""
        return parse_json(self.read_bytes(name, max_bytes), self._p(name))

    # -- writing ---------------------------------------------------------------------
    def stage(self, name: str, data: bytes | str, mode: int = 0o644, *, durable: bool = True, tag: str = "") -> str:
        """A fresh ``O_EXCL`` temporary in this folder holding ``data`` (fsynced unless
        ``durable`` is False), named for ``name`` (``.NAME.<tag><12 hex>.tmp``: ``tag``
        names its maker, faultlab.workdirs.tag); the caller renames it over ``name`` or
        unlinks it. Raises OSError with nothing left."""
        if isinstance(data, str):
            data = data.encode()
        tmp = f".{check_name(name)}.{tag}{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode & 0o755, dir_fd=self.fd)
        try:
            try:
                os.fchmod(fd, mode & 0o755)  # umask-independent
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=self.fd)
            except OSError:
                pass
            raise
        return tmp

    def write_atomic(self, name: str, data: bytes | str, mode: int = 0o600, *, durable: bool = True) -> None:
        """Replace ``name`` with ``data`` atomically: a fresh temporary file (``O_EXCL |
        O_NOFOLLOW``, never an existing file or link) is written, fsynced, renamed over
        ``name`` and the folder fsynced (``durable=False`` skips both fsyncs, for
        frequent heartbeats). Raises OSError (e.g. ENOSPC) with the temporary removed."""
        tmp = self.stage(name, data, mode, durable=durable)
        try:
            os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=self.fd)
            except OSError:
                pass
            raise
        if durable:
            os.fsync(self.fd)

    def write_json(self, name: str, obj, mode: int = 0o600, *, durable: bool = True) -> None:
        self.write_atomic(name, json.dumps(obj, sort_keys=True), mode, durable=durable)

    def unlink(self, name: str, missing_ok: bool = True) -> bool:
        """Remove ``name`` (a symlink itself, never its target). True when removed."""
        try:
            os.unlink(check_name(name), dir_fd=self.fd)
            return True
        except FileNotFoundError:
            if missing_ok:
                return False
            raise

    def unlink_temporaries(self, name: str) -> list[str]:
        """Remove the temporaries :meth:`write_atomic` made for ``name``
        (``.NAME.<12 hex>.tmp``, regular files only) that a writer killed between
        writing and renaming left behind. Returns the names removed. Call it only
        when no writer of ``name`` can still be running (its lease released, its
        watchdog done): a live writer's rename would then fail."""
        gone = []
        for n in self.listdir():
            if not _is_temporary_of(n, check_name(name)):
                continue
            st = self.lstat(n)
            if st is not None and stat.S_ISREG(st.st_mode) and self.unlink(n):
                gone.append(n)
        return gone

    def rename(self, src: str, dst: str) -> None:
        os.rename(check_name(src), check_name(dst), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def exchange(self, a: str, b: str) -> None:
        """Swap the names ``a`` and ``b`` in the folder in one step
        (``renameat2(RENAME_EXCHANGE)``): at no moment is either name missing. Raises
        OSError (errno EINVAL, ENOSYS or EOPNOTSUPP where the kernel or file system
        cannot, ENOENT when either is missing)."""
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "renameat2"):
            raise OSError(errno.ENOSYS, "renameat2 is not in this C library", self._p(a))
        if libc.renameat2(self.fd, os.fsencode(check_name(a)), self.fd, os.fsencode(check_name(b)), _RENAME_EXCHANGE) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), self._p(a))

    def subdir(self, name: str, *, create: bool = False, mode: int = 0o700, private: bool = False) -> "TrustedDir":
        """A checked child folder ``name`` (created with ``mode`` when ``create``)."""
        fd = _open_child(self.fd, check_name(name), self._p(name), self.uids, last=True, private=private,
                         create=create, mode=mode)
        return TrustedDir(fd, self._p(name), self.uids)

    def foreign_subdir(self, name: str) -> "ForeignDir":
        """Child folder ``name`` that someone faultlab does not trust writes (a
        container's root, in a folder mounted into the container): opened with
        ``O_DIRECTORY|O_NOFOLLOW`` relative to this folder, whoever owns it. Raises
        FileNotFoundError, or UntrustedPath when it is a symlink or no folder."""
        fd = _open_child(self.fd, check_name(name), self._p(name), None, last=True, private=False, create=False, mode=0)
        return ForeignDir(fd, self._p(name))

    def remove_tree(self, name: str) -> None:
        """Remove the folder ``name`` and all in it, every folder opened relative to
        its parent's descriptor with ``O_NOFOLLOW`` (a link is removed, never followed;
        one at ``name`` itself is refused: UntrustedPath). Missing is fine; a tree
        deeper than 64 folders is refused (UntrustedPath)."""
        try:
            fd = _open_child(self.fd, check_name(name), self._p(name), None, last=True, private=False, create=False, mode=0)
        except FileNotFoundError:
            return
        try:
            _remove_contents(fd, self._p(name), 0)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=self.fd)

    def append(self, name: str, data: bytes | str, mode: int = 0o644) -> None:
        """Append ``data`` to the regular file ``name`` (made with ``mode`` when
        missing) and fsync it, opened relative to the folder with ``O_NOFOLLOW``: a link
        or a non-regular file at ``name`` is refused (UntrustedPath), never written
        through."""
        p = self._p(name)
        if isinstance(data, str):
            data = data.encode()
        try:
            fd = os.open(check_name(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         mode, dir_fd=self.fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENXIO):
                raise UntrustedPath(p, "is a symlink or not a regular file", f"remove it (`rm {p}`)") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise UntrustedPath(p, "is not a regular file of one name", f"remove it (`rm {p}`)")
            if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
                os.fchmod(fd, mode)  # umask-independent
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)


class ForeignDir(_DirFd):
    """A folder written by someone faultlab does not trust (see
    :meth:`TrustedDir.foreign_subdir`): only regular files are listed and read, each
    opened relative to the folder's descriptor with ``O_NOFOLLOW``, never a link, and
    never more than the caller's bounds. A context manager."""

    def regular_files(self, limit: int) -> list[str]:
        """Names of the regular files in the folder (``lstat``: links, folders, FIFOs
        and devices are left out), sorted. Every entry the folder lists counts toward
        ``limit``, whatever it is: a folder of more than ``limit`` entries is refused
        after reading ``limit + 1`` of them (TooLarge, one line naming the folder), so
        a folder of countless names, links or FIFOs costs no more than that."""
        out, seen = [], 0
        with os.scandir(self.fd) as it:
            for e in it:
                seen += 1
                if seen > limit:
                    raise TooLarge(self.path, f"holds more than {limit} entries", "it is not listed; remove what its writer left there")
                try:
                    if e.is_file(follow_symlinks=False):
                        out.append(e.name)
                except OSError:
                    continue
        return sorted(out)

    def read_from(self, name: str, offset: int, max_bytes: int, max_size: int) -> bytes:
        """At most ``max_bytes`` of the regular file ``name`` from ``offset`` on.
        Raises UntrustedPath (one line naming the file) when it is a link or not a
        regular file, TooLarge when it is larger than ``max_size`` bytes,
        FileNotFoundError when gone."""
        p = f"{self.path.rstrip('/')}/{name}"
        try:
            fd = open_file(check_name(name), self.fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UntrustedPath(p, "is a symlink", "faultlab copies only regular files, never through links") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UntrustedPath(p, "is not a regular file", "faultlab copies only regular files")
            if st.st_size > max_size:
                raise TooLarge(p, f"is {st.st_size} bytes, more than the {max_size} faultlab copies of a file",
                               "it is skipped; keep the run shorter or its records smaller")
            chunks, left, pos = [], max(0, min(max_bytes, max_size - offset)), offset
            while left > 0:
                b = os.pread(fd, min(left, 1 << 20), pos)
                if not b:
                    break
                chunks.append(b)
                left -= len(b)
                pos += len(b)
            return b"".join(chunks)
        finally:
            os.close(fd)


def _remove_contents(fd: int, path: str, depth: int) -> None:
    if depth > 64:
        raise UntrustedPath(path, "is nested more than 64 folders deep", f"remove it by hand (`rm -r {path}`)")
    for e in list(os.scandir(fd)):
        if e.is_dir(follow_symlinks=False):
            child = _open_child(fd, e.name, f"{path}/{e.name}", None, last=True, private=False, create=False, mode=0)
            try:
                _remove_contents(child, f"{path}/{e.name}", depth + 1)
            finally:
                os.close(child)
            os.rmdir(e.name, dir_fd=fd)
        else:
            os.unlink(e.name, dir_fd=fd)


def _is_temporary_of(entry: str, name: str) -> bool:
    """Whether ``entry`` is a temporary :meth:`TrustedDir.write_atomic` writes for
    ``name``: ``.NAME.`` then 12 hex digits then ``.tmp``."""
    prefix = f".{name}."
    if not (entry.startswith(prefix) and entry.endswith(".tmp")):
        return False
    token = entry[len(prefix):-len(".tmp")]
    return len(token) == 12 and all(c in "0123456789abcdef" for c in token)


def _open_child(parent_fd: int, name: str, path: str, uids: frozenset[int] | None, *, last: bool, private: bool,
                create: bool, mode: int) -> int:
    """The descriptor of folder ``name`` in ``parent_fd`` (``O_NOFOLLOW``), checked
    with :func:`_check_dir_stat` unless ``uids`` is None (any owner, any mode)."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, mode if last else 0o755, dir_fd=parent_fd)
        except FileExistsError:
            pass
        fd = _open_child(parent_fd, name, path, uids, last=last, private=private, create=False, mode=mode)
        if last:  # ours, just made: set the mode exactly (umask-independent)
            st = os.fstat(fd)
            if st.st_uid == os.geteuid():
                os.fchmod(fd, mode)
        return fd
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                link = stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
            except OSError:
                link = True
            if not link:
                raise NotAFolder(path, "is not a folder", f"give a folder path, or remove it (`rm {path}`)") from None
            raise UntrustedPath(path, "is a symlink or not a folder",
                                f"remove it (`rm {path}`); faultlab never follows links to its folders") from None
        raise
    if uids is None:
        return fd
    try:
        _check_dir_stat(path, os.fstat(fd), uids, last=last, private=private)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_dir(path: str | os.PathLike, *, create: bool = False, mode: int = 0o700, private: bool = False,
             uids: frozenset[int] | None = None) -> TrustedDir:
    """Open ``path`` as a trusted folder (see the module docstring for the checks).

    ``create``: make missing components (the last with ``mode``, parents 0755) owned by
    the acting user. ``private``: the folder itself must be mode 0700-or-stricter.
    ``uids``: trusted owners (default root and the effective user).
    Raises UntrustedPath (one line: the path, what is wrong, the fix) or
    FileNotFoundError when a component is missing and ``create`` is False."""
    uids = allowed_uids() if uids is None else frozenset(uids)
    return TrustedDir(_walk(path, uids, create=create, mode=mode, private=private), "/" + "/".join(_components(path)), uids)


def _walk(path: str | os.PathLike, uids: frozenset[int] | None, *, create: bool, mode: int, private: bool) -> int:
    """The descriptor of ``path`` opened from ``/`` one component at a time with
    ``O_DIRECTORY|O_NOFOLLOW``, each checked against ``uids`` (None: not checked)."""
    parts = _components(path)
    fd = os.open("/", _DIR_FLAGS)
    try:
        if uids is not None:
            _check_dir_stat("/", os.fstat(fd), uids, last=not parts, private=private and not parts)
        sofar = ""
        for i, name in enumerate(parts):
            sofar += "/" + name
            last = i == len(parts) - 1
            nfd = _open_child(fd, name, sofar, uids, last=last, private=private and last, create=create, mode=mode)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_dir_nofollow(path: str | os.PathLike, *, create: bool = False, mode: int = 0o755) -> TrustedDir:
    """Open ``path`` from ``/`` one component at a time with ``O_DIRECTORY|O_NOFOLLOW``,
    whoever owns its folders: for one write that the caller named the folder of (a
    report, a trace), made relative to the descriptor, so that no link anywhere on the
    path is followed and a folder renamed after the walk is never the one written.

    Owners and modes are not checked (use :func:`open_dir` for folders whose content
    is read back or written by path later); the returned folder's read methods still
    check files as :class:`TrustedDir` does. ``create``: make missing components
    (the last with ``mode``). Raises UntrustedPath naming a component that is a
    symlink or no folder, FileNotFoundError for a missing one."""
    return TrustedDir(_walk(path, None, create=create, mode=mode, private=False), "/" + "/".join(_components(path)), allowed_uids())


def write_file_nofollow(path: str | os.PathLike, data: bytes | str, mode: int = 0o644) -> None:
    """Write ``path`` atomically with no link followed: its folder opened with
    :func:`open_dir_nofollow`, a fresh ``O_EXCL`` temporary there, renamed over the
    name (a link at ``path`` is replaced, never written through). Raises
    UntrustedPath (a symlink on the path) or OSError."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    with open_dir_nofollow(folder) as d:
        d.write_atomic(check_name(name), data, mode)


def append_file_nofollow(path: str | os.PathLike, data: bytes | str, mode: int = 0o644) -> None:
    """Append ``data`` to ``path`` with no link followed on any component (its folder
    opened with :func:`open_dir_nofollow`; see :meth:`TrustedDir.append`)."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    with open_dir_nofollow(folder) as d:
        d.append(check_name(name), data, mode)


def open_below(root: str | os.PathLike, rel: str, max_size: int | None = None, root_fd: int | None = None):
    """A binary file object of the regular file ``root/rel``, opened with no link
    followed below ``root``: ``root`` is opened as the caller named it, then each
    component of ``rel`` relative to its parent's descriptor (folders with
    ``O_DIRECTORY|O_NOFOLLOW``, the file with ``O_NOFOLLOW|O_NONBLOCK``). For tables in
    a folder someone else may own (a dataset, a run folder): a link, FIFO or device
    there never makes faultlab read a file its owner could not.

    Raises UntrustedPath (one line naming the file) when a component is a link or the
    file is not a regular file, TooLarge when it is over ``max_size`` bytes,
    FileNotFoundError when a component is missing. ``root_fd``: a descriptor of the
    folder ``root`` named when it was opened, read below instead of ``root`` as named
    now (a reader that must read one folder throughout while it may be swapped)."""
    parts = [c for c in str(rel).split("/") if c]
    shown = f"{os.fspath(root).rstrip('/')}/{'/'.join(parts)}"
    fd = os.dup(root_fd) if root_fd is not None else os.open(os.fspath(root), _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            try:
                nfd = open_file(check_name(name), fd) if last else os.open(check_name(name), _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                what = "is a symlink" if last else f"has a symlink or a file where folder {'/'.join(parts[:i + 1])} belongs"
                raise UntrustedPath(shown, what, "restore the file faultlab wrote: it reads a dataset's or a run's tables "
                                    "only as regular files, never through links") from None
            os.close(fd)
            fd = nfd
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedPath(shown, "is not a regular file", "restore it as the regular file faultlab wrote")
        if max_size is not None and st.st_size > max_size:
            raise TooLarge(shown, f"is {st.st_size} bytes, more than the {max_size} faultlab reads of such a file",
                           "restore the file faultlab wrote, or rebuild the dataset")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return f


def read_below(root: str | os.PathLike, rel: str, max_size: int, root_fd: int | None = None) -> bytes:
    """The bytes of the regular file ``root/rel``, opened by :func:`open_below` (no link
    below ``root``, a regular file of at most ``max_size`` bytes) and read to at most
    that: a file another user owns (a run's ``meta.json``, a dataset's card or
    manifest) costs no more than ``max_size`` whatever it is. Raises what
    :func:`open_below` raises, and TooLarge when the file grew past ``max_size``
    while read."""
    with open_below(root, rel, max_size, root_fd) as f:
        data = f.read(max_size + 1)
    if len(data) > max_size:
        shown = f"{os.fspath(root).rstrip('/')}/{rel}"
        raise TooLarge(shown, f"grew past {max_size} bytes while read", "restore the file faultlab wrote")
    return data


def check_dir(path: str | os.PathLike, *, private: bool = False) -> None:
    """Raise UntrustedPath unless ``path`` is a trusted folder (nothing is created)."""
    open_dir(path, private=private).close()


def working_folder_problem() -> str | None:
    """Why the process's working folder is not a trusted folder (one line: the path and
    what is wrong), or None when it is: its path passes :func:`check_dir` and still names
    the folder the process stands in. Some libraries read a configuration file from the
    working folder (numba's ``.numba_config.yaml``, whose ``cache_dir`` names where it
    loads pickles from): they are imported only from a trusted one."""
    try:
        here = os.stat(".")
        path = os.getcwd()
        with open_dir(path) as d:
            st = os.fstat(d.fd)
    except UntrustedPath as e:
        return e.reason
    except OSError as e:
        return f"the working folder cannot be checked ({e.strerror or e})"
    if (st.st_dev, st.st_ino) != (here.st_dev, here.st_ino):
        return f"{path}: is not the folder the process stands in"
    return None


def private_runtime_base() -> str:
    """A per-user private base folder for non-root runs: ``$XDG_RUNTIME_DIR`` when it
    is set (systemd makes it 0700 and ours), else ``~/.cache`` (never a predictable
    name under a shared ``/tmp``). Root uses ``/run``."""
    if os.geteuid() == 0:
        return "/run"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg):
        return xdg
    return os.path.join(os.path.expanduser("~"), ".cache")


def runtime_dir(env_var: str, name: str) -> Path:
    """A faultlab folder on this host: ``$ENV_VAR`` when set, else ``/run/faultlab/NAME``
    as root, else ``$XDG_RUNTIME_DIR/faultlab/NAME`` (or ``~/.cache/faultlab/NAME``;
    never a predictable name under a shared /tmp: ``private_runtime_base``). Lease
    folders and the agent's control folder."""
    env = os.environ.get(env_var)
    if env:
        return Path(env)
    return Path(private_runtime_base()) / "faultlab" / name
