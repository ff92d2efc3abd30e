"""A short import path for the detector API (:mod:`faultlab.scoring.detectors`), the
lookup by name (:mod:`faultlab.scoring.lookup`) and the baselines
(:mod:`faultlab.scoring.baselines`): ``faultlab.detectors:ConstantDetector`` names a
baseline in a ``module:Class`` spec and in published scores files."""

from faultlab.scoring.baselines import *  # noqa: F401,F403
from faultlab.scoring.baselines import BUILTIN  # noqa: F401
from faultlab.scoring.detectors import *  # noqa: F401,F403
from faultlab.scoring.detectors import GROUP, Detector, empty_alarms  # noqa: F401
from faultlab.scoring.lookup import available_detectors, load_detector  # noqa: F401
