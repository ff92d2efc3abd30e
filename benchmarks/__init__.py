"""Benchmark workloads that run while faults are injected.

- ``faultlab.benchmarks.ddp``: one rank of synchronous data-parallel training
  (torch.distributed, gloo on CPU / nccl on GPU) with per-step compute/comm timing.
- ``faultlab.benchmarks.launch``: start ranks on nodes and wait for them.

Importing this package imports nothing heavy (no torch); ``ddp`` imports torch.
"""
