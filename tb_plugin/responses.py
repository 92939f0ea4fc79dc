"""Response helpers: JSON errors for every route, JSON encoded once for repeated answers, and static
files behind a traversal guard.

No error body names a path of the server: the generic 500 says which route failed and the type of
the exception (the traceback goes to the server log), and every error message has the server's own
folders (the logdir, the plugin's files, the Python installation, the home folder) replaced by a
placeholder, whichever part of TensorBoard wrote it.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import mimetypes
import os
import re
import sys
from pathlib import Path
from typing import Any

from tensorboard import errors
from tensorboard.backend import http_util, json_util
from werkzeug import wrappers

logger = logging.getLogger(__name__)

_CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}
_SHOWN_NAME_CHARS = 120  # how much of a rejected static name an error repeats

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent
#: ``{absolute server folder: placeholder}`` replaced in every error message.
_hidden: dict[str, str] = {}


def hide_server_paths(logdir, static_root: Path) -> None:
    """Keep the logdir and the static folder out of every error body, besides the folders hidden
    always (where the plugin and Python are installed, and the home folder)."""
    _hide(logdir, "<logdir>")
    _hide(static_root, "<static>")


def _hide(path, placeholder: str) -> None:
    if not path:
        return
    for form in {os.path.abspath(os.fspath(path)), os.path.realpath(os.fspath(path))}:
        form = form.rstrip(os.sep)
        if form:  # never the root folder itself
            _hidden.setdefault(form, placeholder)


for _path in (_PACKAGE_ROOT, sys.prefix, Path.home()):
    _hide(_path, "<server>")


def public_message(message: str) -> str:
    """``message`` with every hidden server folder (and what lies under it) replaced by its placeholder."""
    for folder in sorted(_hidden, key=len, reverse=True):
        if folder in message:
            message = re.sub(re.escape(folder) + r"(?=[/\\\s'\":,;)\]]|$)", _hidden[folder], message)
    return message


class DamagedDataError(errors.PublicError):
    """The requested data exists but was damaged on disk (answered as 422, never as a wrong value)."""

    http_code = 422


def json_route(handler):
    """Wrap ``handler(plugin, request) -> body`` as a GET-only WSGI route answering JSON.

    A :class:`tensorboard.errors.PublicError` becomes ``{"error": message, "code": http_code}`` with
    that HTTP code (TensorBoard's own handler would answer text/plain); any other exception (a
    damaged record, say) is logged with its traceback and answers a JSON 500 that names the route
    and the exception's type only.
    """

    @functools.wraps(handler)
    @wrappers.Request.application
    def route(self, request):
        if request.method != "GET":
            return _error(request, f"method {request.method} is not allowed; use GET", 405)
        try:
            body = handler(self, request)
        except errors.PublicError as error:
            return _error(request, str(error), error.http_code)
        except Exception as error:  # noqa: BLE001 - the route must answer JSON whatever broke
            route_name = handler.__name__.removesuffix("_route")
            logger.exception("xray route /%s failed", route_name)
            message = f"internal error: {type(error).__name__} in route /{route_name}; the TensorBoard log has the details"
            return _error(request, message, 500)
        if isinstance(body, wrappers.Response):
            return body
        return http_util.Respond(request, body, "application/json")

    return route


def gzipped_json(body: Any) -> bytes:
    """``body`` as the gzipped JSON that TensorBoard's ``http_util.Respond`` would send, encoded once
    to be answered many times with :func:`precompressed_json`."""
    return gzip.compress(json.dumps(json_util.Cleanse(body, "utf-8")).encode("ascii"), compresslevel=3, mtime=0)


def precompressed_json(request, gzipped: bytes):
    """A JSON response from :func:`gzipped_json` bytes (unzipped on the way for a client that does
    not accept gzip)."""
    return http_util.Respond(request, gzipped, "application/json", content_encoding="gzip")


def _error(request, message: str, code: int):
    return http_util.Respond(request, {"error": public_message(message), "code": code}, "application/json", code=code)


def static_file(request, root: Path, relative: str):
    """Serve ``root/relative``; 404 for anything that resolves outside ``root``, is missing, or is a
    name the file system rejects (too long, say)."""
    missing = errors.NotFoundError(f"no static file {_shown(relative)}")
    normalized = os.path.normpath(relative)
    if normalized.startswith(("..", "/")) or os.path.isabs(normalized) or "\\" in relative or "\x00" in relative:
        raise missing
    try:
        path = (root / normalized).resolve()
        if root.resolve() not in path.parents or not path.is_file():
            raise missing
        content = path.read_bytes()
    except (OSError, ValueError):  # ENAMETOOLONG, EACCES, ELOOP, ...: the same answer as a missing file
        raise missing from None
    content_type = _CONTENT_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return http_util.Respond(request, content, content_type)


def _shown(name: str) -> str:
    shown = repr(name[:_SHOWN_NAME_CHARS])
    return shown + (f" ... ({len(name)} characters)" if len(name) > _SHOWN_NAME_CHARS else "")
