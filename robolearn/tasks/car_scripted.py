"""Pure-pursuit driver for CarLap: the sanity check of the car sim and a demonstration source.

Steering (bicycle model about the rear axle): pick the centre-line point a lookahead distance
`ld` ahead of the car's projection, let `alpha` be its bearing in the car frame, and steer
`delta = atan(2 * wheelbase * sin(alpha) / ld)`, the arc through that point. The lookahead grows
with speed, which damps the weave a fixed lookahead shows at speed.
Speed: the target is the lowest of the straight-line speed and `sqrt(a_lat / |curvature|)` over
the stretch the car needs to brake for; throttle = feed-forward + proportional on the error.
It reads the car pose from `task.locate()`: the simulator's in sim (allowed for scripted
controllers), the external pose tracker's on hardware (late and noisy, as a real one is); while
it has no pose it keeps its last steering and brakes the car to a stop (`task.blind_throttle`,
what the task itself does on a tracker dropout; with another pose source, e.g. the emulator's
truth for a reference lap, nothing else would).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class PurePursuitConfig:
    lookahead_min: float = 0.6      # m
    lookahead_gain: float = 0.3     # s: lookahead = min + gain * speed
    lookahead_max: float = 1.6      # m
    v_straight: float = 3.5         # m/s
    a_lat: float = 4.5              # m/s^2 lateral acceleration allowed in corners
    brake_time: float = 0.8         # s of travel scanned ahead for corners
    kp_speed: float = 0.8           # throttle per m/s of speed error


class PurePursuit:
    """`Controller` for a CarLap env (sim, or hardware with a pose tracker)."""

    def __init__(self, env, config: PurePursuitConfig | None = None, locate=None):
        """`locate() -> (x, y, yaw) | None` replaces `task.locate()` (e.g. the emulator's true
        pose for a session's reference lap, or what an emulated operator sees)."""
        base = env.unwrapped
        self.task = base.task
        self.locate = locate or base.task.locate
        self.track = base.task.track
        self.car = base.task.car
        self.cfg = config or PurePursuitConfig()
        self._idx: int | None = None
        self.blind_steps = 0           # steps without a pose (counted for reports)
        self._last = np.zeros(2, dtype=np.float32)

    def reset(self) -> None:
        self._idx = None
        self._last = np.zeros(2, dtype=np.float32)

    def act(self, obs=None) -> np.ndarray:
        cfg, tr = self.cfg, self.track
        wb, max_steer = self.car.spec.wheelbase, self.car.spec.max_steer
        pose = self.locate()
        if pose is None:
            self.blind_steps += 1
            brake = getattr(self.task, "blind_throttle", None)
            if brake is not None:
                self._last = np.array([self._last[0], brake(float(self._last[1]))], dtype=np.float32)
            return self._last.copy()
        x, y, yaw = pose
        v = self.car.read().speed
        # rear-axle reference point (the chassis origin is midway between the axles)
        rx, ry = x - 0.5 * wb * math.cos(yaw), y - 0.5 * wb * math.sin(yaw)
        s, _, self._idx, _ = tr.project(rx, ry, hint=self._idx)
        ld = min(max(cfg.lookahead_min + cfg.lookahead_gain * max(v, 0.0), cfg.lookahead_min),
                 cfg.lookahead_max)
        tx, ty, _ = tr.point_at(s + ld)
        dx, dy = tx - rx, ty - ry
        lx = math.cos(yaw) * dx + math.sin(yaw) * dy
        ly = -math.sin(yaw) * dx + math.cos(yaw) * dy
        alpha = math.atan2(ly, lx)
        delta = math.atan2(2.0 * wb * math.sin(alpha), math.hypot(lx, ly))
        steer = min(max(delta / max_steer, -1.0), 1.0)

        kappa = tr.max_curvature(s, s + 0.3 + cfg.brake_time * max(v, 0.0))
        v_target = cfg.v_straight if kappa < 1e-6 else min(cfg.v_straight, math.sqrt(cfg.a_lat / kappa))
        throttle = v_target / self.car.spec.max_speed + cfg.kp_speed * (v_target - v)
        throttle = min(max(throttle, -1.0), 1.0)
        self._last = np.array([steer, throttle], dtype=np.float32)
        return self._last.copy()
