"""An S3 store that misbehaves on demand: a moto server that can be paused (SIGSTOP) and resumed
(SIGCONT), and a local HTTP proxy in front of a server that answers 503, resets connections, or
answers 503 at once and delivers the request later (a PUT counted failed that lands late)."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from tests.tensorboard_server import free_port, stop


@contextlib.contextmanager
def pausable_moto(log_dir: Path, timeout: float = 30.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """``(url, process)``: ``python -m moto.server`` on a free loopback port, in a session of its own
    (a signal sent to its PID reaches it alone); resumed and stopped at exit."""
    port = free_port()
    log = open(log_dir / f"moto-{port}.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], cwd=log_dir,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=2):
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto did not start: {Path(log.name).read_text()[-2000:]}")
            time.sleep(0.2)
        yield url, process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)
        stop(process)
        log.close()


def pause(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGSTOP)


def resume(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGCONT)


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream``. :attr:`mode` decides what a PUT meets:
    ``"pass"`` (forwarded), ``"503"`` (answered 503, not forwarded), ``"reset"`` (the connection
    reset), or ``"late"`` (answered 503 at once, forwarded :attr:`late_delay` seconds later). With
    :attr:`budget` set, only that many PUTs meet the fault, then the mode goes back to ``"pass"``.
    Other requests are always forwarded."""

    def __init__(self, upstream: str):
        self.upstream = upstream.removeprefix("http://")
        self.mode = "pass"
        self.budget: int | None = None
        self.late_delay = 1.0
        self.faulted = 0  # PUTs that met a fault
        self.late_delivered = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                mode = proxy._fault() if self.command == "PUT" else "pass"
                if mode == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                if mode in ("503", "late"):
                    if mode == "late":
                        threading.Timer(proxy.late_delay, proxy._deliver_late, (self.command, self.path, body, dict(self.headers))).start()
                    error = b"<Error><Code>ServiceUnavailable</Code><Message>injected by FaultProxy</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(error)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(error)
                    self.close_connection = True
                    return
                status, reason, headers, answer = proxy._forward(self.command, self.path, body, dict(self.headers))
                self.send_response(status, reason)
                for name, value in headers:
                    if name.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)) if self.command != "HEAD" else dict(headers).get("Content-Length", "0"))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(answer)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = relay

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _fault(self) -> str:
        with self._lock:
            if self.mode == "pass":
                return "pass"
            mode = self.mode
            self.faulted += 1
            if self.budget is not None:
                self.budget -= 1
                if self.budget <= 0:
                    self.mode, self.budget = "pass", None
            return mode

    def _forward(self, method: str, path: str, body: bytes, headers: dict):
        headers = {name: value for name, value in headers.items() if name.lower() != "expect"}
        connection = http.client.HTTPConnection(self.upstream, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.reason, response.getheaders(), response.read()
        finally:
            connection.close()

    def _deliver_late(self, method: str, path: str, body: bytes, headers: dict) -> None:
        self._forward(method, path, body, headers)
        with self._lock:
            self.late_delivered += 1

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
