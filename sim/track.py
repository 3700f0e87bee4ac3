"""A closed race track: centre line, walls, ordered checkpoints and projection helpers.

The track is a sequence of straight and arc pieces (turtle-style), so the centre line, the
walls and the curvature are exact, and any closed shape can be described in a few numbers.
The centre line is also kept as a dense polyline with arclength, which is what progress,
lateral offset and heading error are measured against. The car drives counter-clockwise
(increasing arclength `s`); left of the centre line is a positive lateral offset.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robolearn.errors import ConfigError

TWO_PI = 2.0 * math.pi


@dataclass(frozen=True)
class Piece:
    """A straight (`radius == 0`) of `length` metres, or a left arc of `radius` and `angle` rad."""

    length: float = 0.0
    radius: float = 0.0
    angle: float = 0.0

    @property
    def arclength(self) -> float:
        return self.length if self.radius == 0.0 else self.radius * abs(self.angle)


def rounded_rectangle(long: float = 4.0, short: float = 1.5, radius: float = 1.0) -> tuple[Piece, ...]:
    """Two straights of `long` m, two of `short` m, joined by four left quarter turns; the
    start line is in the middle of the first long straight."""
    q = Piece(radius=radius, angle=math.pi / 2)
    return (Piece(long / 2), q, Piece(short), q, Piece(long), q, Piece(short), q, Piece(long / 2))


def wrap_angle(a):
    """Angle(s) wrapped into [-pi, pi)."""
    return (np.asarray(a) + math.pi) % TWO_PI - math.pi


class Track:
    """Closed track of width `width` (wall to wall, metres) built from `pieces`.

    The start/finish line is at `s = 0`, the start of the first piece, at the origin heading +x.
    Checkpoint k sits at `s = k * length / n_checkpoints`; checkpoint 0 is the start line.
    """

    def __init__(self, pieces: tuple[Piece, ...] | None = None, width: float = 1.0,
                 n_checkpoints: int = 8, spacing: float = 0.02,
                 wall_height: float = 0.15, wall_thickness: float = 0.05):
        self.pieces = tuple(rounded_rectangle() if pieces is None else pieces)
        if not self.pieces:
            raise ConfigError("a track needs at least one piece")
        if not (0.3 <= float(width) <= 5.0):
            raise ConfigError(f"track width={width!r} m: choose a value in [0.3, 5] m")
        if int(n_checkpoints) < 2:
            raise ConfigError(f"n_checkpoints={n_checkpoints!r}: need at least 2 (start line + one)")
        for p in self.pieces:
            if p.radius < 0 or p.length < 0 or (p.radius > 0 and p.radius <= width / 2):
                raise ConfigError(f"track piece {p}: arc radius must exceed half the width "
                                  f"({width / 2} m) and lengths must be >= 0")
        self.width = float(width)
        self.half_width = self.width / 2
        self.n_checkpoints = int(n_checkpoints)
        self.wall_height = float(wall_height)
        self.wall_thickness = float(wall_thickness)
        self._build_centre_line(spacing)
        self.checkpoints_s = np.arange(self.n_checkpoints) * self.length / self.n_checkpoints

    # ------------------------------------------------------------------------ geometry
    def _build_centre_line(self, spacing: float) -> None:
        pts, heads, curv = [], [], []
        x = y = th = 0.0
        self._piece_starts = []          # (x, y, heading) at the start of each piece
        for p in self.pieces:
            self._piece_starts.append((x, y, th))
            n = max(1, int(math.ceil(p.arclength / spacing)))
            u = np.arange(n) / n         # the end point belongs to the next piece
            if p.radius == 0.0:
                d = u * p.length
                pts.append(np.stack([x + d * math.cos(th), y + d * math.sin(th)], 1))
                heads.append(np.full(n, th))
                curv.append(np.zeros(n))
                x, y = x + p.length * math.cos(th), y + p.length * math.sin(th)
            else:
                sgn = 1.0 if p.angle > 0 else -1.0
                cx, cy = x - sgn * p.radius * math.sin(th), y + sgn * p.radius * math.cos(th)
                a = th + u * p.angle
                pts.append(np.stack([cx + sgn * p.radius * np.sin(a), cy - sgn * p.radius * np.cos(a)], 1))
                heads.append(a)
                curv.append(np.full(n, sgn / p.radius))
                th = th + p.angle
                x, y = cx + sgn * p.radius * math.sin(th), cy - sgn * p.radius * math.cos(th)
        if math.hypot(x, y) > 1e-6 or abs(wrap_angle(th)) > 1e-6:
            raise ConfigError(f"track pieces do not close: they end at ({x:.3f}, {y:.3f}) heading "
                              f"{th:.3f} rad instead of (0, 0) heading 0 (mod 2 pi)")
        self.points = np.concatenate(pts)                     # (N, 2) centre line
        self.heading = wrap_angle(np.concatenate(heads))      # (N,) tangent direction
        self.curvature = np.concatenate(curv)                 # (N,) 1/m, + = left turn
        seg = np.roll(self.points, -1, axis=0) - self.points
        self._seg = seg
        self._seg_len = np.hypot(seg[:, 0], seg[:, 1])
        self._seg_len2 = self._seg_len ** 2
        self.s = np.concatenate([[0.0], np.cumsum(self._seg_len)[:-1]])
        self.length = float(np.sum(self._seg_len))
        self.n_points = len(self.points)

    def point_at(self, s: float) -> tuple[float, float, float]:
        """(x, y, heading) of the centre line at arclength `s` (any real, wraps)."""
        s = s % self.length
        i = int(np.searchsorted(self.s, s, side="right")) - 1
        f = (s - self.s[i]) / self._seg_len[i]
        x, y = self.points[i] + f * self._seg[i]
        return float(x), float(y), float(self.heading[i])

    def curvature_at(self, s: float) -> float:
        s = s % self.length
        return float(self.curvature[int(np.searchsorted(self.s, s, side="right")) - 1])

    def max_curvature(self, s0: float, s1: float, n: int = 8) -> float:
        """Largest |curvature| sampled on [s0, s1] (for speed planning)."""
        ss = np.linspace(s0, s1, n) % self.length
        idx = np.searchsorted(self.s, ss, side="right") - 1
        return float(np.max(np.abs(self.curvature[idx])))

    # ---------------------------------------------------------------------- projection
    def project(self, x: float, y: float, hint: int | None = None, window: int = 40):
        """Nearest centre-line point to (x, y): returns (s, lateral, index).

        `lateral` is the signed distance (m, + = left of the driving direction). With `hint`
        (the index returned last time) only +-`window` segments are searched, which keeps the
        per-step cost independent of the track length; without it the whole line is searched.
        """
        if hint is None:
            idx = np.arange(self.n_points)
        else:
            idx = np.arange(hint - window, hint + window + 1) % self.n_points
        p = self.points[idx]
        d = self._seg[idx]
        rx, ry = x - p[:, 0], y - p[:, 1]
        t = np.clip((rx * d[:, 0] + ry * d[:, 1]) / self._seg_len2[idx], 0.0, 1.0)
        ex, ey = rx - t * d[:, 0], ry - t * d[:, 1]
        k = int(np.argmin(ex * ex + ey * ey))
        i = int(idx[k])
        cross = d[k, 0] * ry[k] - d[k, 1] * rx[k]
        lateral = math.copysign(math.hypot(ex[k], ey[k]), cross)
        s = (self.s[i] + t[k] * self._seg_len[i]) % self.length
        return float(s), float(lateral), i

    def heading_error(self, yaw: float, index: int) -> float:
        """Car yaw minus the centre-line heading at `index`, wrapped to [-pi, pi)."""
        return float(wrap_angle(yaw - self.heading[index]))

    # --------------------------------------------------------------------------- walls
    def wall_boxes(self, max_chord: float = 0.3):
        """Wall boxes as (centre x, centre y, yaw, half length): left side then right side.

        Straights are cut every <= 0.5 m (red/white kerb pattern, a motion cue for pixel
        policies); arcs are split into chords no longer than `max_chord`, each lengthened by
        half a thickness so neighbouring boxes overlap.
        """
        off, ext = self.half_width + self.wall_thickness / 2, self.wall_thickness / 2
        return (self.strip_boxes(+off, max_chord, ext, 0.5) + self.strip_boxes(-off, max_chord, ext, 0.5))

    def strip_boxes(self, offset: float, max_chord: float = 0.3, extend: float = 0.0,
                    max_straight: float = math.inf):
        """Boxes (centre x, centre y, yaw, half length) following the centre line shifted
        `offset` m to the left: straights cut into pieces of at most `max_straight`, arcs into
        chords of at most `max_chord`; each box lengthened by `extend` at both ends."""
        boxes = []
        for p, (x, y, th) in zip(self.pieces, self._piece_starts):
            nx, ny = -math.sin(th), math.cos(th)
            if p.radius == 0.0:
                n = int(math.ceil(p.length / max_straight)) if p.length > 0.0 else 0
                for j in range(n):
                    d = (j + 0.5) * p.length / n
                    boxes.append((x + offset * nx + d * math.cos(th), y + offset * ny + d * math.sin(th),
                                  th, p.length / n / 2 + extend))
                continue
            sgn = 1.0 if p.angle > 0 else -1.0
            r = p.radius - sgn * offset           # strip radius about the arc centre
            ox, oy = x - sgn * p.radius * math.sin(th), y + sgn * p.radius * math.cos(th)
            n = max(1, int(math.ceil(r * abs(p.angle) / max_chord)))
            for j in range(n):
                a0, a1 = th + p.angle * j / n, th + p.angle * (j + 1) / n
                px0, py0 = ox + sgn * r * math.sin(a0), oy - sgn * r * math.cos(a0)
                px1, py1 = ox + sgn * r * math.sin(a1), oy - sgn * r * math.cos(a1)
                half = math.hypot(px1 - px0, py1 - py0) / 2 + extend
                boxes.append(((px0 + px1) / 2, (py0 + py1) / 2, math.atan2(py1 - py0, px1 - px0), half))
        return boxes

    def bounds(self) -> tuple[float, float, float, float]:
        """(xmin, ymin, xmax, ymax) of the track including walls."""
        m = self.half_width + self.wall_thickness
        lo, hi = self.points.min(0) - m, self.points.max(0) + m
        return float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])
