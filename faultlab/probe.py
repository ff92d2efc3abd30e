"""A small TCP throughput probe between two nodes (loopback or test hosts only).

``python -m faultlab.probe sink --bind ADDR`` listens on an ephemeral port, prints
``{"port": P, "token": T}``, receives the first connection that sends the token to its
end and prints ``{"bytes": N, "elapsed_s": T, "bit_per_s": R}`` measured at the
receiver from the first to the last byte after the token.
``python -m faultlab.probe send --addr A --port P --bytes N`` reads the token on
stdin, sends it, then N bytes. ``measure_throughput`` drives both through the Node
interface.

The token (random, per probe) travels only through the two processes' pipes, never an
argv: anyone who reaches the node's address (another local user through the host's
bridge address, another node) may connect to the port first, and such a connection is
closed unmeasured while the sink waits for the sender's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import secrets
import selectors
import socket
import subprocess
import sys
import time

from faultlab.errors import NodeError


#: bytes of randomness in a probe's token; connections the sink reads tokens from at once
TOKEN_BYTES = 16
MAX_PENDING = 64
#: the most bytes read of a sink's output (two JSON lines of some 100 bytes), and of its
#: errors: a sink on an ssh node prints what that node's root chooses
SINK_OUTPUT_BYTES = 64 << 10


def _sink(bind: str, timeout_s: float) -> None:
    token = secrets.token_hex(TOKEN_BYTES).encode()
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind((bind, 0))
    srv.listen(MAX_PENDING)
    print(json.dumps({"port": srv.getsockname()[1], "token": token.decode()}), flush=True)
    conn = _sender_connection(srv, token, time.monotonic() + timeout_s)
    conn.settimeout(timeout_s)
    n, t0, t1 = 0, None, None
    buf = bytearray(1 << 16)
    while True:
        k = conn.recv_into(buf)
        if not k:
            break
        now = time.perf_counter()
        if t0 is None:
            t0 = now
        t1 = now
        n += k
    conn.close()
    srv.close()
    elapsed = (t1 - t0) if t0 is not None and t1 > t0 else float("nan")
    print(json.dumps({"bytes": n, "elapsed_s": elapsed, "bit_per_s": n * 8 / elapsed if elapsed == elapsed and elapsed > 0 else None}), flush=True)


def _sender_connection(srv: socket.socket, token: bytes, deadline: float) -> socket.socket:
    """The first connection to ``srv`` that sends ``token``, read from every pending
    connection at once (at most :data:`MAX_PENDING`, the oldest dropped); others are
    closed. Raises TimeoutError at ``deadline`` (monotonic s)."""
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ)
    got: dict[socket.socket, bytes] = {}
    try:
        while (left := deadline - time.monotonic()) > 0:
            for key, _ in sel.select(left):
                if key.fileobj is srv:
                    c, _ = srv.accept()
                    c.setblocking(False)
                    got[c] = b""
                    sel.register(c, selectors.EVENT_READ)
                    if len(got) > MAX_PENDING:
                        _drop(sel, got, next(iter(got)))
                    continue
                c = key.fileobj
                data = c.recv(len(token) - len(got[c]))
                if not data or not token.startswith(got[c] + data):
                    _drop(sel, got, c)
                    continue
                got[c] += data
                if got[c] == token:
                    sel.unregister(c)
                    del got[c]
                    c.setblocking(True)
                    return c
        raise TimeoutError("no connection sent the probe's token in time")
    finally:
        for c in list(got):
            _drop(sel, got, c)
        sel.close()


def _drop(sel: selectors.BaseSelector, got: dict, c: socket.socket) -> None:
    sel.unregister(c)
    del got[c]
    c.close()


def _send(addr: str, port: int, nbytes: int, timeout_s: float) -> None:
    token = sys.stdin.buffer.readline().strip()
    s = socket.create_connection((addr, port), timeout=timeout_s)
    s.sendall(token)
    chunk = b"\0" * (1 << 16)
    left = nbytes
    while left > 0:
        s.sendall(chunk[: min(left, len(chunk))])
        left -= min(left, len(chunk))
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()


def measure_throughput(sender, receiver, receiver_addr: str, nbytes: int, timeout_s: float = 30.0) -> dict:
    """Send ``nbytes`` bytes over TCP from node ``sender`` to node ``receiver`` (which
    listens on ``receiver_addr``). Returns ``{"bytes", "elapsed_s", "bit_per_s"}``
    measured at the receiver (first byte to last byte).

    Raises NodeError when the sink does not start or the transfer fails.
    """
    py = sys.executable  # -P below: the caller's cwd (anyone's folder) is not on sys.path
    sink = receiver.spawn([py, "-P", "-m", "faultlab.probe", "sink", "--bind", receiver_addr, "--timeout", str(timeout_s)], scope="net", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = sink.stdout.readline(SINK_OUTPUT_BYTES)
        try:
            first = json.loads(line)
            port, token = first["port"], first["token"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise NodeError(f"throughput sink did not start on {receiver.name}: "
                            f"{sink.stderr.read(SINK_OUTPUT_BYTES).decode(errors='replace')[-300:]}") from None
        cp = sender.run([py, "-P", "-m", "faultlab.probe", "send", "--addr", receiver_addr, "--port", str(port), "--bytes", str(nbytes), "--timeout", str(timeout_s)],
                        scope="net", timeout=timeout_s + 5, input=f"{token}\n".encode())
        if cp.returncode != 0:
            raise NodeError(f"throughput probe from {sender.name} to {receiver_addr} failed: {cp.stderr.strip()[-300:]}")
        return _measurement(sink.stdout.read(SINK_OUTPUT_BYTES + 1), receiver.name)
    finally:
        if sink.poll() is None:  # done with it (a sink on another node may outlive its kill there)
            sink.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                sink.wait(10)


def _measurement(out: bytes, node: str) -> dict:
    """The sink's last line as ``{"bytes", "elapsed_s", "bit_per_s"}``: a count, a
    finite time and a finite rate (or None), none negative. Raises NodeError (one line)
    for anything else: the sink's output is the receiving node's word."""
    lines = out[:SINK_OUTPUT_BYTES].decode(errors="replace").strip().splitlines() if len(out) <= SINK_OUTPUT_BYTES else []
    try:
        m = json.loads(lines[-1])
        ok = (isinstance(m, dict) and set(m) == {"bytes", "elapsed_s", "bit_per_s"} and type(m["bytes"]) is int and m["bytes"] >= 0
              and all(v is None or (type(v) in (int, float) and 0 <= v < math.inf) for v in (m["elapsed_s"], m["bit_per_s"]))
              and m["elapsed_s"] is not None)
    except (IndexError, ValueError, RecursionError):
        ok = False
    if not ok:
        raise NodeError(f"throughput sink on {node} answered no measurement ({len(out)} bytes)", field="node",
                        fix="check faultlab and python3 on that node")
    return m


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="faultlab.probe")
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("sink")
    a.add_argument("--bind", default="127.0.0.1")
    a.add_argument("--timeout", type=float, default=30.0)
    b = sub.add_parser("send")
    b.add_argument("--addr", required=True)
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--bytes", type=int, required=True)
    b.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args(argv)
    if args.cmd == "sink":
        _sink(args.bind, args.timeout)
    else:
        _send(args.addr, args.port, args.bytes, args.timeout)


if __name__ == "__main__":
    main()
