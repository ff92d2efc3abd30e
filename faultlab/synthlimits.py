"""The bounds of ``faultlab synth``: :func:`faultlab.synthrun.write_run` refuses a run
outside them and the command's help states them, both from here. Apart from the
generator, which loads numpy and pyarrow, so that registering the command costs the
CLI's start-up nothing."""

from __future__ import annotations

#: the fewest ranks and steps of a run
MIN_RANKS = 1
MIN_STEPS = 1
#: the most ranks (each rank's node and group names are made at once, before any block)
MAX_RANKS = 1 << 20
#: the largest seed (numpy's generators take no negative seed)
MAX_SEED = 2**63 - 1

RANKS_HELP = f"ranks of the job, {MIN_RANKS}..{MAX_RANKS} (2**20)"
STEPS_HELP = f"training steps, at least {MIN_STEPS}; no upper bound (written a block at a time; Parquet takes about 20 bytes a rank-step of disk)"
SEED_HELP = f"seed of the random streams, 0..{MAX_SEED} (2**63 - 1)"
