"""Faults injected into a running emulated robot from outside, over its HTTP server.

Why a route and not an in-process call: a soak (`robolearn bench soak`) must hurt the session
the way hardware would, from outside its processes. The emulator is the hardware, so it takes
`POST /faults` with any of
- "drop_rate", "corrupt_rate" (probabilities): the pseudo-terminal's transmit path (`ptylink.Faults`);
- "camera_stall" (bool): the MJPEG streams keep their connections and send nothing (`stall`);
- "tracker_dropout" (bool): the car's pose tracker loses the car (frames say untracked);
- "tracker_stall_s" (s): its stream goes silent that long, then sends what it held, late;
- "serial_stall_s" (s): the device takes none of the host's bytes that long (its writes time out);
- "truth_stall_s" (s): /truth.json answers that late;
and `GET /faults.json` says what it did and what it received: replies corrupted, bytes dropped,
stalls and stalled seconds, and every goal-position write with those outside the joints' range
(the servo side of "no unsafe command reached the servos").
"""
from __future__ import annotations

import math
import threading
import time

FAULTS_ROUTE = "/faults"
FAULTS_STATE_ROUTE = "/faults.json"
FAULT_KEYS = ("drop_rate", "corrupt_rate", "camera_stall", "tracker_dropout", "tracker_stall_s",
              "serial_stall_s", "truth_stall_s")


class FaultControl:
    """What the routes do, for an arm or car emulator and its (optional) camera streamer."""

    def __init__(self, emulator, streamer=None, tracker=None):
        self.emu, self.streamer, self.tracker = emulator, streamer, tracker
        self._lock = threading.Lock()
        self.stalls = 0
        self.stalled_s = 0.0
        self._stalled_since: float | None = None
        self.requests = 0

    def apply(self, body: dict) -> dict:
        """Set the fault rates / camera stall named in `body`; unknown keys are a 400-style error."""
        unknown = set(body) - set(FAULT_KEYS)
        if unknown:
            raise ValueError(f"unknown fault(s) {sorted(unknown)}: {', '.join(FAULT_KEYS)}")
        for key in ("tracker_dropout", "tracker_stall_s"):
            if key in body and self.tracker is None:
                raise ValueError(f"{key}: this emulator has no pose tracker (only the car has one)")
        if "truth_stall_s" in body and self.streamer is None:
            raise ValueError("truth_stall_s: this emulator serves no truth (it has no camera server)")
        for key in ("tracker_stall_s", "serial_stall_s", "truth_stall_s"):
            if key in body:
                v = float(body[key])
                if not (math.isfinite(v) and 0.0 <= v <= 600.0):
                    raise ValueError(f"{key}={body[key]!r}: seconds in [0, 600] (0 ends a stall)")
        with self._lock:
            self.requests += 1
            for key in ("drop_rate", "corrupt_rate"):
                if key in body:
                    v = float(body[key])
                    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                        raise ValueError(f"{key}={body[key]!r}: a probability in [0, 1]")
                    setattr(self.emu.faults, key, v)
            if "camera_stall" in body:
                if self.streamer is None:
                    raise ValueError("camera_stall: this emulator serves no cameras")
                stall = bool(body["camera_stall"])
                now = time.monotonic()
                if stall and self._stalled_since is None:
                    self.stalls += 1
                    self._stalled_since = now
                elif not stall and self._stalled_since is not None:
                    self.stalled_s += now - self._stalled_since
                    self._stalled_since = None
                self.streamer.stall(stall)
            if "tracker_dropout" in body:
                self.tracker.force_dropout(bool(body["tracker_dropout"]))
            if "tracker_stall_s" in body:
                self.tracker.stall(float(body["tracker_stall_s"]))
            if "serial_stall_s" in body:
                self.emu.dev.stall_input(float(body["serial_stall_s"]))
            if "truth_stall_s" in body:
                self.streamer.stall_truth(float(body["truth_stall_s"]))
        return self.state()

    def state(self) -> dict:
        f = self.emu.faults
        stalled = self._stalled_since is not None
        out = {"drop_rate": f.drop_rate, "corrupt_rate": f.corrupt_rate, "camera_stalled": stalled,
               "camera_stalls": self.stalls,
               "camera_stalled_s": round(self.stalled_s + (time.monotonic() - self._stalled_since
                                                           if stalled else 0.0), 3),
               "camera_frames": self.streamer.frames if self.streamer is not None else None,
               "truth_stalls": getattr(self.streamer, "truth_stalls", None),
               **f.counts()}
        if self.tracker is not None:
            out.update(tracker_dropout=self.tracker.forced, tracker_frames=self.tracker.frames,
                       tracker_untracked_frames=self.tracker.untracked_frames,
                       tracker_stalls=self.tracker.stalls)
        dev = getattr(self.emu, "dev", None)
        if dev is not None and hasattr(dev, "input_stalls"):
            out["serial_stalls"] = dev.input_stalls
        if hasattr(self.emu, "goal_counts"):
            out.update(self.emu.goal_counts())
        teleports = getattr(getattr(self.emu, "plant", None), "teleports", None)
        if isinstance(teleports, int):  # the plant's own count of state writes (sim/car.py)
            out["teleports"] = teleports
        return out

    def install(self, server) -> None:
        """Add the routes to the streamer's `MjpegServer` (or the tracker's server)."""
        server.json_routes[FAULTS_STATE_ROUTE] = self.state
        server.post_routes[FAULTS_ROUTE] = self.apply


def post_faults(url: str, body: dict, timeout: float = 5.0) -> dict:
    """Client side: POST `body` to an emulator's /faults route; its state afterwards."""
    import json
    import urllib.error
    import urllib.request

    from robolearn.errors import DeviceError

    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        raise DeviceError(f"POST {url} {body}: HTTP {exc.code} {exc.read().decode(errors='replace')[:300]}") from None
    except (OSError, ValueError) as exc:
        raise DeviceError(f"POST {url} {body}: {exc}") from None


def read_mjpeg_frames(url: str, seconds: float) -> int:
    """Client side: how many JPEG parts an MJPEG stream sends in `seconds` (0 while it stalls):
    what a camera user sees, read from the wire. Half a second without a byte ends the count
    early (a timed-out HTTP response cannot be read on)."""
    import socket
    import time as _time
    import urllib.request

    from robolearn.drivers.mjpeg_server import BOUNDARY

    marker = b"--" + BOUNDARY.encode()
    n, tail = 0, b""
    deadline = _time.monotonic() + seconds
    try:
        with urllib.request.urlopen(url, timeout=min(0.5, seconds)) as r:
            while _time.monotonic() < deadline:
                try:
                    chunk = r.read1(65536)
                except (socket.timeout, TimeoutError):
                    break                       # nothing sent: a stalled camera
                if not chunk:
                    break
                data = tail + chunk
                n += data.count(marker)
                tail = data[-(len(marker) - 1):]
    except (OSError, ValueError):
        pass
    return n
