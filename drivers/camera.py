"""`OpenCVCamera`: the `Camera` protocol over cv2.VideoCapture, with a capture thread.

Why a thread that keeps only the latest frame: `VideoCapture.read()` returns the *oldest*
buffered frame and blocks until the next one, so calling it from the control loop would feed
the policy stale images and stall the loop. The thread drains the device continuously; `read`
returns the newest frame (RGB, resized/cropped to `image_size`) with the time it was grabbed.
When the device drops out (USB hiccup, network stream gone, end of a video file) the thread
releases it and reopens it with back-off; `read` raises `CameraError` (a `DeviceError`) only
when no new frame arrived for `stale_after` seconds. Network streams are opened through FFmpeg
with open/read timeouts, so an unreachable URL or a stream that stops sending is reported
within about a second instead of blocking the capture thread forever.

Sources: an int (device index, /dev/videoN), a URL (rtsp://, http://...), or a video file
(played at its own frame rate, looping: a stand-in for a live camera in tests and demos).
"""
from __future__ import annotations

import os
import threading
import time

import cv2
import numpy as np

from robolearn.errors import CameraError, ConfigError, DeviceError
from robolearn.robot import Frame


def _is_file(source) -> bool:
    return isinstance(source, (str, os.PathLike)) and "://" not in str(source)


def _is_url(source) -> bool:
    return isinstance(source, str) and "://" in source

#: FFmpeg open / read timeouts for network streams (ms): a dead camera fails, never hangs
OPEN_TIMEOUT_MS = 1500
READ_TIMEOUT_MS = 1000


def prepare(image_bgr: np.ndarray, size: tuple[int, int], crop) -> np.ndarray:
    """Crop (x, y, w, h box, or "center" to the target aspect), resize, BGR -> RGB."""
    img = image_bgr
    if img.ndim == 2:
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    h, w = size
    if crop == "center":
        ih, iw = img.shape[:2]
        target = w / h
        if iw / ih > target:
            cw = int(round(ih * target))
            x0 = (iw - cw) // 2
            img = img[:, x0:x0 + cw]
        else:
            ch = int(round(iw / target))
            y0 = (ih - ch) // 2
            img = img[y0:y0 + ch]
    elif crop is not None:
        x, y, cw, ch = crop
        img = img[y:y + ch, x:x + cw]
        if img.size == 0:
            raise DeviceError(f"crop {crop} lies outside the {image_bgr.shape[1]}x{image_bgr.shape[0]} frame")
    if img.shape[:2] != (h, w):
        img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(cv2.cvtColor(img, cv2.COLOR_BGR2RGB))


class OpenCVCamera:
    def __init__(self, source, name: str = "front", image_size: tuple[int, int] = (84, 84),
                 crop=None, stale_after: float = 1.0, first_frame_timeout: float = 5.0,
                 reconnect_delay: float = 0.2, fps: float | None = None):
        try:
            h, w = (int(v) for v in image_size)
        except (TypeError, ValueError):
            raise ConfigError(f"image_size={image_size!r}: give (height, width)") from None
        if h < 1 or w < 1:
            raise ConfigError(f"image_size={image_size!r}: must be positive")
        if crop not in (None, "center") and (not isinstance(crop, (tuple, list)) or len(crop) != 4):
            raise ConfigError(f"crop={crop!r}: None, 'center' or an (x, y, w, h) box")
        self.source = int(source) if isinstance(source, str) and source.isdigit() else source
        self.name = name
        self.shape = (h, w, 3)
        self.crop = crop
        self.stale_after = float(stale_after)
        self.first_frame_timeout = float(first_frame_timeout)
        self.reconnect_delay = float(reconnect_delay)
        self.fps = fps
        self.reconnects = 0
        self.open_failures = 0
        self.frames = 0
        self.last_error: str | None = None
        self._latest: Frame | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"camera-{name}", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- capture thread
    def _open(self):
        if _is_file(self.source) and not os.path.exists(self.source):
            self.last_error = f"video file {self.source} does not exist"
            return None
        if _is_url(self.source):
            cap = cv2.VideoCapture(self.source, cv2.CAP_FFMPEG,
                                   [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, OPEN_TIMEOUT_MS,
                                    cv2.CAP_PROP_READ_TIMEOUT_MSEC, READ_TIMEOUT_MS])
        else:
            cap = cv2.VideoCapture(self.source)
        if not cap.isOpened():
            cap.release()
            self.last_error = f"cv2.VideoCapture({self.source!r}) could not open the source"
            with self._cond:
                self.open_failures += 1
                self._cond.notify_all()
            return None
        return cap

    def _run(self):
        delay = self.reconnect_delay
        first = True
        while not self._stop.is_set():
            cap = self._open()
            if cap is None:
                self._stop.wait(delay)
                delay = min(delay * 2, 2.0)          # back off while the device is away
                continue
            if not first:
                self.reconnects += 1
            first = False
            delay = self.reconnect_delay
            period = 0.0
            if _is_file(self.source):                # pace a file like a live camera
                fps = self.fps or cap.get(cv2.CAP_PROP_FPS) or 30.0
                period = 1.0 / fps
            elif self.fps:
                period = 1.0 / self.fps
            t_next = time.monotonic()
            try:
                while not self._stop.is_set():
                    ok, img = cap.read()
                    stamp = time.monotonic()
                    if not ok or img is None:
                        self.last_error = "capture returned no frame (dropout or end of file)"
                        break
                    try:
                        frame = Frame(image=prepare(img, self.shape[:2], self.crop), stamp=stamp)
                    except DeviceError as exc:
                        self.last_error = str(exc)
                        break
                    with self._cond:
                        self._latest = frame
                        self.frames += 1
                        self._cond.notify_all()
                    if period:
                        t_next += period
                        self._stop.wait(max(0.0, t_next - time.monotonic()))
            finally:
                cap.release()

    # ------------------------------------------------------------------ Camera protocol
    def read(self) -> Frame:
        if self._stop.is_set():
            raise CameraError(f"camera {self.name!r} is closed")
        with self._cond:
            if self._latest is None:
                # a network source that refused the connection will not start later on its
                # own: report it now rather than after the whole first-frame timeout
                give_up = (lambda: self.open_failures > 0) if _is_url(self.source) else (lambda: False)
                self._cond.wait_for(lambda: self._latest is not None or give_up(),
                                    timeout=self.first_frame_timeout)
            frame = self._latest
        if frame is None and _is_url(self.source) and self.open_failures:
            raise CameraError(f"camera {self.name!r}: could not connect to {self.source!r} "
                              f"({self.last_error}). Check the URL (host, port, stream name) and "
                              "that the camera / `robolearn emulate --camera-port` is running.")
        if frame is None:
            raise CameraError(f"camera {self.name!r} ({self.source!r}) gave no frame within "
                              f"{self.first_frame_timeout:.1f} s: {self.last_error}. Check the "
                              "device index / URL / file path and that no other program holds it.")
        age = time.monotonic() - frame.stamp
        if age > self.stale_after:
            raise CameraError(f"camera {self.name!r} ({self.source!r}): newest frame is "
                              f"{age:.2f} s old (limit {self.stale_after:.2f} s), reconnecting: "
                              f"{self.last_error}")
        return frame

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
