"""Django's SQLite backend, with this process's write transactions queued on a lock.

SQLite lets one writer in at a time. With ``transaction_mode = IMMEDIATE`` a second writer waits
in SQLite's busy handler, which sleeps with a growing back-off (up to 100 ms per try) and so
keeps losing to newcomers: under load (say 50 Feishu clicks at once on ``serve``) a few requests
waited for seconds. Here the writers of one process wait on a lock instead and are woken the
moment the previous transaction ends, so the wait is the queue ahead, not a sleeping back-off.
Writers in other processes (a separate ``askcards_worker``) still meet at SQLite's own lock.
"""
from __future__ import annotations

import threading

from django.db.backends.sqlite3 import base
from django.db.utils import OperationalError

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _write_lock(name: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(name, threading.Lock())


class DatabaseWrapper(base.DatabaseWrapper):
    _held_write_lock: threading.Lock | None = None

    def _start_transaction_under_autocommit(self):
        if self.transaction_mode in ("IMMEDIATE", "EXCLUSIVE") and not self.is_in_memory_db():
            lock = _write_lock(str(self.settings_dict["NAME"]))
            timeout = float(self.settings_dict["OPTIONS"].get("timeout", 5))
            if not lock.acquire(timeout=timeout):
                raise OperationalError(f"database is locked: this process's other writers held it for {timeout:g} s")
            self._held_write_lock = lock
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_write_lock()
            raise

    def _release_write_lock(self) -> None:
        lock, self._held_write_lock = self._held_write_lock, None
        if lock is not None:
            lock.release()

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self._release_write_lock()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._release_write_lock()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._release_write_lock()
