"""Django's SQLite backend, with this process's write transactions queued on a lock.

SQLite lets one writer in at a time. With ``transaction_mode = IMMEDIATE`` a second writer waits
in SQLite's busy handler, which sleeps with a growing back-off (up to 100 ms per try) and so
keeps losing to newcomers: under load (say 50 Feishu clicks at once on ``serve``) a few requests
waited for seconds. Here the writers of one process wait on a lock instead and are woken the
moment the previous transaction ends, so the wait is the queue ahead, not a sleeping back-off.
Writers in other processes (a separate ``askcards_worker``) still meet at SQLite's own lock.

The database holds answers and encrypted secrets, so its files are the owner's only (0600): a new
database file is created 0600 before SQLite opens it (SQLite gives its -wal and -shm files the
main file's mode), and files an older version left group- or world-readable are tightened.
"""
from __future__ import annotations

import os
import stat
import threading

from django.db.backends.sqlite3 import base
from django.db.utils import OperationalError

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _write_lock(name: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(name, threading.Lock())


def _private_files(name: str) -> None:
    """Create the database file 0600 if it is missing; tighten it and its -wal/-shm files."""
    try:
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # an empty file is an empty database
    except FileExistsError:
        pass
    for path in (name, f"{name}-wal", f"{name}-shm"):
        try:
            if os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                os.chmod(path, 0o600)
        except FileNotFoundError:
            pass
        except PermissionError:  # not ours to change; SQLite reports what it cannot open
            pass


class DatabaseWrapper(base.DatabaseWrapper):
    _held_write_lock: threading.Lock | None = None

    def get_new_connection(self, conn_params):
        name = conn_params["database"]
        if not self.is_in_memory_db() and not str(name).startswith("file:"):
            _private_files(str(name))
        return super().get_new_connection(conn_params)

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
