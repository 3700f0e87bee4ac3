"""MP4 camera streams: lossless while recording, decoded back to the exact uint8 frames.

Why lossless: a learner trained from a demo video must see the pixels the robot saw. H.264 in
its RGB flavour (`libx264rgb`, `-qp 0`) is bit-exact and still compresses rendered/camera
frames several-fold, while yuv420p would blur colour edges of 84x84 images. Exports for other
ecosystems (`transcode`) use the widely decodable yuv420p instead.

Frames are streamed to the bundled ffmpeg (imageio-ffmpeg) as they arrive, so a long episode
never sits in memory.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from robolearn.errors import DatasetError

#: ffmpeg settings for recordings: bit-exact RGB H.264.
LOSSLESS = dict(codec="libx264rgb", pix_fmt_out="rgb24", output_params=["-qp", "0", "-preset", "veryfast"])
#: settings for exports other tools must decode (browsers, torchvision, pyav).
PORTABLE = dict(codec="libx264", pix_fmt_out="yuv420p", output_params=["-crf", "18", "-preset", "veryfast"])


class VideoWriter:
    """Append HxWx3 uint8 frames to an MP4; `close()` finalises the file (and fsyncs it)."""

    def __init__(self, path: str | os.PathLike, shape: tuple[int, int, int], fps: float,
                 settings: dict | None = None):
        import imageio_ffmpeg

        self.path = Path(path)
        self.shape = tuple(int(s) for s in shape)
        if len(self.shape) != 3 or self.shape[2] != 3:
            raise DatasetError(f"{self.path.name}: frames must be HxWx3 RGB, got shape {shape}")
        s = dict(LOSSLESS if settings is None else settings)
        h, w = self.shape[:2]
        if s["pix_fmt_out"] == "yuv420p" and (h % 2 or w % 2):
            raise DatasetError(f"{self.path.name}: yuv420p video needs even width/height, got {w}x{h}")
        self._gen = imageio_ffmpeg.write_frames(
            str(self.path), (w, h), pix_fmt_in="rgb24", fps=float(fps), quality=None,
            macro_block_size=1, ffmpeg_log_level="error", **s)
        self._gen.send(None)  # start ffmpeg
        self.frames = 0
        self._closed = False

    def write(self, frame: np.ndarray) -> None:
        frame = np.asarray(frame)
        if frame.shape != self.shape or frame.dtype != np.uint8:
            raise DatasetError(f"{self.path.name}: frame {self.frames} has shape {frame.shape} "
                               f"dtype {frame.dtype}, expected {self.shape} uint8")
        self._gen.send(np.ascontiguousarray(frame))
        self.frames += 1

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._gen.close()  # waits for ffmpeg to write the moov atom
        fsync_file(self.path)

    def abort(self) -> None:
        """Stop ffmpeg without caring about the file (the episode is being discarded). It is
        killed, not waited for: a Ctrl-C must not wait on an encoder under load. (imageio-ffmpeg
        kills its ffmpeg when the writer generator receives a BaseException such as
        GeneratorExit's sibling KeyboardInterrupt; `close()` would wait for it instead.)"""
        if not self._closed:
            self._closed = True
            try:
                self._gen.throw(KeyboardInterrupt)
            except (KeyboardInterrupt, StopIteration, Exception):  # noqa: BLE001 - thrown away anyway
                pass


def read_video(path: str | os.PathLike, expect_frames: int | None = None) -> np.ndarray:
    """Decode every frame of an MP4 to a (T, H, W, 3) uint8 array.

    Raises DatasetError naming the file if it is missing, undecodable, or (with
    `expect_frames`) holds a different number of frames than the episode's data says.
    """
    import imageio_ffmpeg

    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: video file is missing (was the episode copied completely?)")
    try:
        gen = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24")
        meta = gen.__next__()
        w, h = meta["size"]
        frames = [np.frombuffer(buf, dtype=np.uint8).reshape(h, w, 3) for buf in gen]
    except (RuntimeError, OSError, StopIteration, ValueError) as exc:
        raise DatasetError(f"{path}: cannot decode video ({exc}); the file is truncated or corrupt") from None
    video = np.stack(frames) if frames else np.zeros((0, h, w, 3), np.uint8)
    if expect_frames is not None and len(video) != expect_frames:
        raise DatasetError(f"{path}: has {len(video)} frames but the episode data needs {expect_frames}; "
                           "the video is truncated or belongs to another episode")
    return video


def write_video(path: str | os.PathLike, frames: np.ndarray, fps: float, settings: dict | None = None) -> None:
    """Write a whole (T, H, W, 3) uint8 array in one go."""
    frames = np.asarray(frames)
    writer = VideoWriter(path, frames.shape[1:], fps, settings)
    try:
        for f in frames:
            writer.write(f)
    finally:
        writer.close()


def fsync_file(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
