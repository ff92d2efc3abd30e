"""Published labeled datasets: build, verify, describe and export them
(``faultlab dataset build|verify|info|export``). Layout: :mod:`faultlab.datasets.layout`."""

import importlib

# Loaded on first use (PEP 562): the CLI imports this package for every command, and
# the layout imports pyarrow.
_LAZY = {"Dataset": "faultlab.datasets.layout"}

__all__ = ["Dataset"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
