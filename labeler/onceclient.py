"""The Dask client of a scheduler given by address (``--scheduler``): it closes when it
loses that scheduler, never reconnecting.

Dask's client, when it loses its scheduler, connects to the same address again for its
timeout (its reconnection, and the scheduler-info calls it keeps making meanwhile). A
port is no one's: the moment root's scheduler ended, its port was free, and another
local user listening there was connected to, unchecked, as that client's scheduler
(what a scheduler returns is unpickled). The lost scheduler's futures are cancelled
either way, so the labeling fails whether or not a new connection is made; this client
makes none.
"""

from __future__ import annotations

# dask is an optional, heavy dependency: this module is imported only when a run is
# labeled on a scheduler given by address
from distributed import Client


class OnceClient(Client):
    """``distributed.Client`` that, where Dask would reconnect, cancels its futures as
    Dask's reconnection does and closes."""

    async def _reconnect(self):
        for st in self.futures.values():
            st.cancel(reason="scheduler-connection-lost",
                      msg="the scheduler given by address was lost; this client does not reconnect to its port")
        self.futures.clear()
        await self._close()
