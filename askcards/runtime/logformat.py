"""JSON log lines (``ASKCARDS_LOG_FORMAT=json``): one JSON object a line, for log collectors.

Fields: ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``, ``message`` (the same
text the plain format prints), ``process``, and ``exc`` (the traceback) when one was logged; a
Django request log adds its ``status_code``. Nothing else a record carries is written: ``extra``
objects such as Django's ``request`` (its headers hold cookies and Authorization) never reach the
line, so the JSON says no more than the plain format does — and askcards never logs a secret.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        status = getattr(record, "status_code", None)
        if isinstance(status, int):
            line["status_code"] = status
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)
