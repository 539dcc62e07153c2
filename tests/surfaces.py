"""A surface for tests of the lifecycle core: reachable when a test says a person is there, and
it records what the core asked it to do. Real surfaces (web, Feishu, DingTalk) have their own tests."""
from __future__ import annotations

import threading

from askcards.surfaces.base import DeliveryFailed, Surface


class RecordingSurface(Surface):
    name = "test"
    present: set[str] = set()  # session ids whose person can be reached
    fail_delivery: set[str] = set()  # session ids whose delivery fails
    calls: list[tuple[str, str, str]] = []  # (hook, ask id, ask status at call time)
    _lock = threading.Lock()

    def reachable(self, session, tool: str) -> bool:
        return session.id in self.present

    def deliver(self, ask) -> None:
        self._record("deliver", ask)
        if ask.session_id in self.fail_delivery:
            raise DeliveryFailed("test surface refused the card")

    def show(self, ask) -> None:
        self._record("show", ask)

    def withdraw(self, ask) -> None:
        self._record("withdraw", ask)

    def result_delivered(self, ask) -> None:
        self._record("delivered", ask)

    def sync_due(self, now, report) -> int:
        with self._lock:
            self.calls.append(("sync_due", "", ""))
        return 0

    def _record(self, hook: str, ask) -> None:
        with self._lock:
            self.calls.append((hook, ask.id, ask.status))

    @classmethod
    def reset(cls) -> None:
        cls.present = set()
        cls.fail_delivery = set()
        cls.calls = []
