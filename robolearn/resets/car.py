"""Car recovery (FastRLAP-style): back off the wall, turn toward the next checkpoint, hand back.

Why: a car that practises on its own crashes; nobody carries it back. This controller is the
physical reset of CarLap and the recovery of autonomous practice (robolearn.resets.practice):
stop; if blocked or facing away from the next checkpoint, reverse with the wheels turned so the
nose swings toward it; then creep forward toward it until the car is inside the lane and
pointing along it; stop and return. It only sends steering/throttle commands.

Localisation: in sim the chassis pose comes from the simulator (a read, not a write); on
hardware from the external pose tracker (`task.locate()`, None while it has lost the car: the
car waits braked, then the recovery fails and the supervisor retries or asks the operator), and
a wall is felt as an IMU impact (`task.touching_wall()`). The
checkpoints it aims at are the track's centre line by default, or a list of (x, y) points, e.g.
extracted from one slow demonstration lap (robolearn.resets.checkpoints).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robolearn.errors import ResetError


@dataclass
class RecoverOntoTrack:
    """Reset controller for CarLap. `checkpoints`: optional (N, 2) array of points along the lap
    in driving order (default: points `aim_ahead` metres ahead on the track centre line)."""

    aim_ahead: float = 1.0          # m ahead of the car's projection on the centre line
    lane_margin: float = 0.15       # m: done only this far inside the walls (car edge)
    heading_tol: float = 0.35       # rad: done when pointing this close to the target
    reverse_throttle: float = -0.5
    forward_throttle: float = 0.3
    reverse_s: float = 0.8          # s of reversing per back-off
    checkpoints: np.ndarray | None = None

    kind = "scripted"

    #: s the car waits, braked, for the pose tracker to see it again before the recovery fails
    blind_wait_s: float = 2.0

    def run(self, task, rng):
        car = task.car
        dt = 1.0 / task.control_hz
        if task.track is None:    # no pose (hardware without a tracker): stop and let the episode begin
            yield from _brake(car, dt)
            return
        track = task.track
        from robolearn.sim.car import HALF_WIDTH

        lane = track.half_width - getattr(task.sim, "half_width", HALF_WIDTH) - self.lane_margin
        yield from _brake(car, dt)
        idx = None
        for _ in range(12):                       # back-off / creep cycles before giving up
            x, y, yaw = yield from self._locate(task, dt)
            s, lateral, idx, heading = track.project(x, y, hint=idx)
            alpha = self._bearing(track, x, y, yaw, s)
            touching = task.touching_wall()
            if abs(lateral) < lane and abs(alpha) < self.heading_tol and not touching:
                yield from _brake(car, dt)
                return
            nose_in = self._nose_nearer_wall(track, x, y, yaw, idx)
            if (touching or abs(alpha) > 1.0 or abs(lateral) >= lane) and nose_in:
                # reverse with the wheels turned away: the nose swings toward the target; stop
                # early once the tail nears the wall
                steer = -math.copysign(car.spec.max_steer, alpha)
                for k in range(int(self.reverse_s / dt)):
                    car.command(steer, self.reverse_throttle)
                    car.advance(dt)
                    yield dt
                    pose = task.locate()
                    if pose is None:              # blind: stop, and look again from the top
                        break
                    x, y, yaw = pose
                    if k > 3 and (task.touching_wall() or not self._nose_nearer_wall(track, x, y, yaw, idx)):
                        break
                yield from _brake(car, dt)
            # creep forward toward the target until aligned (or blocked again)
            for k in range(int(1.5 / dt)):
                pose = task.locate()
                if pose is None:
                    break
                x, y, yaw = pose
                s, lateral, idx, heading = track.project(x, y, hint=idx)
                alpha = self._bearing(track, x, y, yaw, s)
                # (a side scraping the wall is driven off it; a new hit after a few steps stops;
                # a car facing away from the target turns on full lock: with the back-off above
                # that is a K-turn, where stopping at a large angle left a car that faced the wrong
                # way in the lane unrecoverable: no back-off (its nose is not at a wall), no creep)
                if (abs(alpha) < self.heading_tol and abs(lateral) < lane) or (k > 5 and task.touching_wall()):
                    break
                steer = float(np.clip(2.0 * alpha, -1.0, 1.0)) * car.spec.max_steer
                car.command(steer, self.forward_throttle)
                car.advance(dt)
                yield dt
            yield from _brake(car, dt)
        raise ResetError("the car could not get back onto the track in 12 back-off attempts "
                         "(stuck or rolled over?); put it on the track")

    def _locate(self, task, dt: float):
        """The car's pose (sim: the simulator's; hardware: the tracker's), waiting braked up to
        `blind_wait_s` while the tracker has lost it; a car that stays unseen fails the reset.
        A tracker stream that is only late (silent, not "untracked": a loaded machine) is waited
        out braked, up to its `lost_after` (then `DeviceDisconnectedError`, drivers/tracker.py)."""
        waited = 0.0
        tracker = getattr(task, "tracker", None)
        while True:
            pose = task.locate()
            if pose is not None:
                return pose
            late = tracker is not None and tracker.status() == "stale"
            if late:
                tracker.check_alive()
            if waited >= self.blind_wait_s and not late:
                raise ResetError(f"the pose tracker has not seen the car for {self.blind_wait_s:.1f} s "
                                 "(occluded, out of view, or the tracker is down): the recovery cannot "
                                 "steer blind; check the tracker")
            car = task.car
            v = car.read().speed
            car.command(0.0, 0.0 if abs(v) < 0.05 else float(np.clip(-10.0 * v / car.spec.max_speed, -1.0, 1.0)))
            car.advance(dt)
            waited += 0.0 if late else dt
            yield dt

    @staticmethod
    def _nose_nearer_wall(track, x, y, yaw, idx) -> bool:
        """Is the front bumper closer to a wall than the rear one (then backing up frees it)?"""
        from robolearn.sim.car import HALF_LENGTH

        c, s_ = math.cos(yaw), math.sin(yaw)
        lat_f = track.project(x + HALF_LENGTH * c, y + HALF_LENGTH * s_, hint=idx)[1]
        lat_r = track.project(x - HALF_LENGTH * c, y - HALF_LENGTH * s_, hint=idx)[1]
        return abs(lat_f) >= abs(lat_r)

    def _bearing(self, track, x, y, yaw, s) -> float:
        """Angle (rad, + = left) from the car's heading to the point it should head for."""
        if self.checkpoints is not None:
            tx, ty = next_checkpoint(self.checkpoints, x, y, yaw)
        else:
            tx, ty, _ = track.point_at(s + self.aim_ahead)
        return _wrap(math.atan2(ty - y, tx - x) - yaw)


def next_checkpoint(points: np.ndarray, x: float, y: float, yaw: float) -> tuple[float, float]:
    """The checkpoint after the nearest one (the lap's driving order), as the point to head for."""
    d = np.hypot(points[:, 0] - x, points[:, 1] - y)
    i = int(np.argmin(d))
    j = (i + 1) % len(points)
    return float(points[j, 0]), float(points[j, 1])


def _brake(car, dt: float, max_s: float = 3.0):
    """Brake to a standstill (negative throttle while rolling forward, positive while reversing)."""
    for _ in range(int(max_s / dt)):
        v = car.read().speed
        if abs(v) < 0.05:
            break
        car.command(0.0, float(np.clip(-2.0 * v / car.spec.max_speed * 5, -1.0, 1.0)))
        car.advance(dt)
        yield dt
    car.command(0.0, 0.0)


def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi
