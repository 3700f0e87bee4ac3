"""`PoseTracker`: the client of an external pose tracker (motion capture, overhead camera).

Why: on a real car the pose on the track comes from outside the car, late, noisy and not
always. The task must know the difference between "no pose" and "a pose", so `pose()` returns
None whenever the newest frame is untracked or older than `stale_after` (the stream stalled,
the network dropped, the tracker died), never the last pose as if it were current.

Wire format: newline-delimited JSON over HTTP (`drivers/tracker_emulator.py` serves it and
documents the fields; a bridge from a real mocap SDK or a fiducial-tracking camera publishes
the same, docs/car.md). A reader thread keeps the newest frame, as `SerialCar` does with
telemetry, and reconnects on its own when the stream breaks.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass

from robolearn.errors import ConfigError, DeviceError


@dataclass(frozen=True)
class TrackerPose:
    x: float             # m, track frame
    y: float             # m
    yaw: float           # rad
    seq: int
    captured_at: float   # host monotonic time of capture (arrival less the reported latency)
    latency: float       # s, capture -> sent, as the tracker reports it


class PoseTracker:
    """Newest pose from `url` (…/pose.ndjson). `stale_after`: seconds after which an unanswered
    stream counts as a dropout; `connect_timeout`: for the first frame."""

    def __init__(self, url: str, stale_after: float = 0.15, connect_timeout: float = 3.0):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"tracker={url!r}: give the tracker's stream URL, e.g. "
                              "http://192.168.1.20:8765/pose.ndjson")
        if not 0 < float(stale_after) <= 5.0:
            raise ConfigError(f"tracker stale_after={stale_after!r}: choose seconds in (0, 5]")
        self.url, self.stale_after = url, float(stale_after)
        self._latest: TrackerPose | None = None
        self._tracked = False
        self._last_frame_at: float | None = None
        self.frames = 0
        self.untracked_frames = 0
        self.reconnects = 0
        self.bad_lines = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._got = threading.Condition()
        self._thread = threading.Thread(target=self._reader, name="pose-tracker", daemon=True)
        self._thread.start()
        with self._got:
            self._got.wait_for(lambda: self._last_frame_at is not None, timeout=connect_timeout)
        if self._last_frame_at is None:
            self.close()
            raise DeviceError(f"no frame from the pose tracker at {url} within {connect_timeout:.1f} s "
                              f"({self.error or 'connected, but silent'}): check that the tracker "
                              "(or its bridge) is running and the address")

    # --------------------------------------------------------------------------- reading
    def _reader(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=max(0.5, 2 * self.stale_after)) as r:
                    self.error = None
                    for raw in r:
                        if self._stop.is_set():
                            return
                        self._frame(raw)
            except (OSError, ValueError) as exc:
                self.error = f"{type(exc).__name__}: {exc}"
            if self._stop.wait(0.1):            # the stream ended or broke: try again shortly
                return
            self.reconnects += 1

    def _frame(self, raw: bytes) -> None:
        now = time.monotonic()
        try:
            f = json.loads(raw)
            tracked = bool(f["tracked"])
            pose = None
            if tracked:
                latency = max(0.0, float(f["t_sent"]) - float(f["t"]))
                pose = TrackerPose(float(f["x"]), float(f["y"]), float(f["yaw"]), int(f["seq"]),
                                   now - latency, latency)
        except (ValueError, KeyError, TypeError):
            self.bad_lines += 1                  # a torn line after a reconnect, or garbage
            return
        with self._got:
            self.frames += 1
            self.untracked_frames += int(not tracked)
            self._tracked = tracked
            self._last_frame_at = now
            if pose is not None:
                self._latest = pose
            self._got.notify_all()

    # ------------------------------------------------------------------------------- API
    def pose(self, now: float | None = None) -> TrackerPose | None:
        """The newest pose, or None while the tracker has lost the car or gone quiet."""
        now = time.monotonic() if now is None else now
        with self._got:
            if not self._tracked or self._last_frame_at is None:
                return None
            if now - self._last_frame_at > self.stale_after:
                return None
            return self._latest

    def status(self) -> str:
        """"tracked", "untracked" (frames say the car is lost) or "stale" (no frames)."""
        now = time.monotonic()
        with self._got:
            if self._last_frame_at is None or now - self._last_frame_at > self.stale_after:
                return "stale"
            return "tracked" if self._tracked else "untracked"

    def wait_pose(self, timeout: float) -> TrackerPose | None:
        """Block until a current pose arrives (or `timeout` s pass: None)."""
        end = time.monotonic() + timeout
        while True:
            p = self.pose()
            if p is not None or time.monotonic() >= end:
                return p
            with self._got:
                self._got.wait(timeout=min(0.05, max(0.0, end - time.monotonic())))

    def close(self) -> None:
        self._stop.set()
        with self._got:
            self._got.notify_all()
        # the reader may sit in a blocking read until its socket timeout; it is a daemon thread
        self._thread.join(timeout=0.1)
