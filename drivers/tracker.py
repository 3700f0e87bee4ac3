"""`PoseTracker`: the client of an external pose tracker (motion capture, overhead camera).

Why: on a real car the pose on the track comes from outside the car, late, noisy and not
always. The task must know the difference between "no pose" and "a pose", so `pose()` returns
None whenever the newest frame is untracked or older than `stale_after` (the stream stalled,
the network dropped, the tracker died), never the last pose as if it were current.

Wire format: newline-delimited JSON over HTTP (`drivers/tracker_emulator.py` serves it and
documents the fields; a bridge from a real mocap SDK or a fiducial-tracking camera publishes
the same, docs/car.md). A reader thread keeps the newest frame, as `SerialCar` does with
telemetry, and reconnects on its own when the stream breaks.

Late vs lost: a stream that goes quiet for longer than `stale_after` is late (a loaded tracker
computer or network, an occlusion): `pose()` is None, the task marks those steps' progress
missing and brakes the car, and the run goes on; the silences and the late frames are counted
(`stats()`). Only a stream silent for `lost_after` (default 10 s) is a tracker gone:
`check_alive()` then raises `DeviceDisconnectedError`. Frames that say "untracked" are not
silence: the tracker is there and the car is out of its view (the recovery and the operator
deal with that).
"""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass

from robolearn.errors import ConfigError, DeviceDisconnectedError, DeviceError


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
    stream counts as a dropout; `lost_after`: seconds of silence that make it a tracker gone;
    `connect_timeout`: for the first frame."""

    def __init__(self, url: str, stale_after: float = 0.15, connect_timeout: float = 3.0,
                 lost_after: float = 10.0):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"tracker={url!r}: give the tracker's stream URL, e.g. "
                              "http://192.168.1.20:8765/pose.ndjson")
        if not 0 < float(stale_after) <= 5.0:
            raise ConfigError(f"tracker stale_after={stale_after!r}: choose seconds in (0, 5]")
        if not float(stale_after) < float(lost_after) <= 3600.0:
            raise ConfigError(f"tracker_lost_after={lost_after!r}: choose seconds above stale_after "
                              f"({stale_after}) and at most 3600")
        self.url, self.stale_after, self.lost_after = url, float(stale_after), float(lost_after)
        self._latest: TrackerPose | None = None
        self._tracked = False
        self._last_frame_at: float | None = None
        self.frames = 0
        self.untracked_frames = 0
        self.reconnects = 0
        self.bad_lines = 0
        self.late_frames = 0       # frames older than stale_after when they arrived (latency)
        self.silences = 0          # gaps between frames longer than stale_after (a late stream)
        self.silent_s = 0.0        # their total length
        self.longest_silence_s = 0.0
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
            if self._last_frame_at is not None and now - self._last_frame_at > self.stale_after:
                gap = now - self._last_frame_at
                self.silences += 1
                self.silent_s += gap
                self.longest_silence_s = max(self.longest_silence_s, gap)
            if pose is not None and pose.latency > self.stale_after:
                self.late_frames += 1
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

    def silent_for(self, now: float | None = None) -> float:
        """Seconds since the last frame arrived (tracked or not)."""
        now = time.monotonic() if now is None else now
        with self._got:
            return 0.0 if self._last_frame_at is None else max(0.0, now - self._last_frame_at)

    def check_alive(self) -> None:
        """Raise `DeviceDisconnectedError` once the stream has been silent for `lost_after`."""
        quiet = self.silent_for()
        if quiet > self.lost_after:
            raise DeviceDisconnectedError(
                f"pose tracker at {self.url} sent nothing for {quiet:.1f} s (tracker_lost_after = "
                f"{self.lost_after:g} s; {self.error or 'connected, but silent'}): the tracker or its "
                "bridge stopped, or the network is down; the car was braked to a stop")

    def stats(self) -> dict:
        """Counts for reports: frames, untracked, late frames, silences (late stream), reconnects."""
        with self._got:
            now = time.monotonic()
            ongoing = (now - self._last_frame_at if self._last_frame_at is not None
                       and now - self._last_frame_at > self.stale_after else 0.0)
            return {"frames": self.frames, "untracked_frames": self.untracked_frames,
                    "late_frames": self.late_frames, "silences": self.silences + int(ongoing > 0),
                    "silent_s": round(self.silent_s + ongoing, 3),
                    "longest_silence_s": round(max(self.longest_silence_s, ongoing), 3),
                    "reconnects": self.reconnects, "bad_lines": self.bad_lines}

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
