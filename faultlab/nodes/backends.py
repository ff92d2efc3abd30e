"""Testbeds by backend name (``netns``, ``docker``, ``ssh``), for the runner and the
``faultlab testbed`` commands.

``ssh`` is a docker testbed of *host-like* containers (see DockerTestbed) reached as
``SshNode`` s: sshd in each, the controller's testbed key, host keys pinned in the
testbed's known_hosts. It is how the ssh backend is tested on one machine; a real
cluster is reached through an inventory file instead (faultlab.nodes.inventory).
"""

from __future__ import annotations

from faultlab.errors import BadInput
from faultlab.nodes import extras
from faultlab.nodes.docker_testbed import DockerTestbed, recover_docker_testbeds
from faultlab.nodes.ssh import SshNode
from faultlab.nodes.testbed import NetnsTestbed, recover_netns_testbeds

BACKENDS = ("netns", "docker", "ssh")


class SshTestbed:
    """A DockerTestbed (host-like) whose nodes are reached over SSH."""

    backend = "ssh"

    def __init__(self, n_nodes: int = 4, tb_id: str | None = None):
        self.inner = DockerTestbed(n_nodes, tb_id, host_like=True)
        self.nodes: list = []

    def __getattr__(self, name):  # id, bridge, subnet, bridge_address, teardown_argv, paths
        return getattr(self.inner, name)

    def up(self) -> "SshTestbed":
        self.inner.up()
        try:
            self.nodes = ssh_nodes_of(self.inner)
        except BaseException:
            self.inner.down()
            raise
        return self

    def down(self) -> list[str]:
        for n in self.nodes:
            n.close()
        self.nodes = []
        return self.inner.down()

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()


def ssh_nodes_of(tb) -> list:
    """SshNodes of a docker testbed's containers (its key and known_hosts)."""
    return [SshNode(name=n.name, address=n.address, iface="eth0", user="root", key=str(tb.key_path), known_hosts=str(tb.known_hosts))
            for n in tb.nodes]


def make_testbed(backend: str, n_nodes: int, tb_id: str | None = None):
    """An (un-started) testbed of ``backend``. Raises BadInput naming ``--backend`` for
    an unknown backend or one whose Python package is not installed (before anything starts)."""
    extras.require(backend)
    if backend == "netns":
        return NetnsTestbed(n_nodes, tb_id)
    if backend == "docker":
        return DockerTestbed(n_nodes, tb_id)
    if backend == "ssh":
        return SshTestbed(n_nodes, tb_id)
    raise BadInput(f"unknown backend {backend!r}", field="--backend", fix=f"give one of {', '.join(BACKENDS)}")


def recover_testbeds(only_dead: bool = True) -> list[str]:
    """Tear down the testbeds of every backend whose controller is gone (all of them
    when ``only_dead`` is False), from state files that pass their checks only.
    Returns the ids removed; ``testbed.untrusted_states()`` names the files skipped."""
    return recover_netns_testbeds(only_dead) + recover_docker_testbeds(only_dead)
