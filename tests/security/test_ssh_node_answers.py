"""What an ssh node answers costs root's controller bounded memory and time, and reaches
its terminal printable only.

The node here is a real SSH server on 127.0.0.1 (paramiko in server mode, in this
process) that answers each command as the node's root may: faultlab's commands run
there in the node's shell, so the node's root chooses every byte they print, how long
they print, and which of its processes look like faultlab's watchdogs.
"""

from __future__ import annotations

import io
import json
import re
import resource
import socket
import subprocess
import threading
import time
from collections.abc import Callable

import psutil
import pytest
from rich.console import Console

from faultlab.errors import NodeError
from faultlab.lifecycle import remotecmds
from faultlab.nodes import base, ssh
from tests.helpers import FL

paramiko = pytest.importorskip("paramiko")
from tests.ssh_answering import Answer, AnsweringNodes  # noqa: E402 - after the skip without paramiko

ESC = "\x1b"


@pytest.fixture
def node_answering(tmp_path):
    """``start(answer) -> inventory path``: an SSH server on a loopback port whose host
    key is pinned, answering every command with ``answer(command line)``."""
    nodes = AnsweringNodes(tmp_path)
    yield nodes
    nodes.close()


def _ssh_node(inventory) -> ssh.SshNode:
    from faultlab.nodes import inventory as inv_mod

    inv = inv_mod.load(inventory)
    return inv_mod.ssh_nodes(inv, inv.select(None))[0]


def _fl_limited(*args, mem: str = "2G", timeout: float = 180) -> subprocess.CompletedProcess:
    """``faultlab ARGS`` with its address space limited to ``mem``."""
    return subprocess.run(["prlimit", f"--as={_bytes(mem)}", "--", *FL, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def _bytes(mem: str) -> int:
    return int(mem[:-1]) << {"M": 20, "G": 30}[mem[-1]]


def _endless_rows(total: int):
    """``total`` bytes of ``"1 1\\n"`` rows, 1 MiB at a time."""
    chunk = b"1 1\n" * (1 << 18)
    for _ in range(total // len(chunk)):
        yield chunk


def test_a_nodes_endless_command_output_is_refused_past_its_bound(node_answering):
    """The node answers faultlab's watchdog scan with 512 MiB of rows: root's `status
    --inventory` (its address space limited to 2 GiB) stops reading past
    ``ssh.OUTPUT_BYTES`` and says so in one line naming the node, no traceback (it read
    it all: 8.5 GB of RSS for 55 s of such output, or a MemoryError here)."""
    inv = node_answering(lambda cmd: (_endless_rows(512 << 20), b"", 0) if "faultlab-watchdog" in cmd else (b"", b"", 0))
    t0 = time.monotonic()
    cp = _fl_limited("status", "--inventory", inv, "--all-nodes")
    assert cp.returncode == 1, (cp.returncode, cp.stderr[-2000:])
    assert "Traceback" not in cp.stderr and cp.stderr.count("\n") == 1, cp.stderr[-2000:]
    assert "evil" in cp.stderr and f"more than {ssh.OUTPUT_BYTES} bytes" in cp.stderr, cp.stderr
    assert time.monotonic() - t0 < 120


def test_a_nodes_first_line_without_end_or_never_sent_does_not_hold_the_controller(node_answering):
    """A process started on the node (a rank, the throughput sink) is known by the PID
    its shell echoes first: a node that answers with an endless line, or with nothing,
    is a one-line NodeError within the command timeout, never a read without end."""
    def answer(cmd):
        if "never" in cmd:
            return ((time.sleep(s) or b"" for s in [40]), b"", 0)  # holds the channel open 40 s, sends nothing
        return ((b"7" * (1 << 20) for _ in range(256)), b"", 0)  # 256 MiB, no newline

    node = _ssh_node(node_answering(answer))
    node.command_timeout_s = 5
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for argv in (["endless"], ["never"]):
        t0 = time.monotonic()
        with pytest.raises(NodeError, match="could not start"):
            node.spawn(argv, stdout=subprocess.PIPE)
        assert time.monotonic() - t0 < 30, argv
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 64 << 20
    node.close()


def _watchdog_answer(stem: str, deadline: str) -> Callable[[str], Answer]:
    """A node whose root runs one look-alike of a watchdog: PID 4242, argv
    ``sh -c x faultlab-watchdog /run/faultlab/leases/STEM.json DEADLINE true``, which
    no signal ends (``kill -0`` finds it alive)."""
    argv = ["sh", "-c", "x", "faultlab-watchdog", f"/run/faultlab/leases/{stem}.json", deadline, "true"]

    def answer(cmd):
        if "grep -l -a -F -- faultlab-watchdog" in cmd:
            return (b"4242 1\n", b"", 0)
        if "/proc/4242/cmdline" in cmd:
            return (("\0".join(argv) + "\0").encode(), b"", 0)
        return (b"", b"", 0)

    return answer


@pytest.mark.parametrize("deadline", ["\u00b2", "9" * 400, "1" * 40], ids=["superscript-two", "400-digits", "40-digits"])
def test_a_watchdog_look_alikes_deadline_is_read_as_a_watchdogs_is(node_answering, deadline):
    """A watchdog's deadline is whole unix seconds, ASCII digits: ``²`` (a digit to
    ``str.isdigit``, no number to ``float``) and 400 digits (infinity) ended root's
    `status --inventory` in a traceback. Such a process is no watchdog of faultlab's."""
    inv = node_answering(_watchdog_answer("nic-abcd", deadline))
    cp = _fl_limited("status", "--inventory", inv, "--all-nodes")
    assert "Traceback" not in cp.stderr, cp.stderr[-2000:]
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert "nic-abcd" not in cp.stdout, cp.stdout


def test_a_watchdog_look_alikes_record_name_never_reaches_roots_terminal(node_answering):
    """The node's root names its look-alike's record with escape sequences (an OSC
    title, a screen clear): its name is no fault id, so it is no watchdog of faultlab's,
    `revert --all --inventory` has nothing to revert, and no ESC reaches root's
    terminal (the name was printed raw in the error line, after a 60 s wait)."""
    inv = node_answering(_watchdog_answer(f"x{ESC}]0;pwned{ESC}\\{ESC}[2Jy", "2000000000"))
    cp = _fl_limited("revert", "--all", "--inventory", inv, "--all-nodes")
    assert ESC not in cp.stdout + cp.stderr, repr(cp.stderr[-500:])
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert re.search(r"no fault in force", cp.stdout), cp.stdout


def test_an_ssh_ranks_output_reaches_its_log_up_to_the_bound(node_answering, tmp_path, monkeypatch):
    """A rank's output on an ssh node is the node's to choose: it reaches the rank's log
    on this host up to ``base.MAX_LOG_BYTES`` (1 MiB here) and one line saying the rest
    was dropped, as a docker rank's does: copied whole (64 MiB here, without end for a
    node that keeps printing), it would fill this host's disk."""
    monkeypatch.setattr(base, "MAX_LOG_BYTES", 1 << 20, raising=False)
    node = _ssh_node(node_answering(lambda cmd: ((c for c in [b"4321\n", *(b"x" * (1 << 20) for _ in range(64))]), b"", 0)))
    log = tmp_path / "rank0.log"
    with open(log, "wb") as out:
        p = node.spawn(["rank"], stdout=out)
    assert p.pid == 4321
    assert p.wait(120) == 0
    assert (1 << 20) <= log.stat().st_size <= (1 << 20) + 100, log.stat().st_size
    assert log.read_bytes().endswith(b"bytes dropped]\n")
    node.close()


@pytest.mark.parametrize("last", [b"[]\n", b'{"bytes": 1, "elapsed_s": 1, "bit_per_s": "fast"}\n', b"[" * 60000 + b"\n",
                                  b"9" * (256 << 20)], ids=["a-list", "a-rate-of-text", "nested", "256-MiB"])
def test_a_throughput_sinks_answer_on_an_ssh_node_is_a_measurement_or_one_error(node_answering, last):
    """nic-slow's verify measures the throughput into the faulted node through a sink
    started there, whose output is that node's word: the sink here names a port the
    test listens on (the real sender on this host sends to it), then answers with a
    list, a rate of text, JSON nested past Python's recursion limit, or 256 MiB. Each is
    one NodeError, read no further than a line of ``probe.LINE_BYTES``: a list or a
    rate of text taken as a measurement ends verify in a traceback, and 256 MiB read
    whole is the node's to size."""
    from faultlab import probe
    from faultlab.nodes.local import LocalNode

    lsn = socket.socket()
    lsn.bind(("127.0.0.1", 0))
    lsn.listen(1)
    got = threading.Event()

    def receive():
        c, _ = lsn.accept()
        while c.recv(65536):
            pass
        c.sendall(b"k")
        c.close()
        got.set()

    threading.Thread(target=receive, daemon=True).start()

    def sink_output():
        yield b"4321\n" + json.dumps({"port": lsn.getsockname()[1], "token": "0" * 32}).encode() + b"\n"
        got.wait(60)
        for i in range(0, len(last), 1 << 20):
            yield last[i:i + (1 << 20)]

    node = _ssh_node(node_answering(lambda cmd: (sink_output(), b"", 0)))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(NodeError, match="no measurement"):
        probe.measure_throughput(LocalNode("host"), node, "127.0.0.1", 1 << 16, timeout_s=30)
    assert got.is_set()
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 64 << 20
    node.close()
    lsn.close()


def test_a_nodes_countless_watchdogs_and_records_cost_a_bounded_number_of_commands(node_answering):
    """Each watchdog candidate and each lease record the node lists costs root one
    command there: the node's root lists 2,000 of each (a few hundred KB, within
    ``ssh.OUTPUT_BYTES``). Root's `status --inventory` looks at ``MAX_ON_NODE`` of each
    and names the rest in one warning line each; it ran a command for every one."""
    from faultlab.lifecycle.lease_remote import MAX_ON_NODE

    commands = []

    def answer(cmd):
        commands.append(cmd)
        if "grep -l -a -F -- faultlab-watchdog" in cmd:
            return ("".join(f"{100 + i} 1\n" for i in range(2000)).encode(), b"", 0)
        if '"$1"/*.json' in cmd:
            return ("".join(f"/run/faultlab/leases/nic-{i:04x}.json\n" for i in range(2000)).encode(), b"", 0)
        if "/cmdline" in cmd:
            return (b"sleep\x00600\x00", b"", 0)
        return (b"", b"no such file\n", 4)

    cp = _fl_limited("status", "--inventory", node_answering(answer), "--all-nodes", timeout=600)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert len(commands) <= 2 * MAX_ON_NODE + 20, len(commands)
    assert "2000 processes named like a watchdog" in cp.stderr and "2000 records;" in cp.stderr, cp.stderr[-2000:]


def _in_thread(call, wait_s: float):
    """``call()`` in a daemon thread joined for ``wait_s``: (finished, what it raised)."""
    raised = []

    def go():
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            raised.append(e)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(wait_s)
    return not t.is_alive(), raised


@pytest.mark.parametrize("how", ["run", "spawn"])
def test_a_nodes_sshd_that_never_answers_a_command_is_one_error_within_the_command_timeout(node_answering, how):
    """The node's root runs its own sshd, which never answers faultlab's request to run
    a command (here for 60 s): a command, or a process started there, is one NodeError
    within the command timeout (5 s). paramiko waits for that answer with no timeout,
    so every command on such a node, and root's `status --inventory` with it, waited for
    good."""
    def answer(cmd):
        if "never-answered" in cmd:
            time.sleep(60)  # in the server's transport thread: no answer to the exec request
        return (b"", b"", 0)

    node = _ssh_node(node_answering(answer))
    node.command_timeout_s = 5
    call = {"run": lambda: node.run(["never-answered"]), "spawn": lambda: node.spawn(["never-answered"], stdout=subprocess.PIPE)}[how]
    t0 = time.monotonic()
    finished, raised = _in_thread(call, 30)
    assert finished, "still waiting for the node after 30 s"
    assert raised and isinstance(raised[0], NodeError), raised
    assert time.monotonic() - t0 < 20
    node.close()


def test_a_first_line_sent_a_byte_at_a_time_is_one_error_within_the_command_timeout(node_answering):
    """A process started on the node is known by the PID its shell echoes first, read
    within the command timeout (5 s): the node sends it one digit every 3 s (each read
    within its own timeout), which held the caller 36 s here and up to 64 command
    timeouts (an hour at the default 60 s). It is one NodeError within the timeout."""
    def digits():
        yield b"4"
        for _ in range(12):
            time.sleep(3)
            yield b"2"
        yield b"\n"

    def answer(cmd):
        return (digits(), b"", 0)

    node = _ssh_node(node_answering(answer))
    node.command_timeout_s = 5
    t0 = time.monotonic()
    finished, raised = _in_thread(lambda: node.spawn(["trickle"], stdout=subprocess.PIPE), 60)
    took = time.monotonic() - t0
    assert finished and raised and isinstance(raised[0], NodeError), (took, raised)
    assert took < 15, took
    node.close()


def test_a_node_that_answers_each_command_slowly_holds_a_look_at_its_faults_a_bounded_time(node_answering, monkeypatch):
    """Each watchdog candidate the node lists costs a command there, which the node's
    root may make last up to the command timeout: at 60 s for each of ``MAX_ON_NODE``
    candidates and records, root's `status --inventory` would wait some 8 hours. Here 40
    candidates are answered a second each: the look stops at its budget (``VIEW_S``,
    5 s here) with one problem line; it took 40 s."""
    from faultlab.lifecycle import remoteview

    monkeypatch.setattr(remoteview, "VIEW_S", 5.0, raising=False)

    def answer(cmd):
        if "grep -l -a -F -- faultlab-watchdog" in cmd:
            return ("".join(f"{100 + i} 1\n" for i in range(40)).encode(), b"", 0)
        if "/cmdline" in cmd:
            time.sleep(1)
            return (b"sleep\x00600\x00", b"", 0)
        return (b"", b"", 0)

    node = _ssh_node(node_answering(answer))
    t0 = time.monotonic()
    faults, problems = remoteview.remote_view(node)
    took = time.monotonic() - t0
    assert took < 20, took
    assert faults == [] and any("answered too slowly" in p for p in problems), problems
    node.close()


def test_a_node_that_grants_its_input_a_byte_at_a_time_is_one_error_within_the_command_timeout(node_answering):
    """What root sends a command on the node (a lease record, its renewed deadline, the
    probe's token) goes as the node's sshd grants it room, and paramiko waits for each
    grant up to the command timeout: a node granting one byte every 2 s held a write of
    12 bytes 24 s past a 5 s timeout (at the default 60 s, a record of 1,000 bytes some
    16 hours). It is one NodeError within the timeout."""
    def slow_reader(channel):
        while channel.recv(1):
            time.sleep(2)
        channel.send_exit_status(0)
        channel.shutdown_write()

    node = _ssh_node(node_answering(lambda cmd: slow_reader, window=1))
    node.command_timeout_s = 5
    t0 = time.monotonic()
    finished, raised = _in_thread(lambda: node.write_file("/run/faultlab/leases/x.json", b"x" * 12), 60)
    took = time.monotonic() - t0
    assert finished and raised and isinstance(raised[0], NodeError), (took, raised)
    assert took < 15, took
    node.close()


def test_a_nodes_watchdogs_that_never_end_hold_a_revert_of_its_faults_a_bounded_time(node_answering, monkeypatch):
    """`revert --all --inventory` waits a minute for each fault's watchdog to end. The
    node's root lists look-alikes of watchdogs of valid fault ids that no signal ends,
    answering every command at once: each cost root's revert its minute (3 took 182 s,
    ``MAX_ON_NODE`` of them some 4 hours). All of a node's faults are waited for at most
    ``REVERT_S`` (5 s here) together; the rest are left, each saying so."""
    monkeypatch.setattr(remotecmds, "REVERT_S", 5.0, raising=False)
    argvs = {4242 + i: ["sh", "-c", "x", "faultlab-watchdog", f"/run/faultlab/leases/nic-{i:04x}.json", "2000000000", "true"]
             for i in range(3)}

    def answer(cmd):
        if "grep -l -a -F -- faultlab-watchdog" in cmd:
            return ("".join(f"{pid} 1\n" for pid in argvs).encode(), b"", 0)
        for pid, argv in argvs.items():
            if f"/proc/{pid}/cmdline" in cmd:
                return (("\0".join(argv) + "\0").encode(), b"", 0)
        return (b"", b"", 0)

    node = _ssh_node(node_answering(answer))
    printed = Console(record=True, width=400, file=io.StringIO())
    t0 = time.monotonic()
    rc = remotecmds.revert([node], None, printed, False)
    took = time.monotonic() - t0
    lines = printed.export_text().splitlines()
    assert rc == 1 and took < 30, (rc, took)
    assert len([ln for ln in lines if "NOT reverted" in ln]) == 3, lines
    node.close()


def test_a_node_that_ignores_the_window_costs_root_a_bounded_buffer(node_answering):
    """The node's sshd may send a channel only as much as root's client grants (the
    window, which grows back as root reads), but paramiko buffers whatever arrives:
    a node flooding the stderr of a process started with ``stdout=PIPE`` (the
    throughput sink's), which nobody reads meanwhile, put 3.2 GiB into root's
    controller in 10 s. What is held unread is bounded by the window."""
    def flood(channel):
        channel.sendall(b"4242\n")
        end = time.monotonic() + 3
        try:
            while time.monotonic() < end:
                channel.out_window_size = 1 << 40  # the window root granted, ignored
                channel.sendall_stderr(b"e" * 32000)
        except (OSError, EOFError):
            pass

    node = _ssh_node(node_answering(lambda cmd: flood))
    me = psutil.Process()
    before = me.memory_info().rss
    node.spawn(["sink"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(4)
    grown = me.memory_info().rss - before
    node.close()
    assert grown < 128 << 20, f"root's controller grew {grown >> 20} MiB"


def test_a_node_that_ignores_the_window_in_the_sudo_check_costs_root_a_bounded_buffer(node_answering):
    """An inventory node with ``sudo: true`` is asked ``sudo -n -- true`` as soon as root
    connects to it (status, revert, recover, run), on a channel of its own. The node's
    sshd that ignores the window and floods that command's stderr, sending no stdout,
    had whatever arrived in a second (each wait of the read) buffered in root's
    controller before it was looked at. The check is refused in one line and what root
    holds unread is bounded by the window, as on every other channel."""
    def flood(channel):
        end = time.monotonic() + 4
        try:
            while time.monotonic() < end:
                channel.out_window_size = 1 << 40  # the window root granted, ignored
                channel.sendall_stderr(b"e" * 32000)
        except (OSError, EOFError):
            pass

    inv = node_answering(lambda cmd: flood)
    inv.write_text(inv.read_text().replace("command_timeout_s: 60}", "command_timeout_s: 10, sudo: true}"))
    node = _ssh_node(inv)
    me = psutil.Process()
    before, peak, done = me.memory_info().rss, [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], me.memory_info().rss)
            time.sleep(0.01)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        with pytest.raises(NodeError) as e:
            node.connect()
    finally:
        done.set()
        t.join(5)
        node.close()
    assert "sudo -n refused" in str(e.value) and "\n" not in str(e.value), str(e.value)
    grown = peak[0] - before
    assert grown < 96 << 20, f"root's controller grew {grown >> 20} MiB during the sudo check"


def _stalling_proxy(listen: socket.socket, port: int, stalled: threading.Event) -> None:
    """Forward root's connection to the server on ``port``; once ``stalled`` is set, read
    nothing more from root (what a node's sshd that stops reading its socket does)."""
    import select

    c, _ = listen.accept()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s = socket.create_connection(("127.0.0.1", port))

    def up():
        while True:
            if stalled.is_set():
                time.sleep(0.5)
                continue
            if select.select([c], [], [], 0.05)[0]:
                d = c.recv(65536)
                if not d:
                    return
                s.sendall(d)

    def down():
        try:
            while d := s.recv(65536):
                c.sendall(d)
        except OSError:
            pass

    threading.Thread(target=up, daemon=True).start()
    threading.Thread(target=down, daemon=True).start()


def test_a_node_that_stops_reading_while_making_root_answer_costs_a_command_its_timeout(node_answering):
    """paramiko's client answers each global request that wants a reply, in its one
    transport thread, whose writes retry for as long as the socket is open. A node's
    sshd that sends such requests and stops reading its socket filled root's side and
    blocked that thread for good: the command (5 s timeout) and every later one on the
    connection were still running a minute on. Unsent data now waits at most the
    command timeout (TCP_USER_TIMEOUT), and the command is one NodeError line."""
    from paramiko.common import cMSG_GLOBAL_REQUEST
    from paramiko.message import Message

    stalled = threading.Event()

    def flood(channel):
        stalled.set()
        t = channel.get_transport()
        try:
            for _ in range(400_000):
                m = Message()
                m.add_byte(cMSG_GLOBAL_REQUEST)
                m.add_string("keepalive@node")
                m.add_boolean(True)  # want a reply
                t._send_user_message(m)
        except (OSError, EOFError):
            pass

    inv = node_answering(lambda cmd: flood if "flood" in cmd else (b"", b"", 0))
    port = int(re.search(r"port: (\d+),", inv.read_text())[1])
    listen = socket.socket()
    listen.bind(("127.0.0.1", 0))
    listen.listen(1)
    mine = listen.getsockname()[1]
    inv.write_text(inv.read_text().replace(f"port: {port},", f"port: {mine},").replace("command_timeout_s: 60}", "command_timeout_s: 5}"))
    kh = inv.parent / "known_hosts"
    kh.write_text(kh.read_text().replace(f"]:{port} ", f"]:{mine} "))
    threading.Thread(target=_stalling_proxy, args=(listen, port, stalled), daemon=True).start()
    node = _ssh_node(inv)
    assert node.run(["true"]).returncode == 0
    got: dict = {}

    def command():
        t = time.monotonic()
        try:
            node.run(["flood"])
            got["r"] = "returned"
        except NodeError as e:
            got["r"] = str(e)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            got["r"] = f"{type(e).__name__}: {e}"
        got["t"] = time.monotonic() - t

    t = threading.Thread(target=command, daemon=True)
    t.start()
    t.join(45)
    listen.close()
    assert got, "root's 5 s command on the node was still running 45 s on"
    assert "ssh node evil" in got["r"] and "\n" not in got["r"], got["r"]
