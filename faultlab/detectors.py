"""Moved to :mod:`faultlab.scoring.detectors` (API) and
:mod:`faultlab.scoring.baselines`; this name stays so existing imports keep working."""

from faultlab.scoring.baselines import *  # noqa: F401,F403
from faultlab.scoring.baselines import BUILTIN  # noqa: F401
from faultlab.scoring.detectors import *  # noqa: F401,F403
from faultlab.scoring.detectors import GROUP, Detector, available_detectors, empty_alarms, load_detector  # noqa: F401
