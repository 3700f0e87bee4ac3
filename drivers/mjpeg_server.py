"""MJPEG over HTTP, as IP cameras and mjpg-streamer serve it, on 127.0.0.1.

Why: a pixel policy on `backend="real"` must read its images over the same bytes a real
network camera sends (`multipart/x-mixed-replace` with one JPEG per part), through the same
`OpenCVCamera` it would use on hardware. The server only moves bytes: a producer calls
`publish(name, rgb)` and every client of `/NAME.mjpg` gets that frame as its next part.
`clients(name)` lets the producer render only the streams someone watches (rendering is the
expensive part). `stall()` keeps connections open but stops sending (a camera that hangs);
`close()` drops them (a camera that goes away).
"""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import cv2
import numpy as np

from robolearn.drivers.http_json import serve_json, serve_post
from robolearn.errors import ConfigError

BOUNDARY = "robolearnframe"


class _Stream:
    def __init__(self):
        self.jpeg: bytes | None = None
        self.seq = 0
        self.clients = 0


class MjpegServer:
    """Serve named MJPEG streams at http://HOST:PORT/NAME.mjpg (and a still at /NAME.jpg)."""

    def __init__(self, names, host: str = "127.0.0.1", port: int = 0, quality: int = 90,
                 json_routes: dict | None = None, post_routes: dict | None = None):
        names = tuple(names)
        self.json_routes = dict(json_routes or {})  # "/truth.json" -> callable returning a dict
        # "/hand/place_cube" -> callable(dict body) returning a dict (an emulator's actions)
        self.post_routes = dict(post_routes or {})
        if not names:
            raise ConfigError("MjpegServer needs at least one stream name")
        if not 1 <= int(quality) <= 100:
            raise ConfigError(f"JPEG quality={quality}: choose 1..100")
        self.quality = int(quality)
        self._streams = {n: _Stream() for n in names}
        self._cond = threading.Condition()
        self._stalled = False
        self._closed = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):      # quiet: a camera does not log every request
                pass

            def do_POST(self):
                route = server.post_routes.get(self.path)
                if route is None:
                    self.send_error(404, f"no POST route {self.path}; have {sorted(server.post_routes)}")
                    return
                serve_post(self, route)

            def do_GET(self):
                route = server.json_routes.get(self.path)
                if route is not None:
                    serve_json(self, route)
                    return
                name, _, kind = self.path.lstrip("/").partition(".")
                if name not in server._streams or kind not in ("mjpg", "jpg"):
                    self.send_error(404, f"no stream {self.path}; have "
                                         + ", ".join(f"/{n}.mjpg" for n in server._streams))
                    return
                if kind == "jpg":
                    server._serve_still(self, name)
                else:
                    server._serve_stream(self, name)

        self._httpd = ThreadingHTTPServer((host, int(port)), Handler)
        self._httpd.daemon_threads = True
        self.host, self.port = self._httpd.server_address[:2]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="mjpeg-server",
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------------- producer side
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._streams)

    def url(self, name: str) -> str:
        return f"http://{self.host}:{self.port}/{name}.mjpg"

    def urls(self) -> dict[str, str]:
        return {n: self.url(n) for n in self._streams}

    def clients(self, name: str) -> int:
        return self._streams[name].clients

    def publish(self, name: str, rgb: np.ndarray) -> None:
        """Encode one RGB frame and hand it to every client of `name`."""
        ok, buf = cv2.imencode(".jpg", cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR),
                               [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        if not ok:
            raise RuntimeError(f"JPEG encoding of stream {name!r} failed")
        with self._cond:
            s = self._streams[name]
            s.jpeg, s.seq = buf.tobytes(), s.seq + 1
            self._cond.notify_all()

    def stall(self, stalled: bool = True) -> None:
        """Fault injection: keep connections open but send nothing (a hung camera)."""
        with self._cond:
            self._stalled = stalled
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=2.0)

    # ----------------------------------------------------------------------- client side
    def _next(self, name: str, seen: int, timeout: float = 0.5):
        with self._cond:
            s = self._streams[name]
            self._cond.wait_for(lambda: self._closed or (not self._stalled and s.seq > seen),
                                timeout=timeout)
            if self._closed:
                raise ConnectionAbortedError
            if self._stalled or s.seq <= seen:
                return None, seen
            return s.jpeg, s.seq

    def _serve_still(self, h, name: str) -> None:
        s = self._streams[name]
        with self._cond:
            s.clients += 1
        try:
            jpeg = None
            for _ in range(10):
                jpeg, _ = self._next(name, 0 if s.jpeg is None else s.seq - 1)
                if jpeg is not None:
                    break
            if jpeg is None:
                h.send_error(503, f"stream {name} has no frame yet")
                return
            h.send_response(200)
            h.send_header("Content-Type", "image/jpeg")
            h.send_header("Content-Length", str(len(jpeg)))
            h.end_headers()
            h.wfile.write(jpeg)
        except (ConnectionAbortedError, BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self._cond:
                s.clients -= 1

    def _serve_stream(self, h, name: str) -> None:
        s = self._streams[name]
        with self._cond:
            s.clients += 1
        try:
            h.send_response(200)
            h.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={BOUNDARY}")
            h.send_header("Cache-Control", "no-cache")
            h.send_header("Connection", "close")
            h.end_headers()
            seen = 0
            while True:
                jpeg, seen = self._next(name, seen)
                if jpeg is None:
                    continue
                h.wfile.write(f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\n"
                              f"Content-Length: {len(jpeg)}\r\n\r\n".encode() + jpeg + b"\r\n")
                h.wfile.flush()
        except (ConnectionAbortedError, BrokenPipeError, ConnectionResetError, OSError):
            pass
        finally:
            with self._cond:
                s.clients -= 1
