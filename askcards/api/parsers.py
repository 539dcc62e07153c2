"""The API's request parser: DRF's JSONParser with askcards' limits (``askcards.http.jsonlimits``).

DRF's own parser lets a deeply nested body raise RecursionError (a 500) and accepts NUL, lone
surrogates, NaN and Infinity, which PostgreSQL then refuses mid-request. This one answers 400
(``malformed_json``, the message says what was wrong) before a view runs, and reads at most
DATA_UPLOAD_MAX_MEMORY_SIZE bytes (413 ``request_too_large`` beyond).
"""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from askcards.http import jsonlimits


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or jsonlimits.MAX_BYTES
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise RequestDataTooBig(f"Request body is larger than {limit} bytes.")
        try:
            return jsonlimits.load(raw, what="body", max_bytes=limit)
        except jsonlimits.JSONRefused as exc:
            raise ParseError(str(exc), code=exc.code) from None
