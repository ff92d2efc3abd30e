"""Whose a process is, told on the node that runs it: ``MINE_SH``, POSIX sh builtins
only (for the scripts faultlab runs there: the stress workers' stop and scan, the
remote watchdog scan and check).

A process is this user's when its real and effective uid in ``/proc/PID/status`` are
the ones ``id -u`` gives there and it runs in the checking shell's PID namespace (a
container's root is uid 0 on its host too). The owner of
``/proc/PID`` is not used: the kernel hands that to root for a non-dumpable process,
whoever runs it.
"""

from __future__ import annotations

#: defines ``me`` (this user's uid) and ``mine PID`` (0 when the process runs as ``me``
#: in this shell's PID namespace; 1 when it is another user's or another namespace's,
#: gone, or its status is unreadable)
MINE_SH = r"""
me=$(id -u)
mine() {
  [ "/proc/$1/ns/pid" -ef "/proc/$$/ns/pid" ] || return 1
  while read -r _k _r _e _rest; do
    [ "$_k" = Uid: ] && { [ "$_r" = "$me" ] && [ "$_e" = "$me" ]; return; }
  done 2>/dev/null < "/proc/$1/status"
  return 1
}
"""
