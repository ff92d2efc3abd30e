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

What the sink prints is its node's word (over ssh, whoever is root there writes it):
``measure_throughput`` reads it a line at a time, at most :data:`LINE_BYTES` a line,
until the probe's deadline, and takes only a port and a token, then a measure, each of
its shape; anything else is one NodeError line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import secrets
import selectors
import socket
import subprocess
import sys
import threading
import time

from faultlab.errors import NodeError


#: bytes of randomness in a probe's token; connections the sink reads tokens from at once
TOKEN_BYTES = 16
MAX_PENDING = 64
#: bytes of a line the sink prints (its port and token, then its measure: some 100),
#: and of what the sender prints (nothing, or its error): a sink on an ssh node prints
#: what that node's root chooses
LINE_BYTES = 4096


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
    closed, and one that fails (reset by its peer) is dropped alone: the sink goes on.
    Raises TimeoutError at ``deadline`` (monotonic s)."""
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ)
    got: dict[socket.socket, bytes] = {}
    try:
        while (left := deadline - time.monotonic()) > 0:
            for key, _ in sel.select(left):
                if key.fileobj is srv:
                    try:
                        c, _ = srv.accept()
                    except OSError:  # gone before it was taken (ECONNABORTED), or no descriptor left
                        continue
                    c.setblocking(False)
                    got[c] = b""
                    sel.register(c, selectors.EVENT_READ)
                    if len(got) > MAX_PENDING:
                        _drop(sel, got, next(iter(got)))
                    continue
                c = key.fileobj
                try:
                    data = c.recv(len(token) - len(got[c]))
                except OSError:  # reset by its peer (anyone may connect, then send a RST): that one only is dropped
                    data = b""
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
    deadline = time.monotonic() + timeout_s
    sink = receiver.spawn([py, "-P", "-m", "faultlab.probe", "sink", "--bind", receiver_addr, "--timeout", str(timeout_s)], scope="net", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = _json_line(sink.stdout, deadline)
        if not (isinstance(first, dict) and _is_int(first.get("port")) and 0 < first["port"] < 65536
                and isinstance(first.get("token"), str) and re.fullmatch(f"[0-9a-f]{{{2 * TOKEN_BYTES}}}", first["token"])):
            err = _within(lambda: sink.stderr.read(LINE_BYTES), time.monotonic() + 1) or b""
            raise NodeError(f"throughput sink did not start on {receiver.name}: {err.decode(errors='replace')[-300:]}")
        cp = sender.run([py, "-P", "-m", "faultlab.probe", "send", "--addr", receiver_addr, "--port", str(first["port"]), "--bytes", str(nbytes), "--timeout", str(timeout_s)],
                        scope="net", timeout=timeout_s + 5, input=f"{first['token']}\n".encode(), limit=LINE_BYTES)
        if cp.returncode != 0:
            raise NodeError(f"throughput probe from {sender.name} to {receiver_addr} failed: {cp.stderr.strip()[-300:]}")
        got = _json_line(sink.stdout, time.monotonic() + timeout_s)
        if not (isinstance(got, dict) and _is_int(got.get("bytes")) and got["bytes"] >= 0 and _is_measure(got.get("elapsed_s"))
                and (got.get("bit_per_s") is None or _is_measure(got["bit_per_s"]))):
            raise NodeError(f"the throughput sink on {receiver.name} answered no measurement of {{bytes, elapsed_s, bit_per_s}}",
                            field="node", fix="check faultlab and python3 on that node")
        return {k: got.get(k) for k in ("bytes", "elapsed_s", "bit_per_s")}
    finally:
        if sink.poll() is None:  # done with it (a sink on another node may outlive its kill there)
            sink.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                sink.wait(10)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_measure(v) -> bool:
    """A finite number of at least 0 (JSON's NaN and Infinity are numbers to Python)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _within(read, deadline: float):
    """What ``read()`` returns, run in a helper thread and waited for until ``deadline``
    (monotonic s); None past it or when it raises. A read of another node's output may
    block for good (an ssh channel has no timeout then): the thread is left to it."""
    got = []

    def run():
        with contextlib.suppress(OSError, ValueError):
            got.append(read())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
    return got[0] if got else None


def _json_line(stream, deadline: float):
    """The JSON value of the next line of ``stream`` (at most :data:`LINE_BYTES`),
    read until ``deadline``; None when it is not one in time."""
    line = _within(lambda: stream.readline(LINE_BYTES + 1), deadline)
    if not line or len(line) > LINE_BYTES:
        return None
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


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
