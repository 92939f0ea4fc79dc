"""Response helpers: JSON errors for every route, and static files behind a traversal guard."""

from __future__ import annotations

import functools
import logging
import mimetypes
import os
from pathlib import Path

from tensorboard import errors
from tensorboard.backend import http_util
from werkzeug import wrappers

logger = logging.getLogger(__name__)

_CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}


def json_route(handler):
    """Wrap ``handler(plugin, request) -> body`` as a GET-only WSGI route answering JSON.

    A :class:`tensorboard.errors.PublicError` becomes ``{"error": message, "code": http_code}`` with
    that HTTP code (TensorBoard's own handler would answer text/plain); any other exception (a
    damaged record, say) is logged and answers a JSON 500.
    """

    @functools.wraps(handler)
    @wrappers.Request.application
    def route(self, request):
        if request.method != "GET":
            return _error(request, errors.PublicError(f"method {request.method} is not allowed; use GET"), 405)
        try:
            body = handler(self, request)
        except errors.PublicError as error:
            return _error(request, error, error.http_code)
        except Exception as error:  # noqa: BLE001 - the route must answer JSON whatever broke
            logger.exception("xray route %s failed", request.path)
            return _error(request, RuntimeError(f"internal error: {type(error).__name__}: {error}"), 500)
        if isinstance(body, wrappers.Response):
            return body
        return http_util.Respond(request, body, "application/json")

    return route


def _error(request, error: Exception, code: int):
    return http_util.Respond(request, {"error": str(error), "code": code}, "application/json", code=code)


def static_file(request, root: Path, relative: str):
    """Serve ``root/relative``; 404 for anything that resolves outside ``root`` or is missing."""
    normalized = os.path.normpath(relative)
    if normalized.startswith(("..", "/")) or os.path.isabs(normalized) or "\\" in relative or "\x00" in relative:
        raise errors.NotFoundError(f"no static file {relative!r}")
    path = (root / normalized).resolve()
    if root.resolve() not in path.parents or not path.is_file():
        raise errors.NotFoundError(f"no static file {relative!r}")
    content_type = _CONTENT_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return http_util.Respond(request, path.read_bytes(), content_type)
