"""Telemetry from other hosts: brought back into the run directory continuously.

Ranks on docker and ssh nodes write their per-step JSONL on their node (see
``Node.workload_out``). A ``TelemetryCollector`` thread asks each such node every
``interval_s`` for the bytes of its telemetry files past what it already has
(``Node.telemetry_files`` / ``Node.read_telemetry``) and appends the *complete lines*
to the same file names in the run's ``telemetry/`` folder. A controller killed with
SIGKILL therefore leaves a run directory readable up to its last collection, which
the run directory's raw-JSONL reader already handles (and the rest stays on the
node). After the last collection of a run that ends, each node's copy is removed. Only plain file names
(``[A-Za-z0-9._-]``) are accepted from a node: a node cannot steer where we write.

What a node holds is written by someone faultlab does not trust (a container's root,
an ssh node's users): nodes hand back regular files only, never through a link
(``Node.read_telemetry``: a docker node reads its host folder through descriptors,
faultlab.safefs.ForeignDir), at most CHUNK_BYTES a pass; a file larger than
MAX_FILE_BYTES is never read: it is a counted skip (``skipped``, one line naming it).
The copies are appended relative to the descriptor of the run's ``telemetry/``
folder (opened with no link followed), as regular files of mode 0644.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from faultlab import safefs

_NAME = re.compile(r"[A-Za-z0-9._-]+")
#: the largest telemetry file copied back from a node (bytes): a rank's step records
#: of a day-long run are some hundred MB; a larger file is skipped, never read
MAX_FILE_BYTES = 1 << 30
#: the most bytes of one file read in one pass (the rest comes on the next passes)
CHUNK_BYTES = 64 << 20


class TelemetryCollector:
    """Collect ``run_id`` telemetry of ``nodes`` into ``local_dir``. ``start()``,
    ``stop()`` (a final collection), or ``collect_once()``. Errors of one node (its
    network cut, its container gone) are counted in ``errors`` and retried next time."""

    def __init__(self, nodes, run_id: str, local_dir: str | Path, interval_s: float = 0.5):
        self.nodes = [n for n in nodes if n.collects_telemetry]
        self.run_id = run_id
        self.local_dir = Path(local_dir)
        self.interval_s = interval_s
        self.offsets: dict[tuple[str, str], int] = {}
        self.errors: dict[str, str] = {}
        #: (node, file name) -> one line: files not copied (larger than MAX_FILE_BYTES)
        self.skipped: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def collect_once(self) -> int:
        """One pass over every node; returns the bytes appended."""
        total = 0
        if not self.nodes:
            return total
        with safefs.open_dir_nofollow(self.local_dir, create=True) as out:
            for node in self.nodes:
                try:
                    total += self._collect_node(node, out)
                    self.errors.pop(node.name, None)
                except Exception as e:  # a node that cannot be read now is retried
                    self.errors[node.name] = f"{type(e).__name__}: {e}"
        return total

    def _collect_node(self, node, out: safefs.TrustedDir) -> int:
        total = 0
        for name in node.telemetry_files(self.run_id):
            key = (node.name, name)
            if not _NAME.fullmatch(name) or key in self.skipped:
                continue
            off = self.offsets.get(key, 0)
            try:
                data = node.read_telemetry(self.run_id, name, off)
            except safefs.TooLarge as e:
                self.skipped[key] = f"node {node.name}: {e}"
                continue
            cut = data.rfind(b"\n") + 1
            if cut:
                out.append(name, data[:cut], 0o644)
                self.offsets[key] = off + cut
                total += cut
        return total

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.collect_once()

    def start(self) -> "TelemetryCollector":
        """Start the background thread (daemon, ``faultlab-collector``) that calls
        :meth:`collect_once` every ``interval_s`` seconds until :meth:`stop`; no thread
        when no node collects telemetry (netns and local nodes write straight into
        the run directory). Returns ``self``; raises nothing (a node's errors go to
        ``errors``, per node name, and are retried on the next pass)."""
        if self.nodes:
            self._thread = threading.Thread(target=self._loop, name="faultlab-collector", daemon=True)
            self._thread.start()
        return self

    def stop(self, remove: bool = True) -> None:
        """Stop, collect a last time, and (``remove``) remove the run's telemetry
        folder from each node whose last collection succeeded (the run directory has
        it all; a node that could not be read keeps its copy)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.nodes:
            self.collect_once()
        if remove and _NAME.fullmatch(self.run_id) and self.run_id not in (".", ".."):
            for node in self.nodes:
                if node.name not in self.errors:
                    try:
                        node.remove_telemetry(self.run_id)
                    except Exception as e:  # noqa: BLE001 - kept on the node, said so
                        self.errors[node.name] = f"not removed: {type(e).__name__}: {e}"
