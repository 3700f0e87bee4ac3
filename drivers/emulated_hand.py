"""A person's hand at the emulated robot's table: puts the cube back where episodes start.

Why: on a real arm, when a reset fails (the cube knocked out of reach, a grasp that keeps
slipping) the session holds the robot and asks the operator, who puts the cube back by hand
(robolearn/resets/prompt.py). An emulated session needs that hand too, and it must be as
visible as a person's: it is an explicit endpoint of the emulator (POST /hand/place_cube,
beside /truth.json), called only by the emulated operator when a prompt is answered, and
counted (`moves`, also in /truth.json), never used silently by a reset controller, a
learner or a policy.

The hand writes the cube's pose in the plant under the physics lock (the one place the
emulator's world is changed from outside the servo bus), at a uniform point of the start
region with the start yaw of `ArmTask.sample_cube` (radial +-0.3 rad), away from the
fingers, at rest.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from robolearn.errors import ConfigError

HAND_ROUTE = "/hand/place_cube"
#: keep the cube this far (m, in x-y) from a grasp point that is low enough to touch it
FINGER_CLEARANCE = 0.06


class EmulatedHand:
    """`place_cube(request)`: the cube to `request["xy"]` (m) or a random start-region point."""

    def __init__(self, model, data, lock: threading.Lock, seed: int = 0):
        import mujoco

        self.model, self.data, self.lock = model, data, lock
        try:
            jid = model.joint("cube").id
        except KeyError:
            raise ConfigError("the emulated hand needs a model with a free `cube` joint (the arm)") from None
        self._qpos = int(model.jnt_qposadr[jid])
        self._dof = int(model.jnt_dofadr[jid])
        self._ee = model.site("ee").id
        self._mj = mujoco
        self.rng = np.random.default_rng(seed + 7919)
        self.moves = 0

    def place_cube(self, request: dict) -> dict:
        from robolearn.sim.arm_workspace import CUBE_HALF, CUBE_REGION_HIGH, CUBE_REGION_LOW

        xy = request.get("xy")
        if xy is not None:
            xy = np.asarray(xy, dtype=float)
            if xy.shape != (2,) or not np.all(np.isfinite(xy)):
                raise ConfigError(f"hand: xy={request['xy']!r}: give [x, y] in metres")
        with self.lock:
            ee = self.data.site_xpos[self._ee].copy()
            if xy is None:
                for _ in range(100):
                    xy = self.rng.uniform(CUBE_REGION_LOW, CUBE_REGION_HIGH)
                    if ee[2] > 0.08 or math.hypot(*(xy - ee[:2])) > FINGER_CLEARANCE:
                        break
            yaw = math.atan2(xy[1], xy[0]) + self.rng.uniform(-0.3, 0.3)
            q, d = self._qpos, self.data
            d.qpos[q:q + 3] = (xy[0], xy[1], CUBE_HALF)
            d.qpos[q + 3:q + 7] = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
            d.qvel[self._dof:self._dof + 6] = 0.0
            self._mj.mj_forward(self.model, d)
            self.moves += 1
        return {"cube": [float(xy[0]), float(xy[1]), CUBE_HALF], "yaw": yaw, "moves": self.moves}
