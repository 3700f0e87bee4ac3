"""A closed race track: centre line, walls, ordered checkpoints and projection helpers.

The track is a sequence of straight and arc pieces (turtle-style), so the centre line, the
walls and the curvature are exact, and any closed shape can be described in a few numbers.
The centre line is also kept as a dense polyline with arclength, which is what progress,
lateral offset and heading error are measured against. The car drives counter-clockwise
(increasing arclength `s`); left of the centre line is a positive lateral offset.
"""
from __future__ import annotations

import bisect
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
    """Angle (float or array) wrapped into [-pi, pi)."""
    return (a + math.pi) % TWO_PI - math.pi


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
        """Exact piece geometry (start pose, arc centre, start arclength) plus a dense
        polyline of the centre line for plotting and vectorised use."""
        x = y = th = 0.0
        s0 = 0.0
        self._geo = []        # per piece: (s0, arclength, x0, y0, th0, sgn, R, cx, cy)
        self._piece_starts = []
        for p in self.pieces:
            self._piece_starts.append((x, y, th))
            if p.radius == 0.0:
                self._geo.append((s0, p.length, x, y, th, 0.0, 0.0, 0.0, 0.0))
                x, y = x + p.length * math.cos(th), y + p.length * math.sin(th)
            else:
                sgn = 1.0 if p.angle > 0 else -1.0
                cx, cy = x - sgn * p.radius * math.sin(th), y + sgn * p.radius * math.cos(th)
                self._geo.append((s0, p.arclength, x, y, th, sgn, p.radius, cx, cy))
                th = th + p.angle
                x, y = cx + sgn * p.radius * math.sin(th), cy - sgn * p.radius * math.cos(th)
            s0 += p.arclength
        if math.hypot(x, y) > 1e-6 or abs(wrap_angle(th)) > 1e-6:
            raise ConfigError(f"track pieces do not close: they end at ({x:.3f}, {y:.3f}) heading "
                              f"{th:.3f} rad instead of (0, 0) heading 0 (mod 2 pi)")
        self.length = s0
        self._s0 = [g[0] for g in self._geo]
        self.n_points = max(8, int(math.ceil(self.length / spacing)))
        self.s = np.arange(self.n_points) * (self.length / self.n_points)
        pose = np.array([self.point_at(v) for v in self.s])
        self.points = pose[:, :2]                                  # (N, 2) centre line
        self.heading = pose[:, 2]                                  # (N,) tangent direction
        self.curvature = np.array([self.curvature_at(v) for v in self.s])   # 1/m, + = left

    def _piece_at(self, s: float) -> int:
        return bisect.bisect_right(self._s0, s) - 1

    def point_at(self, s: float) -> tuple[float, float, float]:
        """(x, y, heading) of the centre line at arclength `s` (any real, wraps)."""
        s = s % self.length
        s0, _, x, y, th, sgn, r, cx, cy = self._geo[self._piece_at(s)]
        u = s - s0
        if sgn == 0.0:
            return x + u * math.cos(th), y + u * math.sin(th), float(wrap_angle(th))
        a = th + sgn * u / r
        return cx + sgn * r * math.sin(a), cy - sgn * r * math.cos(a), float(wrap_angle(a))

    def curvature_at(self, s: float) -> float:
        """Signed curvature (1/m, + = left turn) at arclength `s`."""
        g = self._geo[self._piece_at(s % self.length)]
        return g[5] / g[6] if g[5] else 0.0

    def max_curvature(self, s0: float, s1: float) -> float:
        """Largest |curvature| of the pieces overlapping [s0, s1] (for speed planning)."""
        best = 0.0
        i = self._piece_at(s0 % self.length)
        covered = self._geo[i][0] + self._geo[i][1] - s0 % self.length
        span = s1 - s0
        for _ in range(len(self._geo)):
            g = self._geo[i]
            if g[5]:
                best = max(best, 1.0 / g[6])
            if covered >= span:
                break
            i = (i + 1) % len(self._geo)
            covered += self._geo[i][1]
        return best

    # ---------------------------------------------------------------------- projection
    def _project_piece(self, i: int, x: float, y: float):
        """(s, lateral, heading, outside) of (x, y) against piece i; `outside` is how far
        (m along the line, signed: < 0 before its start, > 0 past its end) the foot point
        falls outside the piece, 0 when inside."""
        s0, ln, x0, y0, th, sgn, r, cx, cy = self._geo[i]
        if sgn == 0.0:
            c, sn = math.cos(th), math.sin(th)
            dx, dy = x - x0, y - y0
            t = dx * c + dy * sn
            lat = dy * c - dx * sn
            head = th
        else:
            a_len = ln / r                                   # |angle| of the arc
            phi = math.atan2(y - cy, x - cx) - (th - sgn * math.pi / 2)
            gap = (TWO_PI - a_len) / 2                       # split the unused angle evenly
            u = (sgn * phi + gap) % TWO_PI - gap             # angle travelled along the arc
            t = u * r
            lat = sgn * (r - math.hypot(x - cx, y - cy))
            head = th + sgn * u
        out = t if t < 0.0 else (t - ln if t > ln else 0.0)
        return s0 + min(max(t, 0.0), ln), lat, head, out

    def project(self, x: float, y: float, hint: int | None = None):
        """Nearest centre-line point to (x, y): returns (s, lateral, piece, heading).

        `lateral` is the signed distance (m, + = left of the driving direction) and `heading`
        the centre-line direction there. With `hint` (the piece returned last time) the search
        walks from that piece to its neighbours, a few microseconds per step; without it
        every piece is tried.
        """
        n = len(self._geo)
        if hint is not None:
            i = hint % n
            prev_out = None
            for _ in range(n):
                s, lat, head, out = self._project_piece(i, x, y)
                if out == 0.0 or (prev_out is not None and (out > 0) != (prev_out > 0)):
                    if abs(lat) <= self.width + 0.5:   # plausible: stay local
                        return s % self.length, lat, i, float(wrap_angle(head))
                    break
                prev_out = out
                i = (i + (1 if out > 0 else -1)) % n
        best = None
        for i in range(n):
            s, lat, head, out = self._project_piece(i, x, y)
            d = math.hypot(out, lat)
            if best is None or d < best[0]:
                best = (d, s % self.length, lat, i, float(wrap_angle(head)))
        return best[1:]

    def heading_error(self, yaw: float, heading: float) -> float:
        """Car yaw minus the centre-line heading, wrapped to [-pi, pi)."""
        return float(wrap_angle(yaw - heading))

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
