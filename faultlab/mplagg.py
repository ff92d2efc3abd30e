"""matplotlib for faultlab's pages (the report's figures, the leaderboard page):
imported headless (the Agg backend), configured by nothing in the working folder, and
drawing text as it is written (no ``$...$`` math: what is drawn is others' text).

matplotlib reads ``./matplotlibrc`` when imported, before any other configuration
file. Whoever may write the working folder (``/tmp``, another user's folder) would
then style root's plots (every line drawn white), make each figure gigabytes
(``savefig.pad_inches``) or block the import on a FIFO. So this module imports
matplotlib with the process standing in ``/`` for the import alone, then back in its
own folder (by descriptor, wherever that folder is now). The modules that draw import
this one at their top: a module is imported before any of its work starts, and the
working folder belongs to the whole process.

Usage::

    from faultlab import mplagg  # noqa: F401 (first: matplotlib headless, no ./matplotlibrc)
    import matplotlib.pyplot as plt
"""

from __future__ import annotations

import os

_here = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
try:
    os.chdir("/")
    try:
        import matplotlib
    finally:
        os.fchdir(_here)
finally:
    os.close(_here)
del _here

matplotlib.use("Agg")  # no display: pages are rendered headless
# text is drawn as written, never parsed as TeX math: the names drawn (fault types, nodes,
# detectors, datasets) are whoever made the run's, and one `$` in them ended the page in a
# parser's traceback
matplotlib.rcParams["text.parse_math"] = False
