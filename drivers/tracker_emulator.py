"""An external pose tracker watching the emulated car: motion capture / an overhead camera.

Why: a real car measures only odometry, steering and its IMU; lap progress, checkpoints and
recovery need its pose on the track, which in a lab comes from outside the car. The emulator
serves what such a system would, and nothing better: the chassis pose sampled at `rate_hz`,
with Gaussian noise, sent `latency_ms` after capture, and sometimes not at all (dropouts:
the car occluded or out of view), all drawn from one seeded generator.

Wire format (what `drivers/tracker.py` reads, and what a user's own mocap / camera bridge
publishes on a physical car; docs/car.md): HTTP, `GET /pose.ndjson` is a long-lived
response of newline-delimited JSON, one object per captured frame:

    {"seq": 812, "t": 13.517, "t_sent": 13.556, "tracked": true, "x": 1.203, "y": -0.412, "yaw": 0.031}

`t` (capture) and `t_sent` are seconds on the tracker's own clock (their difference is the
latency the tracker reports, as NatNet does); x, y in metres and yaw in radians in the track
frame. While the car is lost the frames keep coming with `"tracked": false` and no pose.
`GET /pose.json` returns the newest frame (for curl). The fault route forces a dropout
(`force_dropout`, `POST /faults {"tracker_dropout": true}` via drivers/fault_control.py) or a
stall (`stall`, `{"tracker_stall_s": 2.0}`): the stream goes silent for that long, as a tracker
computer or network starved by load does, then sends the frames it held, late.
"""
from __future__ import annotations

import collections
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from robolearn.drivers.http_json import serve_json, serve_post
from robolearn.drivers.reality import TrackerReality

STREAM_ROUTE = "/pose.ndjson"
LATEST_ROUTE = "/pose.json"


class EmulatedTracker:
    """Sample `plant.pose()` under `lock` and publish it as a tracker would, on 127.0.0.1."""

    def __init__(self, plant, lock: threading.Lock, cfg: TrackerReality | None = None,
                 host: str = "127.0.0.1", port: int = 0, seed: int = 0):
        self.plant, self.lock = plant, lock
        self.cfg = cfg or TrackerReality()
        self.rng = np.random.default_rng([seed, 0x7EAC])
        self.t0 = time.monotonic()
        self.forced = False
        self.frames = 0                      # frames sent (tracked or not)
        self.untracked_frames = 0
        self.dropouts = 0                    # spontaneous dropouts begun
        self.stalls = 0                      # forced stalls (silent stream) begun
        self._stalled_until = -1.0
        self._dropout_until = -1.0
        self._pending: collections.deque = collections.deque()    # (due, frame) in send order
        self._sent: collections.deque = collections.deque(maxlen=512)
        self._seq = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self.json_routes = {LATEST_ROUTE: self.latest}
        self.post_routes: dict = {}
        self.error: Exception | None = None
        self._httpd = ThreadingHTTPServer((host, int(port)), self._handler())
        self._httpd.daemon_threads = True
        self.host, self.port = self._httpd.server_address[:2]
        self._threads = [threading.Thread(target=self._httpd.serve_forever, name="tracker-http",
                                          kwargs={"poll_interval": 0.1}, daemon=True),
                         threading.Thread(target=self._run, name="tracker", daemon=True)]
        for t in self._threads:
            t.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{STREAM_ROUTE}"

    def clock(self) -> float:
        return time.monotonic() - self.t0

    def force_dropout(self, on: bool = True) -> None:
        """Fault injection: lose the car until called with False (frames say tracked: false)."""
        self.forced = bool(on)

    def stall(self, seconds: float) -> None:
        """Fault injection: send nothing for `seconds` (0 ends a stall now); frames captured
        meanwhile leave afterwards, late (their `t_sent` says how late)."""
        seconds = float(seconds)
        with self._cond:
            if seconds > 0:
                self.stalls += 1
            self._stalled_until = self.clock() + seconds if seconds > 0 else -1.0
            self._cond.notify_all()

    def latest(self) -> dict:
        with self._cond:
            if not self._sent:
                raise RuntimeError("the tracker has sent no frame yet")
            return json.loads(self._sent[-1][1])

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()
        for t in self._threads:
            t.join(timeout=2.0)

    # ------------------------------------------------------------------------ capture side
    def _capture(self, t: float) -> dict:
        c = self.cfg
        if not self.forced and t >= self._dropout_until and c.dropout_per_s > 0:
            if self.rng.random() < 1.0 - math.exp(-c.dropout_per_s / c.rate_hz):
                self.dropouts += 1
                self._dropout_until = t + self.rng.uniform(*c.dropout_s)
        self._seq += 1
        frame = {"seq": self._seq, "t": round(t, 4)}
        if self.forced or t < self._dropout_until:
            frame["tracked"] = False
            return frame
        with self.lock:
            x, y, yaw = self.plant.pose()
        nx, ny = self.rng.normal(0.0, c.noise_xy_m, 2) if c.noise_xy_m else (0.0, 0.0)
        nyaw = self.rng.normal(0.0, math.radians(c.noise_yaw_deg)) if c.noise_yaw_deg else 0.0
        yaw = (yaw + nyaw + math.pi) % (2 * math.pi) - math.pi
        frame.update(tracked=True, x=round(x + nx, 5), y=round(y + ny, 5), yaw=round(yaw, 5))
        return frame

    def _run(self) -> None:
        period = 1.0 / self.cfg.rate_hz
        next_capture = self.clock()
        last_due = 0.0
        try:
            while not self._stop.is_set():
                now = self.clock()
                if now >= next_capture:
                    frame = self._capture(now)
                    # frames leave in capture order, each at least its own latency late
                    last_due = max(last_due, now + self.rng.uniform(*self.cfg.latency_ms) / 1000.0)
                    self._pending.append((last_due, frame))
                    next_capture += period
                    if now > next_capture + period:       # fell behind: no burst of catch-up frames
                        next_capture = now + period
                stalled_until = self._stalled_until
                while self._pending and self._pending[0][0] <= now and now >= stalled_until:
                    _, frame = self._pending.popleft()
                    frame["t_sent"] = round(now, 4)
                    self._publish(frame)
                wake = min(next_capture, self._pending[0][0]) if self._pending else next_capture
                if now < stalled_until:
                    wake = min(next_capture, stalled_until)
                self._stop.wait(max(0.0, wake - self.clock()))
        except Exception as exc:  # noqa: BLE001 - a crashed tracker goes silent; the client sees stale poses
            self.error = exc

    def _publish(self, frame: dict) -> None:
        line = json.dumps(frame)
        with self._cond:
            self.frames += 1
            self.untracked_frames += int(not frame["tracked"])
            self._sent.append((frame["seq"], line))
            self._cond.notify_all()

    # -------------------------------------------------------------------------- HTTP side
    def _handler(self):
        tracker = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == STREAM_ROUTE:
                    tracker._stream(self)
                elif self.path in tracker.json_routes:
                    serve_json(self, tracker.json_routes[self.path], client_errors=(ValueError,))
                else:
                    self.send_error(404, f"no route {self.path}; have {STREAM_ROUTE}, "
                                         + ", ".join(sorted(tracker.json_routes)))

            def do_POST(self):
                route = tracker.post_routes.get(self.path)
                if route is None:
                    self.send_error(404, f"no POST route {self.path}; have {sorted(tracker.post_routes)}")
                    return
                serve_post(self, route, client_errors=(ValueError,))

        return Handler

    def _stream(self, h) -> None:
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/x-ndjson")
            h.send_header("Cache-Control", "no-cache")
            h.send_header("Connection", "close")
            h.end_headers()
            with self._cond:
                seen = self._sent[-1][0] if self._sent else 0
            while not self._stop.is_set():
                with self._cond:
                    self._cond.wait_for(lambda: self._stop.is_set() or (self._sent and self._sent[-1][0] > seen),
                                        timeout=0.5)
                    lines = [ln for s, ln in self._sent if s > seen]
                    if lines:
                        seen = self._sent[-1][0]
                if lines:
                    h.wfile.write(("\n".join(lines) + "\n").encode())
                    h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
