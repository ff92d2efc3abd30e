"""The docker node image, built offline from Debian (no registry needed).

``debootstrap --variant=minbase --include=python3,openssh-server,iproute2,procps,sudo
bookworm`` from the Debian mirror (reachable through apt even where no image registry
is), packed into a tarball cached at ``/var/cache/faultlab/node-bookworm-2.tar`` (or
``$FAULTLAB_CACHE_DIR``), then ``docker import --change CMD`` (import drops CMD). The
image tag and the tarball carry one revision number, raised whenever ``PACKAGES``
changes, so a cache of an older package set is never taken for this one. ``sudo`` is
in because ssh nodes are often reached as a non-root user with passwordless sudo (the
image has no sudoers rule: a test or an operator adds one).
No host keys are in the image: each container makes its own at start
(``ssh-keygen -A``) and then runs ``sshd -D``.

The workload's Python dependencies (torch, numpy, pandas, faultlab itself) are *not*
installed into the image: the controller's interpreter prefix and faultlab's source
folder are bind-mounted read-only at the same paths (see ``workload_mounts``), so a
rank in a container runs exactly the torch the host runs. This needs a host whose
Python is not the distribution's ``/usr`` (pyenv, a venv on one, /opt, /usr/local)
and a glibc no newer than bookworm's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import faultlab
from faultlab import workdirs
from faultlab.errors import FaultlabError
from faultlab.nodes.dockerd import docker_host

REVISION = 2
IMAGE = f"faultlab/node:bookworm-{REVISION}"
PACKAGES = ["python3", "openssh-server", "iproute2", "procps", "sudo"]
MIRROR = os.environ.get("FAULTLAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: PID 1 of a node: per-container host keys, then sshd in the foreground
CMD = '["/bin/sh","-c","ssh-keygen -A >/dev/null && mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e"]'


def cache_dir() -> Path:
    return Path(os.environ.get("FAULTLAB_CACHE_DIR", "/var/cache/faultlab"))


def tarball() -> Path:
    return cache_dir() / f"node-bookworm-{REVISION}.tar"


def build_tarball(log=None) -> Path:
    """debootstrap the node root into the cache (about 40 s with a near mirror).
    Raises FaultlabError when debootstrap is missing or fails."""
    exe = shutil.which("debootstrap")
    if exe is None:
        raise FaultlabError("debootstrap not found (needed once, to build the node image)", field="--backend", fix="apt-get install debootstrap")
    out = tarball()
    out.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    with workdirs.private("faultlab-rootfs-", out.parent) as tmp:  # named for this process: a later build removes a killed one's
        root = tmp / "root"
        cp = subprocess.run([exe, "--variant=minbase", f"--include={','.join(PACKAGES)}", "bookworm", str(root), MIRROR],
                            capture_output=True, text=True, timeout=1200)
        if cp.returncode != 0:
            tail = (cp.stderr.strip() or cp.stdout.strip()).splitlines()[-1:] or ["?"]
            raise FaultlabError(f"debootstrap failed: {tail[0]}", field="--backend", fix=f"check that {MIRROR} is reachable (FAULTLAB_DEBIAN_MIRROR)")
        for junk in ["var/cache/apt/archives", "var/lib/apt/lists"]:
            for p in (root / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        for p in (root / "etc/ssh").glob("ssh_host_*"):
            p.unlink()  # host keys are made per container at start
        part = out.with_suffix(".tar.part")
        subprocess.run(["tar", "-C", str(root), "-cf", str(part), "."], check=True, timeout=600)
        os.replace(part, out)
    return out


def ensure_image(client) -> str:
    """The node image tag, importing it from the cached tarball (built first when
    missing). Idempotent; the image is kept between testbeds (``testbed down``
    leaves it)."""
    import docker  # optional dependency (faultlab[docker]): only docker testbeds need it

    try:
        client.images.get(IMAGE)
        return IMAGE
    except docker.errors.ImageNotFound:
        pass
    tb = tarball()
    if not tb.exists():
        build_tarball()
    cp = subprocess.run(["docker", "-H", _host(), "import", "--change", f"CMD {CMD}", str(tb), IMAGE],
                        capture_output=True, text=True, timeout=600) if shutil.which("docker") else None
    if cp is None or cp.returncode != 0:
        with open(tb, "rb") as f:  # the SDK's import: same result without the CLI
            client.api.import_image_from_data(f, repository=IMAGE.split(":")[0], tag=IMAGE.split(":")[1], changes=[f"CMD {CMD}"])
    return IMAGE


def _host() -> str:
    return docker_host()


def workload_mounts() -> dict[str, dict]:
    """Read-only bind mounts that let a container run the controller's Python and
    faultlab: the interpreter prefixes and faultlab's source folder, at the same
    paths. They stay read-only because no node holds CAP_SYS_ADMIN (its root, host
    uid 0, could remount them; see docs/security.md). Raises FaultlabError when the
    interpreter lives in ``/usr`` (mounting it would hide the container's own system)."""
    src = Path(faultlab.__file__).resolve().parent.parent
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), src}
    for p in list(paths):
        if str(p) in ("/", "/usr", "/bin", "/lib", "/etc", "/var"):
            raise FaultlabError(f"the controller's Python lives in {p}, which cannot be mounted into a node container",
                                field="--backend", fix="run faultlab from a venv or pyenv Python outside /usr")
    # a prefix inside another mounted folder needs no mount of its own
    keep = [p for p in paths if not any(q != p and q in p.parents for q in paths)]
    return {str(p): {"bind": str(p), "mode": "ro"} for p in sorted(keep)}
