"""The fault lifecycle: probe -> plan -> inject -> verify -> revert.

- ``probe()`` reads the node (read-only) and refuses (``Refused``) when the node holds
  state faultlab did not create or would clobber (a foreign root qdisc, a fault of the
  same kind on the same target), or (``BadInput``) when the target does not exist.
- ``plan(facts)`` is pure: the exact commands to inject and to revert. ``--dry-run``
  prints it. Revert commands are idempotent and touch only faultlab-owned objects
  (reserved tc handles, ``faultlab-<fault_id>`` cgroups, ``flifb<id>`` devices, PIDs
  recorded in the plan), so the on-node watchdog can run them blindly.
- ``verify()`` measures that the condition is really in force.
- ``reverted()`` checks that nothing faultlab made is left.

``apply()`` and ``ActiveFault.revert()`` drive the lifecycle with a lease (see
``faultlab.lifecycle.lease``): the lease is written and its watchdog started *before*
the first inject command runs, so a fault ends even if the controller is SIGKILLed
between two commands. Create (probe, lease, inject) and every revert hold the node
lock (``lease.node_lock``), so a revert from another process never runs between a
fault's watchdog and its last inject command; a creator whose lease ended under it
before its deadline undoes what it applied and stops (``RevertedUnder``).

A controller that takes signals (the CLI) passes ``Hooks``: ``apply`` asks
``stop_requested()`` before the lease and before each inject command (a signal is
never obeyed half-way through a step), and both ``apply`` and ``revert`` report the
phase and each revert command done, so the controller can say how many are left. A
revert is not interruptible: the only way out of one is ``HandOver`` (raised by the
hooks, only while revert commands run), which leaves the fault to its lease's
watchdog, told to revert at once (status ``handed-to-lease``).
"""

from __future__ import annotations

import json
import secrets
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from faultlab.errors import FaultlabError, NodeError
from faultlab.lifecycle.cmd import WRITE_SH, Cmd, write_cmd  # noqa: F401  (part of this module's API)
from faultlab.injectors.params import Param
from faultlab.lifecycle.lease import Lease, node_lock
from faultlab.nodes import Node
from faultlab.nodes.base import LINE_OUTPUT_BYTES


class Interrupted(BaseException):
    """The controller was asked to stop (a signal) before the fault was fully in force;
    ``apply`` reverts what it did and re-raises."""


class RevertedUnder(FaultlabError):
    """The fault was reverted by someone else (``faultlab revert``, ``recover``, a
    signal to its watchdog) while it was being created: what was applied is undone
    and the create stops (exit 1)."""


class HandOver(BaseException):
    """Raised by Hooks while revert commands run: stop reverting here and leave the
    fault to its lease's watchdog (told to revert now)."""


class Hooks:
    """What a controller learns of a lifecycle (no-ops here; see faultlab.lifecycle.injectrun)."""

    def stop_requested(self) -> bool:
        """True when the controller was asked to stop (apply then reverts)."""
        return False

    def phase(self, name: str) -> None:
        """``setup``, ``inject``, ``verify``, ``active``, ``revert``, ``check``, ``done``."""

    def revert_progress(self, done: int, total: int, handover_ok: bool) -> None:
        """``done`` of ``total`` revert commands have run; ``handover_ok``: HandOver may
        be raised now (a revert command is running or next)."""


NO_HOOKS = Hooks()


@dataclass
class Plan:
    """What a fault will do: ``inject`` and ``revert`` command lists, in order."""

    fault_id: str
    fault_type: str
    node: str
    target: str
    inject: list[Cmd]
    revert: list[Cmd]
    verify: list[str] = field(default_factory=list)  # what verify() measures, for people

    def render(self, node: Node) -> dict:
        return {
            "fault_id": self.fault_id,
            "type": self.fault_type,
            "node": self.node,
            "target": self.target,
            "inject": [c.render(node) for c in self.inject],
            "verify": list(self.verify),
            "revert": [c.render(node) for c in self.revert],
        }


def new_fault_id(fault_type: str) -> str:
    """A short unique id, e.g. ``nic-3f9a1c``; safe in file, cgroup and link names."""
    return f"{fault_type.split('-')[0]}-{secrets.token_hex(3)}"


class Injector(ABC):
    """One fail-slow fault on one node. Subclasses set ``type`` and implement
    ``probe``, ``plan``, ``verify`` and ``reverted``; they keep their parameters as
    attributes with explicit units.

    A fault type also declares, once, what the rest of faultlab reads from it:
    ``PARAMS`` (its parameters: the CLI's options and the scenario's ``params``),
    ``targets`` (``node`` or ``rank``) and ``target_help``, ``color`` (the report's),
    ``support`` (``faultlab doctor``'s rows) and ``verify_sentence`` (its verify
    evidence in words). ``registry.register`` lists it in ``FAULT_TYPES``."""

    type: ClassVar[str]
    #: the parameters this type takes, each written once
    PARAMS: ClassVar[tuple[Param, ...]] = ()
    #: CLI options (as typed, e.g. ``"--rate"``) this fault type takes, from PARAMS
    options: ClassVar[frozenset[str]] = frozenset()
    #: what it hits: ``node`` (the node itself: a NIC, a GPU) or ``rank`` (a rank's processes)
    targets: ClassVar[str] = "node"
    #: what ``--target`` names for this type, in a few words
    target_help: ClassVar[str] = ""
    #: its colour in the report's plots and legends
    color: ClassVar[str] = "#999999"
    #: its effect is job-wide: it slows every rank alike (a slowed link slows each
    #: all-reduce), so the labeler matches it to the ``job`` label, not to a rank's
    #: (``LabelerConfig.job_wide_fault_types``' default lists these types)
    job_wide: ClassVar[bool] = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "PARAMS" in cls.__dict__:
            cls.options = frozenset(p.option for p in cls.PARAMS)

    def __init__(self, node: Node, fault_id: str | None = None):
        self.node = node
        self.fault_id = fault_id or new_fault_id(self.type)

    @classmethod
    def param(cls, name: str) -> Param:
        """The declared parameter ``name`` (KeyError when the type has none)."""
        for p in cls.PARAMS:
            if p.name == name:
                return p
        raise KeyError(name)

    @classmethod
    def support(cls, node: dict) -> dict[str, tuple[bool, str]]:
        """``faultlab doctor``'s rows for this type on a node: row name (the type,
        or the type and an option, e.g. ``nic-slow --delay/--loss``) -> (supported,
        why in a few words). ``node``: the facts ``faultlab.doctor.node_facts``
        gathered (root, tc, qdiscs, cgroups, nvidia-smi, Python of the ranks)."""
        raise NotImplementedError(f"{cls.type} declares no support check")

    @classmethod
    def verify_sentence(cls, evidence: dict) -> str:
        """What ``verify()``'s ``evidence`` compared, in one line (the measured
        quantity, its value and its bound), without ``verified:``."""
        raise NotImplementedError(f"{cls.type} declares no verify sentence")

    @classmethod
    def from_options(cls, node: Node, *, target: str | None, duration_s: float, opts: dict, fault_id: str | None = None, force: bool = False) -> "Injector":
        """Build from CLI-style string options (see ``faultlab.injectors.build``).
        Raises BadInput naming the field."""
        raise NotImplementedError

    @property
    @abstractmethod
    def target(self) -> str:
        """What on the node is hit (an interface, ``pid:123,456``)."""

    @property
    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Parameters with units in the keys (``rate_bit_per_s``, ``cpu_fraction``)."""

    #: what ``severity`` measures, with its unit (each fault type says)
    severity_unit = "type-specific"

    @property
    @abstractmethod
    def severity(self) -> float:
        """A scalar severity where larger is worse (type-specific, documented)."""

    @abstractmethod
    def probe(self) -> dict:
        """Read-only facts the plan needs. Raises BadInput / Refused / NodeError."""

    @abstractmethod
    def plan(self, facts: dict) -> Plan:
        """Pure: the commands to inject and revert, given ``probe()`` facts."""

    @abstractmethod
    def verify(self, facts: dict) -> dict:
        """Measure that the fault is in force; returns evidence with ``ok`` (bool)."""

    @abstractmethod
    def reverted(self, facts: dict) -> list[str]:
        """What faultlab made that is still on the node (empty list: clean)."""

    def final_evidence(self, facts: dict) -> dict:
        """Measurements taken just before revert (counters over the whole fault)."""
        return {}

    def target_gone(self, facts: dict) -> str | None:
        """Why the fault can no longer be in force because its target is gone (e.g.
        ``process 4242 exited``), or None. A foreground inject then ends it at once
        instead of holding a fault on nothing for its whole duration."""
        return None


@dataclass
class ActiveFault:
    """A fault in force: its injector, facts, plan, lease and times (unix s)."""

    injector: Injector
    facts: dict
    plan: Plan
    lease: Any
    start_ts: float
    evidence: dict = field(default_factory=dict)
    end_ts: float | None = None
    status: str | None = None

    @property
    def fault_id(self) -> str:
        return self.plan.fault_id

    def revert(self, hooks: Hooks = NO_HOOKS) -> str:
        """Revert now (idempotent). Returns the status: ``reverted``, ``expired`` (the
        watchdog had already reverted it), ``revert-failed`` (something faultlab made
        is still there, listed in ``evidence["left_behind"]``; the lease is kept, so
        its watchdog retries at the deadline and ``faultlab recover`` can retry now) or
        ``handed-to-lease`` (``hooks`` raised HandOver: the watchdog reverts it now)."""

        if self.status is not None:
            return self.status
        hooks.phase("revert")
        with node_lock(self.injector.node):
            return self._revert_locked(hooks)

    def _revert_locked(self, hooks: Hooks = NO_HOOKS) -> str:
        if self.status is not None:
            return self.status
        hooks.phase("revert")
        hooks.revert_progress(0, len(self.plan.revert), False)
        inj = self.injector
        expired = self.lease.expired()
        try:
            self.evidence["at_revert"] = inj.final_evidence(self.facts)
        except Exception as e:  # evidence must never block a revert
            self.evidence["at_revert"] = {"error": str(e)}
        try:
            errors = run_revert(inj.node, self.plan.revert, hooks)
        except HandOver:
            self.end_ts = time.time()
            self.status = "handed-to-lease"
            self.evidence["watchdog_pid"] = self.lease.hand_over()
            return self.status
        hooks.phase("check")
        left = inj.reverted(self.facts)
        self.end_ts = time.time()
        if left:
            self.status = "revert-failed"
            self.evidence["left_behind"] = left
            self.evidence["revert_errors"] = errors
        else:
            self.status = "expired" if expired else "reverted"
            self.lease.release()
        hooks.phase("done")
        return self.status

    def injection_row(self, run_id: str) -> dict:
        """A row of the injections table (faultlab.schema.INJECTIONS)."""
        inj = self.injector
        return {
            "run_id": run_id,
            "fault_id": self.fault_id,
            "fault_type": inj.type,
            "kind": "injected",
            "node": inj.node.name,
            "target": self.plan.target,
            "start_ts": self.start_ts,
            "end_ts": self.end_ts if self.end_ts is not None else float("nan"),
            "params": json.dumps(inj.params, sort_keys=True),
            "severity": float(inj.severity),
            "status": self.status or "active",
            "verified": bool(self.evidence.get("verify", {}).get("ok", False)),
            "evidence": json.dumps(self.evidence, sort_keys=True, default=str),
        }


def run_revert(node: Node, cmds: list[Cmd], hooks: Hooks = NO_HOOKS) -> list[str]:
    """Run every revert command, ignoring failures (each is idempotent and may find its
    object already gone); returns their error lines for the record. ``hooks`` hears
    the progress and may raise HandOver between or during commands (never elsewhere)."""
    errors = []
    for i, c in enumerate(cmds):
        hooks.revert_progress(i, len(cmds), True)
        try:
            cp = node.run(list(c.argv), scope=c.scope, timeout=30, limit=LINE_OUTPUT_BYTES)
            if cp.returncode != 0:
                errors.append(f"{c.render(node)}: {cp.stderr.strip()[:200]}")
        except NodeError as e:
            errors.append(str(e))
    hooks.revert_progress(len(cmds), len(cmds), False)
    return errors


def _check_lease_stands(active: ActiveFault, *, at_deadline_too: bool) -> None:
    """Raise RevertedUnder when the lease's watchdog of ``active`` has ended before its
    deadline (someone reverted the fault while it was being created), or, with
    ``at_deadline_too``, at all (a fault applied after its lease ended has nothing left
    to end it). The caller undoes what was applied."""
    lease = active.lease
    if not lease.expired():
        return
    deadline = float(lease.record.get("deadline_ts") or 0)
    if time.time() < deadline:
        raise RevertedUnder(f"{active.fault_id} was reverted by another faultlab (revert, recover or a signal to its "
                            f"watchdog) while it was being created", field="lease",
                            fix="it is not in force; inject it again if it is wanted")
    if at_deadline_too:
        raise RevertedUnder(f"the lease of {active.fault_id} ended at its deadline before the fault was in force",
                            field="lease", fix="give a longer --duration or --grace")


def apply(injector: Injector, duration_s: float, *, grace_s: float = 10.0, verify: bool = True, hooks: Hooks = NO_HOOKS) -> ActiveFault:
    """Inject ``injector`` for ``duration_s`` seconds under a lease whose watchdog
    reverts at ``duration_s + grace_s`` if nobody else does.

    Probe, plan, lease and inject run under the lease host's lock, so a concurrent
    inject on the same target sees this fault's lease and is refused. The watchdog
    starts, then the lease record is made durable, both before the first inject command.
    After the inject commands (still under the lock) and after verify (under it again)
    the lease's watchdog must still stand: a fault someone reverted while it was being
    created (``faultlab revert`` waits for the lock, then reverts it whole) is never
    reported in force; it raises RevertedUnder.
    Returns the ActiveFault (call ``.revert()``). On any error during inject or verify,
    or ``hooks.stop_requested()`` between steps, the fault is reverted before the error
    (or ``Interrupted``) propagates: nothing is left half-applied.
    Raises BadInput / Refused / NodeError (nothing applied), FaultlabError (RevertedUnder
    among them), Interrupted.
    """

    hooks.phase("setup")
    with node_lock(injector.node):
        facts = injector.probe()
        plan = injector.plan(facts)
        if hooks.stop_requested():
            raise Interrupted()
        lease = Lease.create(injector, plan, deadline_ts=time.time() + duration_s + grace_s)
        active = ActiveFault(injector, facts, plan, lease, start_ts=time.time())
        try:
            hooks.phase("inject")
            for c in plan.inject:
                if hooks.stop_requested():
                    raise Interrupted()
                cp = injector.node.run(list(c.argv), scope=c.scope, timeout=30, limit=LINE_OUTPUT_BYTES)
                if cp.returncode != 0:
                    raise FaultlabError(
                        f"inject step failed on node {injector.node.name}: {c.render(injector.node)}: {(cp.stderr.strip() or cp.stdout.strip())[:300]}",
                        field="inject",
                    )
            if hooks.stop_requested():
                raise Interrupted()
            _check_lease_stands(active, at_deadline_too=True)
        except BaseException as e:
            e.active = active  # the caller reads how the revert went (status, evidence)
            active._revert_locked(hooks)
            raise
    active.start_ts = time.time()
    try:
        if verify:
            hooks.phase("verify")
            active.evidence["verify"] = injector.verify(facts)
        if hooks.stop_requested():
            raise Interrupted()
        with node_lock(injector.node):  # a revert holds it from its first command to its release
            ended = active.lease.expired()
        if ended:
            _check_lease_stands(active, at_deadline_too=False)
    except BaseException as e:
        e.active = active
        active.revert(hooks)
        raise
    hooks.phase("active")
    return active
