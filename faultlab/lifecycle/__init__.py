"""The fault lifecycle around the fault types: leases and their watchdogs (on this host
or on an ssh node, as the node's ``lease_host()`` says), the views of what is in force,
revert checks, probe devices, and the ``inject`` run, ``status``/``revert``/``recover``
and fan-out commands built on them. Each part is its own module; import it by name."""
