"""A disk-backed data path for the rank worker: shards read from disk every step and
periodic checkpoints written to it, so that a slow disk (``io-slow``) slows the job
the way dataloader and checkpoint stalls do in production.

Layout: ``ROOT/<run_id>/rank<R>/shard-<i>.bin`` (the rank's batches, float32 rows of
inputs then targets) and ``ckpt.bin`` (the latest checkpoint). Everything is removed by
:meth:`DiskData.close`.

Ranks run as root, and ``ROOT`` defaults to a name under the shared ``/var/tmp``, so
the folders are opened through ``faultlab.safefs`` (``docs/security.md``): ``ROOT``
and every folder above it must be owned by root or the rank's user and not writable
by others (a root-owned sticky parent such as ``/var/tmp`` is allowed), no component
may be a symlink (``O_NOFOLLOW`` from ``/``); ``<run_id>`` and ``rank<R>`` are made
0700 by the rank; every file is opened relative to its folder's descriptor with
``O_NOFOLLOW``, and removal unlinks names in those descriptors (never follows a
link). A folder planted by another user (or a link) is refused: ``UntrustedPath``, one
line naming the path and the fix, before anything is written.

Reads go to the disk, not the page cache: after each read the shard's pages are
dropped (``posix_fadvise(POSIX_FADV_DONTNEED)``), so the next read of it is a real
block read, issued by the rank's own process (block-I/O throttling of its cgroup
applies). Checkpoints are written with ``O_DIRECT`` (page-aligned buffer, whole
blocks) and ``fsync``, again in the rank's process; where the file system refuses
``O_DIRECT`` (tmpfs), a buffered write + ``fsync``.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from faultlab import safefs

BLOCK = 4096
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class DiskData:
    """The rank's shards and checkpoint under ``root``.

    Args: root (folder, created 0755 when missing), run_id, rank; ``shards``: list of
    ``(x, y)`` float32 numpy arrays of equal shapes. Raises ``safefs.UntrustedPath``
    (also a PermissionError) when a folder on the way is not trusted (see the module
    docstring), OSError when the folder cannot be written."""

    def __init__(self, root: str | Path, run_id: str, rank: int, shards: list[tuple[np.ndarray, np.ndarray]]):
        self.run_root = Path(root) / safefs.check_name(str(run_id))
        self.dir = self.run_root / f"rank{int(rank)}"
        with safefs.open_dir(root, create=True, mode=0o755) as top:
            self._run = top.subdir(self.run_root.name, create=True, mode=0o700)
        try:
            self._dir = self._run.subdir(self.dir.name, create=True, mode=0o700, private=True)
        except BaseException:
            self._run.close()
            raise
        self.shapes = [(x.shape, y.shape) for x, y in shards]
        self.paths = []
        for i, (x, y) in enumerate(shards):
            name = f"shard-{i}.bin"
            fd = self._open(name, _WRITE)
            try:
                os.write(fd, np.ascontiguousarray(x, np.float32).tobytes())
                os.write(fd, np.ascontiguousarray(y, np.float32).tobytes())
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            self.paths.append(self.dir / name)
        self.bytes_read = 0
        self.bytes_written = 0

    def _open(self, name: str, flags: int) -> int:
        """``name`` in the rank's folder, opened relative to its descriptor (no link)."""
        return os.open(name, flags, 0o600, dir_fd=self._dir.fd)

    def read(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Shard ``i % n`` read from disk: ``(x, y)`` float32 arrays."""
        i %= len(self.paths)
        p = self.paths[i]
        fd = self._open(p.name, _READ)
        try:
            size = os.fstat(fd).st_size
            buf = bytearray(size)
            view, got = memoryview(buf), 0
            while got < size:
                n = os.readv(fd, [view[got:]])
                if n <= 0:
                    raise OSError(f"short read of {p}")
                got += n
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        self.bytes_read += size
        (xs, ys) = self.shapes[i]
        a = np.frombuffer(bytes(buf), dtype=np.float32)
        nx = int(np.prod(xs))
        return a[:nx].reshape(xs), a[nx:].reshape(ys)

    def checkpoint(self, blob: bytes) -> int:
        """Write ``blob`` as the checkpoint (O_DIRECT when the file system allows it,
        then fsync). Returns the bytes written (whole blocks)."""
        n = (len(blob) + BLOCK - 1) // BLOCK * BLOCK
        m = mmap.mmap(-1, n)  # page-aligned, as O_DIRECT needs
        try:
            m.write(blob)
            try:
                fd = self._open("ckpt.bin", _WRITE | getattr(os, "O_DIRECT", 0))
            except OSError:
                fd = self._open("ckpt.bin", _WRITE)
            try:
                try:
                    os.write(fd, m)
                except OSError:  # EINVAL: no O_DIRECT here
                    os.close(fd)
                    fd = self._open("ckpt.bin", _WRITE)
                    os.write(fd, m)
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            m.close()
        self.bytes_written += n
        return n

    def close(self) -> None:
        """Remove the rank's files and folder (and the run's, once empty): names
        unlinked in the folders' own descriptors. Safe to call twice."""
        if self._dir.fd < 0:
            return
        for name in self._dir.listdir():
            try:
                os.unlink(name, dir_fd=self._dir.fd)
            except OSError:  # (a folder: nothing of ours; left)
                pass
        self._dir.close()
        try:
            os.rmdir(self.dir.name, dir_fd=self._run.fd)
        except OSError:
            pass
        self._run.close()
        try:
            with safefs.open_dir(self.run_root.parent) as top:
                os.rmdir(self.run_root.name, dir_fd=top.fd)
        except OSError:  # another rank's folder is still there, or the root changed: left
            pass
