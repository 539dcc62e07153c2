"""The embedded default's channel layer."""
from __future__ import annotations

import time

from channels.layers import InMemoryChannelLayer


class ThrottledInMemoryChannelLayer(InMemoryChannelLayer):
    """Channels' in-memory layer, with its expiry sweep run at most once a second.

    The stock layer sweeps every channel and group on each send and receive: with thousands of
    parked long-polls that is O(waiters) per message and dominated the server's CPU in
    tests/bench. Expiry is measured in tens of seconds, so a sweep a second loses nothing.
    """

    SWEEP_EVERY = 1.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._next_sweep = 0.0

    def _clean_expired(self):
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.SWEEP_EVERY
        super()._clean_expired()
