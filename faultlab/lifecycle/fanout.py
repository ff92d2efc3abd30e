"""Fan-out: one fault on many nodes, all or nothing.

``apply_all(injectors, duration_s)`` applies each injector (its own node) on a thread
pool of at most ``max_parallel`` nodes at once (sshd's default ``MaxStartups 10``
drops unauthenticated connections beyond 10 per server; one controller connecting to
many servers is bounded the same way, Ansible's ``forks``). When any node fails, the
faults already applied are reverted and ``FanoutError`` names the failing node(s); no
node is left with the fault. ``revert_all`` reverts in parallel.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from faultlab.errors import FaultlabError


class FanoutError(FaultlabError):
    """Some node of a fan-out failed; every node applied was reverted."""


def apply_all(injs: list, duration_s: float, *, grace_s: float = 10.0, verify: bool = True, max_parallel: int = 10) -> list:
    """Apply every injector; returns their ActiveFaults in order. Raises FanoutError
    (the first failing node named, with its one-line error) after reverting the others."""
    from faultlab.injectors.base import apply

    def one(inj):
        try:
            return apply(inj, duration_s, grace_s=grace_s, verify=verify), None
        except Exception as e:
            return None, e

    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(injs)))) as pool:
        results = list(pool.map(one, injs))
    failed = [(inj, e) for inj, (_, e) in zip(injs, results) if e is not None]
    if failed:
        revert_all([a for a, _ in results if a is not None], max_parallel=max_parallel)
        inj, e = failed[0]
        others = f" (and {len(failed) - 1} more node(s))" if len(failed) > 1 else ""
        msg = str(e)
        if isinstance(e, FaultlabError) and e.fix and msg.endswith(f" ({e.fix})"):
            msg = msg[: -len(f" ({e.fix})")]
        raise FanoutError(f"node {inj.node.name} failed{others}: {msg}; the {len(injs) - len(failed)} node(s) applied were reverted",
                          field="--node", fix=getattr(e, "fix", None) or "fix that node, or leave it out of --node") from e
    return [a for a, _ in results]


def revert_all(actives: list, *, max_parallel: int = 10) -> list[str]:
    """Revert every ActiveFault in parallel; returns their statuses."""
    if not actives:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(actives)))) as pool:
        return list(pool.map(lambda a: a.revert(), actives))
