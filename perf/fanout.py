"""Fan-out speed: inject and revert one nic-slow fault on 16 SSH nodes vs on 1.

One command (root; dockerd, debootstrap and sshd as in .ci/run):

    python3 perf/fanout.py [--nodes 16] [--repeat 3] [--max-parallel 10]

brings up an ssh testbed of N host-like containers (faultlab.nodes.backends), then, for
1 node and for all N, times with fresh connections (each round builds new SshNode
objects, so connecting, host-key checking and authenticating are counted): probe,
lease (record + watchdog on each node), inject, then revert and the removal checks,
through faultlab.lifecycle.fanout (at most --max-parallel nodes at once). Prints the
median wall time of each and the ratio; target: N=16 within 5 s on a 2-core machine.
Tears everything down.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def one_round(tb, k: int, max_parallel: int) -> tuple[float, float]:
    from faultlab import injectors
    from faultlab.nodes.backends import ssh_nodes_of
    from faultlab.lifecycle.fanout import apply_all, revert_all

    nodes = ssh_nodes_of(tb.inner)[:k]
    t0 = time.perf_counter()
    injs = [injectors.build("nic-slow", n, target="eth0", duration_s=60, opts={"--rate": "50mbit"}) for n in nodes]
    actives = apply_all(injs, 60, verify=False, max_parallel=max_parallel)
    t1 = time.perf_counter()
    st = revert_all(actives, max_parallel=max_parallel)
    t2 = time.perf_counter()
    assert st == ["reverted"] * k, st
    for n in nodes:
        n.close()
    return t1 - t0, t2 - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-parallel", type=int, default=10)
    ap.add_argument("--json", dest="as_json", action="store_true")
    a = ap.parse_args()
    from faultlab.nodes.backends import SshTestbed

    tb = SshTestbed(a.nodes)
    t = time.perf_counter()
    tb.up()
    up_s = time.perf_counter() - t
    res = {}
    try:
        for k in (1, a.nodes):
            rounds = [one_round(tb, k, a.max_parallel) for _ in range(a.repeat)]
            res[k] = {"inject_s": statistics.median(r[0] for r in rounds), "revert_s": statistics.median(r[1] for r in rounds),
                      "total_s": statistics.median(r[0] + r[1] for r in rounds)}
    finally:
        errs = tb.down()
    out = {"nodes": a.nodes, "max_parallel": a.max_parallel, "repeat": a.repeat, "testbed_up_s": round(up_s, 2),
           "one_node": {k: round(v, 3) for k, v in res[1].items()}, "all_nodes": {k: round(v, 3) for k, v in res[a.nodes].items()},
           "ratio_total": round(res[a.nodes]["total_s"] / res[1]["total_s"], 2), "teardown_errors": errs}
    if a.as_json:
        print(json.dumps(out, indent=1))
        return
    print(f"testbed up: {a.nodes} ssh nodes in {up_s:.1f}s")
    print(f"{'nodes':>5}  {'inject s':>9}  {'revert s':>9}  {'total s':>8}   (median of {a.repeat}, fresh connections, max {a.max_parallel} at once)")
    for k in (1, a.nodes):
        r = res[k]
        print(f"{k:>5}  {r['inject_s']:9.2f}  {r['revert_s']:9.2f}  {r['total_s']:8.2f}")
    print(f"ratio {a.nodes} nodes / 1 node: {out['ratio_total']:.2f}x; target {a.nodes} nodes <= 5 s: "
          f"{'met' if res[a.nodes]['total_s'] <= 5 else 'NOT met'}")


if __name__ == "__main__":
    main()
