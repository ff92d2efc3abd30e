"""The nanny of the embedded cluster's workers (``cluster.local_cluster``): it starts
each worker with no dashboard.

``LocalCluster`` turns a worker's dashboard on wherever it is given the worker's HTTP
address, and that address is what keeps the worker's HTTP server on 127.0.0.1 (with
none, it listens on every address). With bokeh installed the dashboard showed any
local user the labeling's worker (its tasks, its profile) at ``/status`` and
``/profile``. The scheduler's is turned off by its own argument
(``scheduler_kwargs``); a worker's is only the nanny's to give.
"""

from __future__ import annotations

# dask is an optional, heavy dependency: this module is imported only when a run is
# labeled out of core on an embedded cluster
from distributed import Nanny


class NoDashboardNanny(Nanny):
    """``distributed.Nanny`` whose worker has no dashboard, whatever it is given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "dashboard": False})
