"""``gc-storm``: stop-the-world garbage-collection bursts inside one Python rank.

Uncoordinated GC is one of the software stragglers that dominate in production: one
rank's interpreter stops for a full collection while its peers wait at the next
collective. This fault makes it happen on demand, through the in-workload agent
(``faultlab.benchmarks.agent``; ``faultlab.benchmarks.ddp`` ranks start it by
default, any workload starts it with ``agent.start()``).

Protocol (files in the agent's control folder, see ``faultlab.benchmarks.agent``):

- probe: the target PID exists, its agent's heartbeat ``PID.agent`` is there, names
  the same process (PID and start time, so a reused PID is caught) and is fresh
  (< ``HEARTBEAT_STALE_S``); no ``PID.gc-storm.json`` command is in force.
- inject: write ``PID.gc-storm.json`` (``fault_id``, ``rate_per_s``, ``garbage_mb``,
  ``deadline_ts``) atomically (``printf`` to a temp file + ``mv``).
- verify: the agent's status file ``PID.gc-storm.status.json`` names this fault and
  counts at least one burst, within ``2 + 2/rate + garbage_mb/100`` seconds.
- revert: ``rm -f`` the command file, then wait (<= 25 s) until the agent removed its
  status file (it does so within one poll, 0.05 s, or after the burst in progress);
  if the process is gone, remove its status file. ``sh`` and coreutils only, so the
  lease watchdog runs it blindly. Even with the controller and the watchdog both
  killed, the agent ends the storm by itself at ``deadline_ts``.

Control folder: ``faultlab.benchmarks.agent.default_dir()`` on the controller
(``$FAULTLAB_AGENT_DIR``; else ``/run/faultlab/agents`` as root; else
``$XDG_RUNTIME_DIR/faultlab/agents`` or ``~/.cache/faultlab/agents``), or the
``agent_dir`` given to ``GcStorm``. The workload must use the same folder.

Trust: probe opens the folder through ``faultlab.safefs`` (owned by root, us or the
target process's user; mode 0700; every parent owned by root or those users and not
writable by others; no symlink) and refuses otherwise; the agent's files are read
without following links and only when owned by those users. The inject and revert
commands run as the folder's owner (``setpriv --reuid``) when that is not us, so
root never writes through a path another user controls, and are killed after
``AS_OWNER_TIMEOUT_S`` (that user may stop them); the command's temporary is
a fresh ``mktemp`` file, never a predictable name. On another node (ssh, docker) the
command is written there as the node's acting user through descriptors
(``nodefs.write_on_node_argv``: the folder walked with no link, the temporary made
``O_EXCL|O_NOFOLLOW``, its mode set and renamed by descriptor): ``WRITE_SH`` run
there as root let the folder's owner relink the fresh temporary between ``mktemp``
and the write or the ``chmod``, which root then did through the link. Every value read from the agent's
files (written by the target's user, who may write anything there) passes a strict
schema first (``Heartbeat``, ``StormStatus``, ``StormCommand``: types, finite numbers
in range, bounded strings, known keys only; ``check_agent_file``): a heartbeat that
fails makes probe refuse in one line naming the file and the field; a status or final
summary that fails is one warning line and is never taken as the agent's word (verify
does not confirm the storm on it, severity does not use it).

Without an agent: Python >= 3.14 has ``sys.remote_exec(pid, script)``, which could
start the agent inside a running interpreter; ``remote_exec_support()`` detects it,
but starting the agent that way is not built, so a target without an agent is
refused with the fix (start the agent in the workload).

Severity: ``stalled_fraction``, the fraction of wall time (0..1) the storm's bursts
held the target's interpreter (allocation + full collection, both under the GIL) while
the storm was in force, as the agent measured it: the latest reading (verify, then
the one just before revert, then the agent's final summary once reverted). It folds
in what the parameters alone do not say: a burst's pause grows with the target's own
heap (~0.15-0.4 s for a process that imported torch on the 2-core test machine, at
any ``garbage_mb``). NaN before any measurement (``--dry-run``). No root needed for
one's own processes.
"""

from __future__ import annotations

import json
import math
import os
import platform
import pwd
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from faultlab import nodefs, procid, safefs
from faultlab.benchmarks import agent as agent_mod
from faultlab.errors import BadInput, Refused, printable
from faultlab.injectors.base import Cmd, Injector, Plan
from faultlab.injectors.params import Param, parse_pids
from faultlab.injectors.registry import register
from faultlab.nodes import Node

HEARTBEAT_STALE_S = 10.0
REVERT_WAIT_MAX_S = 25.0  # below AS_OWNER_TIMEOUT_S
#: how long a command run as the control folder's owner may run (s) before it is
#: killed: above the longest revert wait, below the watchdog's bound on one revert
#: line (``faultlab.lifecycle.watchdog.LINE_TIMEOUT_S``)
AS_OWNER_TIMEOUT_S = 30
#: the whole environment of a command run as the control folder's owner (WRITE_SH and
#: STOP_SH need coreutils only)
AS_OWNER_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
#: keyctl(2)'s system call number by machine (glibc has no wrapper for it)
KEYCTL_NR = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 271, "s390x": 280}
# $1 keyctl's number, $2... the command: exec'd in a new anonymous session keyring
# (KEYCTL_JOIN_SESSION_KEYRING, no name), so it possesses nothing of ours. Where the
# process may not use keyrings at all (ENOSYS, or EPERM from a seccomp filter, which
# the command inherits), it has none to reach and runs as it is.
NEW_KEYRING_PY = (
    "import ctypes, errno, os, sys\n"
    "if ctypes.CDLL(None, use_errno=True).syscall(int(sys.argv[1]), 1, None) < 0 and ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):\n"
    "    sys.exit('faultlab: no new session keyring: ' + os.strerror(ctypes.get_errno()))\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)

# $1 command JSON, $2 command path. The temporary is a fresh mktemp file (O_EXCL: a
# link planted at a predictable name is never written through); the commands run as
# the control folder's owner (``as_owner``), so whatever that user planted in their
# own folder can only hurt that user.
WRITE_SH = 'umask 022; t=$(mktemp "$2.tmp.XXXXXX") && printf "%s\\n" "$1" > "$t" && chmod 644 "$t" && mv -f "$t" "$2"'
# $1 command path, $2 status path, $3 target pid, $4 polls of 0.05 s to wait
STOP_SH = (
    'rm -f "$1" "$1".tmp.*; i=0; '
    'while [ -e "$2" ] && [ -d "/proc/$3" ] && [ "$i" -lt "$4" ]; do sleep 0.05; i=$((i+1)); done; '
    '[ -d "/proc/$3" ] || rm -f "$2"; exit 0'
)


# -- what the agent writes, as root reads it --------------------------------------------
# The heartbeat and status files are written by the target process's user (its agent),
# who may put anything in them: every value is checked here (strict types, finite
# numbers in range, bounded strings, known keys only) before root compares, adds or
# reports it. A file that fails is never acted on: probe refuses in one line, verify,
# the final evidence and the revert check print one warning line (``_warn``).
_Seconds = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]
_UnixTs = Annotated[float, Field(ge=0, le=1e11, allow_inf_nan=False)]
_Count = Annotated[int, Field(ge=0, le=10**12)]
_Pid = Annotated[int, Field(ge=1, le=2**22)]  # pid_max is at most 2**22
_FaultId = Annotated[str, Field(max_length=64, pattern=agent_mod.FAULT_ID.pattern)]


class _AgentFile(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class StormStatus(_AgentFile):
    """A storm's status (``PID.gc-storm.status.json``, and ``last_storm`` in the
    heartbeat), as ``faultlab.benchmarks.agent`` writes it."""

    state: Literal["running", "error", "ended"]
    fault_id: Optional[_FaultId] = None
    error: Optional[Annotated[str, Field(max_length=500)]] = None
    end: Optional[Literal["revoked", "deadline", "stopped", "error"]] = None
    pid: Optional[_Pid] = None
    rate_per_s: Optional[Annotated[float, Field(gt=0, le=agent_mod.MAX_RATE_PER_S, allow_inf_nan=False)]] = None
    garbage_mb: Optional[Annotated[float, Field(gt=0, le=agent_mod.MAX_GARBAGE_MB, allow_inf_nan=False)]] = None
    objects_per_burst: Optional[_Count] = None
    bursts: Optional[_Count] = None
    deadline_ts: Optional[_UnixTs] = None
    started_ts: Optional[_UnixTs] = None
    first_burst_ts: Optional[_UnixTs] = None
    updated_ts: Optional[_UnixTs] = None
    ended_ts: Optional[_UnixTs] = None
    burst_s_total: Optional[_Seconds] = None
    burst_s_max: Optional[_Seconds] = None
    collect_s_total: Optional[_Seconds] = None
    collect_s_max: Optional[_Seconds] = None
    gc_s_total: Optional[_Seconds] = None
    elapsed_s: Optional[_Seconds] = None
    stalled_fraction: Optional[Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]] = None
    achieved_rate_per_s: Optional[Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]] = None


class Heartbeat(_AgentFile):
    """The agent's heartbeat (``PID.agent``)."""

    pid: _Pid
    heartbeat_ts: _UnixTs
    starttime: Optional[Annotated[int, Field(ge=0, le=2**63)]] = None
    python: Optional[Annotated[str, Field(pattern=r"^[0-9A-Za-z.+-]{1,32}$")]] = None
    agent_version: Optional[Annotated[int, Field(ge=0, le=10**6)]] = None
    started_ts: Optional[_UnixTs] = None
    storms_done: Optional[_Count] = None
    last_storm: Optional[StormStatus] = None


class StormCommand(_AgentFile):
    """A command file (``PID.gc-storm.json``): what ``GcStorm.command`` writes."""

    fault_id: _FaultId
    rate_per_s: Annotated[float, Field(gt=0, le=agent_mod.MAX_RATE_PER_S, allow_inf_nan=False)]
    garbage_mb: Annotated[float, Field(gt=0, le=agent_mod.MAX_GARBAGE_MB, allow_inf_nan=False)]
    deadline_ts: _UnixTs


def check_agent_file(model: type[_AgentFile], data, path: str) -> tuple[dict | None, str | None]:
    """``(values, None)`` when ``data`` (JSON text, or what it parsed to) passes
    ``model``: a dict of the keys the file holds; else ``(None, problem)``, one line
    naming ``path`` and the field (never the value). Raises nothing."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError) as e:
            return None, f"{path}: not JSON ({printable(e, 80)})"
    if not isinstance(data, dict):
        return None, f"{path}: not a JSON object"
    try:
        m = model.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False, include_input=False, include_context=False)[0]
        loc = ".".join(printable(x, 40) for x in err["loc"]) or "(the file)"
        return None, f"{path}: field {loc}: {printable(err['msg'], 120)}"
    except RecursionError:
        return None, f"{path}: nested too deeply"
    return m.model_dump(exclude_unset=True), None


def parse_number(value, field: str, hi: float, unit: str, example: str) -> float:
    """A float in (0, hi] from a CLI string. Raises BadInput naming ``field``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BadInput("missing", field=field, fix=f"give {unit}, e.g. {field} {example}")
    if isinstance(value, bool):
        raise BadInput(f"{value!r} is not a number", field=field, fix=f"give {unit}, e.g. {field} {example}")
    try:
        f = float(str(value).strip())
    except ValueError:
        raise BadInput(f"{value!r} is not a number", field=field, fix=f"give {unit}, e.g. {field} {example}") from None
    if not math.isfinite(f) or not (0 < f <= hi):
        raise BadInput(f"{value!r} is outside (0, {hi:g}]", field=field, fix=f"give {unit} in (0, {hi:g}], e.g. {field} {example}")
    return f


def parse_gc_rate(value, field: str = "--gc-rate") -> float:
    """Full collections per second, in (0, MAX_RATE_PER_S]. Raises BadInput."""
    return parse_number(value, field, agent_mod.MAX_RATE_PER_S, "collections per second", "5")


def parse_garbage_mb(value, field: str = "--garbage-mb") -> float:
    """MB of cyclic garbage per collection, in (0, MAX_GARBAGE_MB]. Raises BadInput."""
    return parse_number(value, field, agent_mod.MAX_GARBAGE_MB, "MB of garbage per collection", "50")


def remote_exec_support(target_python: str | None = None) -> str | None:
    """Why ``sys.remote_exec`` cannot start the agent in a target running
    ``target_python`` (``"3.14"``; None: unknown), in words. Today always a reason:
    the interpreters are too old, or (on Python >= 3.14) that path is not built yet;
    None is kept for when it is built."""
    if sys.version_info < (3, 14) or not hasattr(sys, "remote_exec"):
        return f"sys.remote_exec needs Python >= 3.14 and faultlab runs Python {platform.python_version()}"
    if target_python:
        m = re.match(r"(\d+)\.(\d+)", target_python)
        if m and (int(m.group(1)), int(m.group(2))) < (3, 14):
            return f"sys.remote_exec needs Python >= 3.14 in the target, which runs Python {target_python}"
    return "starting the agent through sys.remote_exec is not built yet"


def target_python_version(node: Node, pid: int) -> str | None:
    """``"3.11"`` when ``/proc/PID/exe`` names a pythonX.Y binary, else None."""
    try:
        cp = node.run(["readlink", "-f", f"/proc/{pid}/exe"], scope="host", timeout=10)
    except Exception:
        return None
    m = re.search(r"python(\d+\.\d+)", cp.stdout.strip().rsplit("/", 1)[-1]) if cp.returncode == 0 else None
    return m.group(1) if m else None


#: the group of a line run as a user with no passwd entry (nogroup)
NO_GROUP = 65534


def owner_gid(uid: int) -> int:
    """The group a line run as ``uid`` runs with: that user's primary group (passwd),
    else :data:`NO_GROUP`. Never the control folder's group: a folder made in a setgid
    folder has that folder's group whether its owner is in it or not, and the line ran
    as the owner with it (gid shadow for a user outside shadow)."""
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return NO_GROUP


@register
class GcStorm(Injector):
    """Stop-the-world GC bursts in the Python process ``pid`` (which must run the
    agent): ``rate_per_s`` bursts a second (collections/s, (0, 100]), each allocating
    ``garbage_mb`` MB ((0, 4096]) of cyclic garbage and collecting it, for
    ``duration_s`` seconds from probe (the agent's own deadline).

    Raises BadInput naming ``--gc-rate`` / ``--garbage-mb`` / ``--target`` for bad
    values or a missing PID (at probe); Refused when the process runs no agent (or
    a stale one) or already has a gc-storm."""

    type = "gc-storm"
    PARAMS = (
        Param("gc_rate", "full collections per second, e.g. 5", "PER_S", parse_gc_rate,
              bounds=(0, agent_mod.MAX_RATE_PER_S), open_low=True, kind="number", required=True),
        Param("garbage_mb", "MB of cyclic garbage per collection, e.g. 50", "MB", parse_garbage_mb,
              bounds=(0, agent_mod.MAX_GARBAGE_MB), open_low=True, kind="number", required=True),
    )
    targets = "rank"
    target_help = "PID (a rank running the in-workload agent)"
    color = "#669bbc"

    @classmethod
    def from_options(cls, node, *, target, duration_s, opts, fault_id=None, force=False):
        """``--target PID``, ``--gc-rate`` (collections/s), ``--garbage-mb`` (MB per
        collection), both plain numbers. ``force`` changes nothing: a gc-storm
        touches no foreign state. Raises BadInput naming the field (a missing one
        with its example)."""
        rate, mb = (p.parse(opts.get(p.option), p.option) for p in cls.PARAMS)
        pids = parse_pids(target)
        if len(pids) != 1:
            raise BadInput("gc-storm takes one PID", field="--target", fix="give the PID of one rank")
        return cls(node, pids[0], rate, mb, duration_s, fault_id=fault_id)

    @classmethod
    def support(cls, node: dict) -> dict[str, tuple[bool, str]]:
        """Supported where the ranks have a Python: through the in-workload agent
        (``faultlab.benchmarks.agent``, started with the workload). Starting the agent
        in a running interpreter through ``sys.remote_exec`` is not built
        (``remote_exec_support`` says why for the node's Python), so it is never
        reported as available."""
        if node["python"] is None:
            return {cls.type: (False, f"no Python for the ranks: {node['python_error']}")}
        why_not = remote_exec_support(node["python"]) if node["sys_remote_exec"] else (
            f"sys.remote_exec needs Python >= 3.14 in the target (this is {node['python']})")
        if why_not is None:
            return {cls.type: (True, "through the in-workload agent (faultlab.benchmarks.agent), or started in a running rank through sys.remote_exec")}
        return {cls.type: (True, f"through the in-workload agent (faultlab.benchmarks.agent) only; a rank without it: {why_not}")}

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        if "ack_s" in evidence:
            return f"the in-workload agent reported a GC burst after {evidence['ack_s']}s"
        return f"agent: {evidence['error']}"

    def __init__(self, node: Node, pid: int, rate_per_s: float, garbage_mb: float, duration_s: float, *,
                 fault_id: str | None = None, label: str | None = None, agent_dir: str | None = None):
        super().__init__(node, fault_id)
        self.rate_per_s = parse_gc_rate(rate_per_s)
        self.garbage_mb = parse_garbage_mb(garbage_mb)
        if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s > 0):
            raise BadInput(f"{duration_s!r} is not a positive duration", field="--duration", fix="give e.g. --duration 30s")
        self.pid, self.duration_s = int(pid), float(duration_s)
        self.label = label
        self.agent_dir = str(agent_dir) if agent_dir is not None else None
        self._last_status: dict | None = None
        self._warned: set[str] = set()

    @property
    def target(self) -> str:
        return self.label or f"pid:{self.pid}"

    @property
    def params(self) -> dict:
        return {"pid": self.pid, "rate_per_s": self.rate_per_s, "garbage_mb": self.garbage_mb}

    #: what ``severity`` measures, with its unit (the dataset card lists it per fault type)
    severity_unit = "fraction (0..1) of wall time the GC bursts held the target's interpreter, measured"

    @property
    def severity(self) -> float:
        """Fraction of wall time (0..1) the bursts held the target's interpreter, as
        last measured by the agent; NaN before any measurement."""
        st = self._last_status
        if st and st.get("stalled_fraction") is not None:
            return float(st["stalled_fraction"])
        return float("nan")

    def _dir(self) -> str:
        return self.agent_dir or str(agent_mod.default_dir())

    def _local(self) -> bool:
        """Whether the control folder is on this host (local and netns nodes), where
        it is opened through ``faultlab.safefs``."""
        return getattr(self.node, "kind", "local") in ("local", "netns")

    def _owners(self) -> frozenset[int]:
        """Trusted owners of the control folder and its files: root, us, and the
        target process's user (whose agent writes there)."""
        uids = set(safefs.allowed_uids())
        uid = self._target_uid()
        if uid is not None:
            uids.add(uid)
        return frozenset(uids)

    def _target_uid(self) -> int | None:
        try:
            status = self.node.read_file(f"/proc/{self.pid}/status")
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("Uid:"):
                fields = line.split()
                return int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else None  # effective uid
        return None

    def _open_dir(self) -> safefs.TrustedDir:
        """The checked control folder (owned by root, us or the target's user, 0700,
        no symlink on the path). Raises UntrustedPath (one line, path and fix)."""
        return safefs.open_dir(self._dir(), private=True, uids=self._owners())

    def _read_text(self, path: str) -> str | None:
        """The text of a file in the control folder, or None when absent, unreadable or
        untrusted (a symlink, a file of another user, over 1 MiB)."""
        try:
            if self._local():
                p = Path(path)
                with safefs.open_dir(str(p.parent), private=True, uids=self._owners()) as d:
                    return d.read_bytes(p.name).decode("utf-8", errors="replace")
            # another node (ssh, docker): the same checks, run there (nodefs.read_on_node)
            return nodefs.read_on_node(self.node, path, uids=self._remote_owners())
        except (OSError, ValueError):
            return None

    def _check(self, model: type[_AgentFile], path: str) -> tuple[dict | None, str | None]:
        """(values, None) of the agent file ``path`` checked against ``model``;
        (None, None) when it is absent or untrusted; (None, problem) when it fails."""
        text = self._read_text(path)
        if text is None:
            return None, None
        return check_agent_file(model, text, path)

    def _read(self, model: type[_AgentFile], path: str) -> dict | None:
        """The values of the agent file ``path`` when it passes ``model``, else None;
        a file that fails is one warning line (once per problem), never acted on."""
        values, problem = self._check(model, path)
        if problem is not None:
            self._warn(problem)
        return values

    def _warn(self, problem: str) -> None:
        if problem not in self._warned:
            self._warned.add(problem)
            print(f"faultlab: warning: gc-storm agent file {problem} (never acted on)", file=sys.stderr)

    def _remote_owners(self) -> tuple[int, ...]:
        """Trusted owners on another node besides root and its acting user: the
        target process's user there."""
        uid = self._target_uid()
        return () if uid is None else (uid,)

    def _exists(self, path: str) -> bool:
        if not self._local():
            try:
                nodefs.read_on_node(self.node, path, uids=self._remote_owners())
                return True
            except FileNotFoundError:
                return False
        p = Path(path)
        try:
            with safefs.open_dir(str(p.parent), private=True, uids=self._owners()) as d:
                return d.exists(p.name)
        except FileNotFoundError:
            return False

    def _as_owner(self, argv: tuple[str, ...], owner: int | None, group: int | None) -> tuple[str, ...]:
        """``argv`` run as the control folder's owner when that is not us (setpriv,
        util-linux): root never writes through a path another user controls. That
        process is the owner's, who may stop or hang it: it is killed after
        ``AS_OWNER_TIMEOUT_S`` (coreutils ``timeout``, run as us), so it never holds
        the lease watchdog or a revert for longer. The owner may also attach to it
        (ptrace: it is their process), so it starts in a session of its own
        (``setsid``, the same PID: no fork under ``timeout``): with our controlling
        terminal it could push keystrokes into root's shell (TIOCSTI). Its stdin is
        never our terminal (``Node.run``, the lease's revert) and its output is bounded
        where it is read. Its environment is :data:`AS_OWNER_ENV` alone and it stands
        in ``/`` (``env -i -C /``, still as us): the owner reads their process's
        ``/proc/PID/environ``, which would hold whatever root exported (tokens, agent
        sockets), and opens files through ``/proc/PID/cwd``, which would reach below a
        0700 folder of root's (``/root``) to whatever root's umask left readable. It
        starts in a session keyring of its own (:data:`NEW_KEYRING_PY`, still as us):
        keys are their possessor's whatever its uid, and root's login session keyring
        (pam_keyinit) would be its. On a machine missing from :data:`KEYCTL_NR` that
        step is left out."""
        if owner is None or owner == os.geteuid():
            return argv
        nr = KEYCTL_NR.get(platform.machine())
        keyring = (sys.executable, "-I", "-S", "-c", NEW_KEYRING_PY, str(nr)) if nr else ()
        return ("timeout", "--foreground", "-s", "KILL", str(AS_OWNER_TIMEOUT_S), "setsid", "env", "-i", "-C", "/", *AS_OWNER_ENV, *keyring,
                "setpriv", f"--reuid={owner}", f"--regid={group if group is not None else owner_gid(owner)}", "--clear-groups", "--", *argv)

    def _starttime(self) -> int | None:
        try:
            return procid.parse_starttime(self.node.read_file(f"/proc/{self.pid}/stat"))
        except OSError:
            return None

    def probe(self) -> dict:
        pid, d = self.pid, self._dir()
        if not self.node.exists(f"/proc/{pid}"):
            raise BadInput(f"no process {pid} on node {self.node.name}", field="--target", fix="give the PID of a running Python rank")
        owner = group = None
        if self._local():
            try:
                with self._open_dir() as td:
                    st = os.fstat(td.fd)
                    owner, group = st.st_uid, owner_gid(st.st_uid)
            except FileNotFoundError:
                pass  # no folder: no agent (refused below)
            except safefs.UntrustedPath as e:
                raise Refused(f"the agent control folder is not trusted: {e}", field="--target",
                              fix="give the workload a private folder (0700, owned by its user) in FAULTLAB_AGENT_DIR") from None
        hb_path = str(agent_mod.heartbeat_path(d, pid))
        if not self._local():  # another node: the whole path is checked there as it is read
            try:
                nodefs.read_on_node(self.node, hb_path, uids=self._remote_owners())
            except FileNotFoundError:
                pass  # no heartbeat: refused below
            except safefs.UntrustedPath as e:
                raise Refused(f"the agent control folder is not trusted: {e}", field="--target",
                              fix="give the workload a private folder (0700, owned by its user) in FAULTLAB_AGENT_DIR") from None
        fix = (f"start the agent in the workload (`from faultlab.benchmarks import agent; agent.start()`; "
               f"faultlab.benchmarks.ddp ranks start it unless --agent-dir none) with the same control folder "
               f"as faultlab ({d}, set by FAULTLAB_AGENT_DIR)")
        hb, problem = self._check(Heartbeat, hb_path)
        if problem is not None:
            raise Refused(f"the agent heartbeat of process {pid} is not valid, never acted on: {problem}", field="--target",
                          fix=f"restart the workload's agent; if that does not help, remove {hb_path}")
        if hb is None:
            why = remote_exec_support(target_python_version(self.node, pid))
            raise Refused(f"process {pid} runs no faultlab agent (no heartbeat {hb_path}); {why}", field="--target", fix=fix)
        start = self._starttime()
        if hb["pid"] != pid or (start is not None and hb.get("starttime") not in (None, start)):
            raise Refused(f"the agent heartbeat {hb_path} was left by an earlier process with PID {pid}", field="--target", fix=fix)
        age = time.time() - hb["heartbeat_ts"]
        if age > HEARTBEAT_STALE_S:
            raise Refused(f"the agent of process {pid} is not responding (last heartbeat {age:.0f}s ago; stopped or wedged?)",
                          field="--target", fix="check the process is running (not stopped) and retry")
        cmd_path = str(agent_mod.command_path(d, pid))
        st_path = str(agent_mod.status_path(d, pid))
        if self._exists(cmd_path):
            cmd, problem = self._check(StormCommand, cmd_path)
            if cmd is None:
                raise Refused(f"process {pid} already has a gc-storm command that is not valid ({problem or cmd_path})",
                              field="--target", fix=f"end that storm, or remove {cmd_path}")
            other = cmd["fault_id"]
            raise Refused(f"process {pid} already has a gc-storm ({other})", field="--target", fix=f"revert it first (faultlab revert {other})")
        if self._exists(st_path):
            raise Refused(f"a gc-storm in process {pid} is still ending ({st_path})", field="--target", fix="retry in a few seconds")
        return {
            "agent_dir": d, "heartbeat_path": hb_path, "cmd_path": cmd_path, "status_path": st_path,
            "deadline_ts": time.time() + self.duration_s, "python": hb.get("python"), "starttime": start,
            "dir_uid": owner, "owner_gid": group,
        }

    def command(self, facts: dict) -> dict:
        """The command the agent reads (what inject writes)."""
        return {"fault_id": self.fault_id, "rate_per_s": self.rate_per_s, "garbage_mb": self.garbage_mb,
                "deadline_ts": round(float(facts["deadline_ts"]), 3)}

    def _verify_timeout_s(self) -> float:
        return 2.0 + 2.0 / self.rate_per_s + self.garbage_mb / 100.0

    def plan(self, facts: dict) -> Plan:
        body = json.dumps(self.command(facts), sort_keys=True)
        polls = int(min(REVERT_WAIT_MAX_S, 5.0 + self.garbage_mb / 100.0) / 0.05)
        uid, gid = facts.get("dir_uid"), facts.get("owner_gid")
        if self._local():
            write = self._as_owner(("sh", "-c", WRITE_SH, "sh", body, facts["cmd_path"]), uid, gid)
        else:  # another node: written there as its acting user through descriptors, never a path the folder's owner may swap
            write = tuple(nodefs.write_on_node_argv(facts["cmd_path"], body + "\n", uids=self._remote_owners()))
        inject = [Cmd(write, "host", "hand the storm to the agent")]
        revert = [Cmd(self._as_owner(("sh", "-c", STOP_SH, "sh", facts["cmd_path"], facts["status_path"], str(self.pid), str(polls)),
                                     uid, gid), "host",
                      "withdraw the command; wait for the agent to end the storm")]
        return Plan(self.fault_id, self.type, self.node.name, self.target, inject, revert,
                    [f"the agent's status {facts['status_path']} names {self.fault_id} and counts a burst within {self._verify_timeout_s():.1f}s (or its first burst began and still runs then)"])

    def verify(self, facts: dict) -> dict:
        deadline = time.time() + self._verify_timeout_s()
        t0 = time.time()
        st = None
        while time.time() < deadline:
            st = self._read(StormStatus, facts["status_path"])
            if st and st.get("fault_id") == self.fault_id:
                if st.get("state") == "error":  # its user's words: one printable line
                    err = st.get("error")
                    return {"ok": False, "error": None if err is None else printable(err, 500), "status": st}
                if st.get("bursts", 0) >= 1:
                    self._last_status = st
                    return {"ok": True, "ack_s": round(time.time() - t0, 3), "status": st}
            time.sleep(0.02)
        if st and st.get("fault_id") == self.fault_id and st.get("state") == "running" and st.get("first_burst_ts"):
            # the first burst began and still holds the interpreter: a full collection of
            # a heap larger than the timeout allows for; the storm is in force
            return {"ok": True, "ack_s": round(time.time() - t0, 3), "status": st,
                    "first_burst_running_s": round(max(0.0, time.time() - float(st["first_burst_ts"])), 3)}
        return {"ok": False, "error": f"no burst reported by the agent within {self._verify_timeout_s():.1f}s", "status": st}

    def final_evidence(self, facts: dict) -> dict:
        st = self._read(StormStatus, facts["status_path"])
        if not (st and st.get("fault_id") == self.fault_id):
            last = (self._read(Heartbeat, facts["heartbeat_path"]) or {}).get("last_storm")
            st = last if last and last.get("fault_id") == self.fault_id else None
        if st is None:
            return {"status": None}
        self._last_status = st
        return {"status": st}

    def reverted(self, facts: dict) -> list[str]:
        """What is left: the command file, or a status file of this storm while the
        process lives. Once clean, the agent's final summary of the storm (in its
        heartbeat) becomes the measurement behind ``severity``."""
        left = []
        if self._exists(facts["cmd_path"]):
            left.append(f"gc-storm command file {facts['cmd_path']}")
        if self._exists(facts["status_path"]):
            st, problem = self._check(StormStatus, facts["status_path"])
            if problem is not None:  # whose storm it is cannot be told: it is left
                self._warn(problem)
                left.append(f"gc-storm status file {facts['status_path']} that is not valid (it may be this storm's)")
            elif (st or {}).get("fault_id") in (None, self.fault_id):
                left.append(f"gc-storm still running in process {self.pid} ({facts['status_path']})")
        if not left:
            last = (self._read(Heartbeat, facts["heartbeat_path"]) or {}).get("last_storm")
            if last and last.get("fault_id") == self.fault_id:
                self._last_status = last
        return left
