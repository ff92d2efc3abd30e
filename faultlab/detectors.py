"""The detector API (:mod:`faultlab.scoring.detectors`) and the baselines
(:mod:`faultlab.scoring.baselines`) under the short import path ``faultlab.detectors``."""

from faultlab.scoring.baselines import *  # noqa: F401,F403
from faultlab.scoring.baselines import BUILTIN  # noqa: F401
from faultlab.scoring.detectors import *  # noqa: F401,F403
from faultlab.scoring.detectors import GROUP, Detector, available_detectors, empty_alarms, load_detector  # noqa: F401
