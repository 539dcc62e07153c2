"""One error shape for the whole API: {"error": {"code": "<stable_code>", "message": "…"}}, rendered
by ``serializers.ErrorOutput``."""
from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from askcards.http import jsonlimits
from askcards.errors import AskcardsError, QuotaExceeded

from .serializers import ErrorOutput

CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "invalid_key",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.ParseError: "malformed_json",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.Throttled: "throttled",
    exceptions.ValidationError: "invalid_input",
}


def error_response(code: str, message: str, status_code: int, **extra: Any) -> Response:
    return Response(ErrorOutput.of({"error": {"code": code, "message": message, **extra}}), status=status_code)


def _flatten(detail: Any, prefix: str = "") -> list[str]:
    if isinstance(detail, dict):
        return [line for key, value in detail.items() for line in _flatten(value, f"{prefix}{key}.")]
    if isinstance(detail, list):
        return [line for item in detail for line in _flatten(item, prefix)]
    return [f"{prefix.rstrip('.')}: {detail}" if prefix else str(detail)]


def _from_django(exc, context):
    """Django's own 404/403/400 exceptions get the API's error shape instead of an HTML page."""
    if isinstance(exc, Http404):
        request = context.get("request")
        try:
            fmt = request.query_params.get("format") if request is not None else None
        except SuspiciousOperation:
            fmt = None
        if fmt is not None:  # DRF's format override found no renderer
            return exceptions.NotFound(f"unknown response format {fmt!r}: this API only answers JSON; drop 'format'")
        return exceptions.NotFound(str(exc) or "Not found.")
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied(str(exc) or None)
    return exc


def exception_handler(exc, context):
    exc = _from_django(exc, context)
    if isinstance(exc, SuspiciousOperation):
        logging.getLogger(f"django.security.{type(exc).__name__}").warning("%s", exc)
        if isinstance(exc, RequestDataTooBig):
            return error_response("request_too_large", f"{exc} Send a smaller request.", 413)
        return error_response("bad_request", str(exc) or "Bad request.", status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, QuotaExceeded):
        response = error_response(exc.code, exc.message, exc.status)
        response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, AskcardsError):
        return error_response(exc.code, exc.message, exc.status)
    if isinstance(exc, exceptions.APIException):
        code = CODES.get(type(exc), "error")
        if isinstance(exc, exceptions.AuthenticationFailed) and isinstance(exc.detail, str):
            code = getattr(exc.detail, "code", code) or code
        if isinstance(exc, exceptions.NotAuthenticated):
            message = "Authentication required: send 'Authorization: Bearer <agent key>'."
            response = error_response(code, message, status.HTTP_401_UNAUTHORIZED)
            response["WWW-Authenticate"] = "Bearer"
            return response
        if isinstance(exc, exceptions.ValidationError):
            fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
            message = "; ".join(_flatten(fields))
            return error_response(code, message, exc.status_code, fields=exc.detail)
        if isinstance(exc, exceptions.ParseError):
            if exc.get_codes() in jsonlimits.CODES:  # askcards' parser: its message says it all
                return error_response(code, f"Request {exc.detail}.", exc.status_code)
            message = f"Request body is not valid JSON ({exc.detail}); expected a JSON object."
            return error_response(code, message, exc.status_code)
        response = drf_exception_handler(exc, context)
        if response is not None:
            response.data = ErrorOutput.of({"error": {"code": code, "message": str(exc.detail)}})
            if isinstance(exc, exceptions.AuthenticationFailed):
                response.status_code = status.HTTP_401_UNAUTHORIZED
                response["WWW-Authenticate"] = "Bearer"
        return response
    return drf_exception_handler(exc, context)
