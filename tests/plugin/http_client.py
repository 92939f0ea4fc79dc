"""Requests to a real TensorBoard server: the status and the strictly parsed JSON body."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request

import numpy as np

PREFIX = "/data/plugin/xray"


def _refuse(constant: str):
    raise ValueError(f"not strict JSON: {constant}")


def strict_json(body: bytes):
    """``json.loads`` that refuses NaN and Infinity, which are not JSON."""
    return json.loads(body, parse_constant=_refuse)


def request(url: str, path: str, *, method: str = "GET", timeout: float = 30.0, **params) -> tuple[int, bytes, str]:
    """``(status, body, content type)`` of ``method url+PREFIX+path?params`` (errors included)."""
    query = urllib.parse.urlencode(params)
    target = f"{url}{PREFIX}{path}" + (f"?{query}" if query else "")
    try:
        with urllib.request.urlopen(urllib.request.Request(target, method=method), timeout=timeout) as response:
            return response.status, response.read(), response.headers.get_content_type()
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers.get_content_type()


def get(url: str, path: str, **params):
    """``(status, JSON body)`` of a GET."""
    status, body, _ = request(url, path, **params)
    return status, strict_json(body)


def panels(frame: dict) -> list[np.ndarray]:
    """The 2-D panels of a ``/frame`` body."""
    return [np.frombuffer(base64.b64decode(p["data"]), "<f4").reshape(p["rows"], p["cols"]) for p in frame["panels"]]
