"""Telemetry from other hosts: brought back into the run directory continuously.

Ranks on docker and ssh nodes write their per-step JSONL on their node (see
``Node.workload_out``). A ``TelemetryCollector`` thread asks each such node every
``interval_s`` for the bytes of its telemetry files past what it already has
(``Node.telemetry_files`` / ``Node.read_telemetry``) and appends the *complete lines*
to the same file names in the node's own folder ``telemetry/NODE/`` of the run, so
nothing ties one node's files to another's (faultlab.steprecords keeps a node's
records of the ranks placed on it only). A controller killed with
SIGKILL therefore leaves a run directory readable up to its last collection, which
the run directory's raw-JSONL reader already handles (and the rest stays on the
node). After the last collection of a run that ends, each node's copy is removed. Only plain file names
(``[A-Za-z0-9._-]``) are accepted from a node: a node cannot steer where we write;
and of the host samplers' files a node sends only its own name's (``host-NODE.jsonl``):
another node's name is a counted skip.

What a node holds is written by someone faultlab does not trust (a container's root,
an ssh node's users): nodes hand back regular files only, never through a link
(``Node.read_telemetry``: a docker node reads its host folder through descriptors,
faultlab.safefs.ForeignDir), at most CHUNK_BYTES a pass; a file larger than
MAX_FILE_BYTES is never read: it is a counted skip (``skipped``, one line naming it).
So is a file whose next MAX_LINE_BYTES hold no newline, the files of a node past its
first MAX_FILES (one line for them all), a node's folder of more than MAX_ENTRIES
names of any kind (not listed: one line), and whatever comes once a node has had
NODE_BUDGET_BYTES copied or the run RUN_BUDGET_BYTES: the disk root writes is bounded,
whatever a node plants.
The copies are appended relative to the descriptor of the node's folder (opened
with no link followed on any component), as regular files of mode 0644.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from faultlab import safefs

#: the host sampler's file of node NAME: ``host-NAME.jsonl`` (in the node's folder of
#: the run's telemetry folder, ``telemetry/NAME/``)
HOST_PREFIX = "host-"
_NAME = re.compile(r"[A-Za-z0-9._-]+")
#: the largest telemetry file copied back from a node (bytes): a rank's step records
#: of a day-long run are some hundred MB; a larger file is skipped, never read
MAX_FILE_BYTES = 1 << 30
#: the most bytes of one file read in one pass (the rest comes on the next passes)
CHUNK_BYTES = 64 << 20
#: the longest line copied (bytes): a step record is well under 1 KiB and a host
#: sample a few KiB; a file whose next MAX_LINE_BYTES hold no newline is skipped, so a
#: file of one endless line is read once, not every pass
MAX_LINE_BYTES = 1 << 20
#: the most telemetry files copied from one node: one per rank and the host sampler's;
#: a node with more (names that cost its writer nothing) gets the first ones copied
MAX_FILES = 256
#: the most entries of any kind (files, links, FIFOs, folders) listed in a node's run
#: folder a pass: a folder holding more is not listed (one skip line), so names that
#: cost a node's root an inode each cost the collector no more than this
MAX_ENTRIES = 4096
#: the most bytes copied from one node in a run: a few ranks' day-long step records
#: (each under MAX_FILE_BYTES) and the host samples; sparse files cost a node nothing
#: and the copies are dense, so the node's writer must not choose how much root writes
NODE_BUDGET_BYTES = 8 << 30
#: the most bytes copied from all nodes of a run: the run directory's disk, not the
#: node count, is the limit
RUN_BUDGET_BYTES = 32 << 30


class TelemetryCollector:
    """Collect ``run_id`` telemetry of ``nodes`` into ``local_dir``. ``start()``,
    ``stop()`` (a final collection), or ``collect_once()``. Errors of one node (its
    network cut, its container gone) are counted in ``errors`` and retried next time."""

    def __init__(self, nodes, run_id: str, local_dir: str | Path, interval_s: float = 0.5, *,
                 node_budget: int = NODE_BUDGET_BYTES, run_budget: int = RUN_BUDGET_BYTES):
        self.nodes = [n for n in nodes if n.collects_telemetry]
        self.run_id = run_id
        self.local_dir = Path(local_dir)
        self.interval_s = interval_s
        self.offsets: dict[tuple[str, str], int] = {}
        self.errors: dict[str, str] = {}
        #: (node, file name) -> one line: files not copied, or not to their end (too
        #: large, a line too long, past a node's MAX_FILES, past a budget)
        self.skipped: dict[tuple[str, str], str] = {}
        self.node_budget, self.run_budget = node_budget, run_budget
        #: bytes copied, per node name and in all
        self.copied: dict[str, int] = {}
        self.copied_total = 0
        #: nodes whose budget (or the run's) is spent: not read again
        self.spent: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def collect_once(self) -> int:
        """One pass over every node; returns the bytes appended."""
        total = 0
        if not self.nodes:
            return total
        with safefs.open_dir_nofollow(self.local_dir, create=True) as top:
            for node in self.nodes:
                try:
                    with top.subdir(safefs.check_name(node.name), create=True, mode=0o755) as out:
                        total += self._collect_node(node, out)
                    self.errors.pop(node.name, None)
                except Exception as e:  # a node that cannot be read now is retried
                    self.errors[node.name] = f"{type(e).__name__}: {e}"
        return total

    def _collect_node(self, node, out: safefs.TrustedDir) -> int:
        if node.name in self.spent:
            return 0
        total = 0
        try:
            listed = node.telemetry_files(self.run_id)
        except safefs.TooLarge as e:  # a folder of more than MAX_ENTRIES names
            self.skipped[(node.name, "(the folder's listing)")] = f"node {node.name}: {e}; nothing of it is copied"
            return 0
        names = self._first_files(node.name, listed)
        for name in names:
            key = (node.name, name)
            if not _NAME.fullmatch(name) or key in self.skipped:
                continue
            if name.startswith(HOST_PREFIX) and name != f"{HOST_PREFIX}{node.name}.jsonl":
                self.skipped[key] = f"node {node.name}: {name} names another node's host samples; not copied"
                continue
            off = self.offsets.get(key, 0)
            try:
                data = node.read_telemetry(self.run_id, name, off)
            except safefs.TooLarge as e:
                self.skipped[key] = f"node {node.name}: {e}"
                continue
            if len(data) >= MAX_LINE_BYTES and data.find(b"\n", 0, MAX_LINE_BYTES) < 0:
                self.skipped[key] = f"node {node.name}: {name} has a line longer than {MAX_LINE_BYTES} bytes at byte {off}; copied up to there"
                continue
            left = max(0, min(self.node_budget - self.copied.get(node.name, 0), self.run_budget - self.copied_total))
            cut = data.rfind(b"\n", 0, left) + 1
            if cut:
                out.append(name, data[:cut], 0o644)
                self.offsets[key] = off + cut
                self.copied[node.name] = self.copied.get(node.name, 0) + cut
                self.copied_total += cut
                total += cut
            if len(data) > left:
                self.spent.add(node.name)
                self.skipped[key] = (f"node {node.name}: {name} copied up to byte {off + cut}: the telemetry budget "
                                     f"({self.node_budget} bytes a node, {self.run_budget} a run) is spent; nothing more of the node is copied")
                break
        return total

    def _first_files(self, node: str, names: list[str]) -> list[str]:
        """The first MAX_FILES of ``names``, those already being copied first; the
        rest are one skipped line for the node."""
        if len(names) <= MAX_FILES:
            return names
        known = {n for (nd, n) in self.offsets if nd == node}
        names = sorted(known & set(names)) + sorted(set(names) - known)
        self.skipped[(node, f"(files past the first {MAX_FILES})")] = (f"node {node} has more than {MAX_FILES} telemetry files: "
                                                                 f"{names[MAX_FILES]} and the ones after it are not copied")
        return names[:MAX_FILES]

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
