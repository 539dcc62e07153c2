"""What the hub and the bus under it share: the re-read message, the re-read pace while the bus is
down, and what the bus needs of its hub. The hub imports the bus; the bus imports only this."""
from __future__ import annotations

import asyncio
from typing import Any, Iterable, Protocol

REREAD = "askcards.reread"  # what a waiter is handed when a message may have been lost
LAYER_RETRY_SECONDS = 1.0  # while the bus is down, a parked request re-reads this often


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, None outside one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Registry(Protocol):
    """What the bus needs of the process's hub (``askcards.wake.hub.Hub``)."""

    origin: str  # names this process on the bus

    def keys(self) -> Iterable[str]:
        """The keys something in this process waits on."""

    def fan_out(self, key: str, message: dict[str, Any]) -> None:
        """Hand ``message`` to this process's members of ``key``."""

    def broadcast(self, message: dict[str, Any]) -> None:
        """Hand ``message`` to every member once."""
