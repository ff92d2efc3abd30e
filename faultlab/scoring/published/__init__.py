"""Published straggler / fail-slow detectors, reimplemented from their papers, by
short name (``faultlab score --detector NAME``); one module per method:

- ``falcon`` (:mod:`.falcon`): Greyhound / FALCON, USENIX ATC'25 (BOCPD on each
  rank's iteration time; :mod:`.bocpd` is the change-point model).
- ``nvrx`` (:mod:`.nvrx`): the NVIDIA Resiliency Extension's straggler scores
  (relative and individual section performance per report interval); ``nvrx-short``
  reports every 10 s instead of the tool's 60 s.
- ``iaso`` (:mod:`.iaso`): IASO, ATC'19 (peer-ratio multiplicative fail-slow score),
  ported from storage nodes to ranks.
- ``perseus`` (:mod:`.perseus`): Perseus, FAST'23 (PCA + DBSCAN, polynomial upper
  bound, duration x severity), ported from drives to ranks.
- ``minder`` and ``minder-mahalanobis`` (:mod:`.minder`; the LSTM-VAE in
  :mod:`.minder_vae`): Minder, NSDI'25 (per-node host metrics, dissimilarity from
  peers, continuity, metric priority).

Every detector declares its parameters once (:mod:`.params`): name, the paper's
default, unit and source; ``--param`` is checked against them.
"""

from __future__ import annotations

from faultlab.scoring.published.falcon import FalconDetector
from faultlab.scoring.published.iaso import IasoDetector
from faultlab.scoring.published.minder import MinderDetector, MinderMahalanobisDetector
from faultlab.scoring.published.nvrx import NvrxDetector, NvrxShortDetector
from faultlab.scoring.published.perseus import PerseusDetector

BUILTIN = {
    "falcon": FalconDetector,
    "nvrx": NvrxDetector,
    "nvrx-short": NvrxShortDetector,
    "iaso": IasoDetector,
    "perseus": PerseusDetector,
    "minder": MinderDetector,
    "minder-mahalanobis": MinderMahalanobisDetector,
}
