"""faultlab: fail-slow fault injection and labeling for synchronous distributed training."""
