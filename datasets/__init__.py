"""The published datasets, shipped as package data of ``faultlab.published`` (found by
:mod:`faultlab.datasets.registry`). A regular package, not a namespace one: an editable
install of a namespace package puts a relative entry on ``sys.path``, which Python
resolves in the working folder, so a folder of that name there would be imported from
(``docs/security.md``).

A regular package named by its folder would also be the top-level ``datasets`` of
anyone who runs Python in a checkout's root (``python -c``, pytest), hiding Hugging
Face's library of that name: imported under that name, this module hands the name over
to the first ``datasets`` found on ``sys.path`` outside the checkout (``ModuleNotFoundError``
when there is none)."""

if __name__ == "datasets":
    import importlib.machinery
    import importlib.util
    import os
    import sys

    _checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _spec = importlib.machinery.PathFinder.find_spec(
        "datasets", [p for p in sys.path if os.path.abspath(p or os.curdir) != _checkout])
    if _spec is None:
        raise ModuleNotFoundError("No module named 'datasets' (Hugging Face's; the checkout's datasets/ folder is "
                                  "faultlab.published)", name="datasets")
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["datasets"] = _module  # the import statement returns what sys.modules holds
    _spec.loader.exec_module(_module)
