"""A disk-backed data path for the rank worker: shards read from disk every step and
periodic checkpoints written to it, so that a slow disk (``io-slow``) slows the job
the way dataloader and checkpoint stalls do in production.

Layout: ``ROOT/<run_id>/rank<R>/shard-<i>.bin`` (the rank's batches, float32 rows of
inputs then targets) and ``ckpt.bin`` (the latest checkpoint). Everything is removed by
:meth:`DiskData.close`.

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
import shutil
from pathlib import Path

import numpy as np

BLOCK = 4096


class DiskData:
    """The rank's shards and checkpoint under ``root``.

    Args: root (folder, created), run_id, rank; ``shards``: list of ``(x, y)`` float32
    numpy arrays of equal shapes. Raises OSError when the folder cannot be written."""

    def __init__(self, root: str | Path, run_id: str, rank: int, shards: list[tuple[np.ndarray, np.ndarray]]):
        self.run_root = Path(root) / str(run_id)
        self.dir = self.run_root / f"rank{rank}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.shapes = [(x.shape, y.shape) for x, y in shards]
        self.paths = []
        for i, (x, y) in enumerate(shards):
            p = self.dir / f"shard-{i}.bin"
            with open(p, "wb") as f:
                f.write(np.ascontiguousarray(x, np.float32).tobytes())
                f.write(np.ascontiguousarray(y, np.float32).tobytes())
                f.flush()
                os.fsync(f.fileno())
            self._drop(p)
            self.paths.append(p)
        self.bytes_read = 0
        self.bytes_written = 0

    @staticmethod
    def _drop(p: Path) -> None:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def read(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Shard ``i % n`` read from disk: ``(x, y)`` float32 arrays."""
        i %= len(self.paths)
        p = self.paths[i]
        fd = os.open(p, os.O_RDONLY)
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
        p = self.dir / "ckpt.bin"
        n = (len(blob) + BLOCK - 1) // BLOCK * BLOCK
        m = mmap.mmap(-1, n)  # page-aligned, as O_DIRECT needs
        try:
            m.write(blob)
            try:
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_DIRECT", 0), 0o600)
            except OSError:
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                try:
                    os.write(fd, m)
                except OSError:  # EINVAL: no O_DIRECT here
                    os.close(fd)
                    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.write(fd, m)
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            m.close()
        self.bytes_written += n
        return n

    def close(self) -> None:
        """Remove the rank's folder (and the run's, once empty)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        try:
            self.run_root.rmdir()
        except OSError:
            pass
