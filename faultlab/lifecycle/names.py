"""The names faultlab gives what it makes on a host, by which the host view tells its
own objects from anyone else's: root qdiscs with reserved tc handles ``fXXX:``, ifb
devices ``flifb<6 hex>`` and cgroups ``faultlab-<fault id>``."""

from __future__ import annotations

import re

#: a root qdisc handle of a fault (``fXXX:``: the 3 hex digits are the fault's number)
FAULT_HANDLE = re.compile(r"^f([0-9a-f]{3}):$")
#: an ifb device of a nic-slow fault (its 6 hex digits are the fault id's)
IFB = re.compile(r"^flifb([0-9a-f]{6})$")
#: a fault's own cgroup (group 1: the fault id)
CGROUP = re.compile(r"^faultlab-([a-z]+-[0-9a-f]{6})$")
