"""Telemetry from the nodes a job runs on (docs/architecture.md).

- :mod:`~faultlab.telemetry.hostsampler`: per-node CPU, RSS and NIC byte rates from
  ``/proc/<pid>`` plus the two below, sampled every ``interval_s`` seconds into the
  run's ``host`` table;
- :mod:`~faultlab.telemetry.tcpstats`: per-connection TCP statistics from ``ss -tinHe``
  (RTT in ms, retransmits, delivery rate in bit/s), aggregated per peer node;
- :mod:`~faultlab.telemetry.gpumetrics`: NVML readings (MHz, W, %), absent without a GPU;
- :mod:`~faultlab.telemetry.collect`: brings the ranks' per-step JSONL written on docker
  and ssh nodes back into the run directory.
"""
