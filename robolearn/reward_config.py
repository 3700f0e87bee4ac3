"""The `[reward]` table of launch files: its fields and their checks.

Why at the bottom: the training config (policies) and the runtime config check a `[reward]`
table when they are read, before any model is loaded; building the model from it is the
rewards layer's job (robolearn/rewards/serving.py).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from robolearn.configs import check_keys
from robolearn.errors import ConfigError

KINDS = ("classifier", "progress", "clip", "human", "cube_finder", "reach_distance")
WHERE = ("env", "learner", "server")
HIDDEN = ("missing", "last_seen")  # cube_finder: what a frame with the cube hidden gives (RewardConfig.hidden)


@dataclass
class RewardConfig:
    """The `[reward]` table. `model` is a folder from `robolearn reward train` (kind read from its
    reward.json) or, for kind "clip", a local CLIP folder (`goal`, `baseline`, `alpha`), or for kind
    "cube_finder" (ArmPush on a robot: the task's reward at the camera's cube position,
    rewards/push_camera.py) a cube finder folder from the session's camera calibration."""

    model: str | None = None
    kind: str | None = None             # None: from the model folder's reward.json
    where: str = "env"                  # env: in the loop (cheap models); learner: beside it;
                                        # server: a `robolearn reward serve` process the learner asks
    address: str | None = None          # server: its socket, "tcp://HOST:PORT" (finetune picks one)
    timeout_s: float = 2.0              # server: no reply in this long = the server is down
    max_held: int = 10_000              # server: transitions held while it is down (oldest dropped)
    threshold: float | None = None      # override the classifier's / CLIP's success threshold
    device: str = "cpu"
    goal: str | None = None             # clip: goal prompt, e.g. "a red cube lifted above the table"
    baseline: str | None = None         # clip: baseline prompt, e.g. "a red cube on a table"
    alpha: float = 1.0                  # clip: projection strength in [0, 1]
    camera: str | None = None           # clip: which camera (default: the first)
    require_grasp: bool = False         # arm: success also needs the gripper closed on something
                                        # (measured; rewards/grasp_check.py); where = "env" only
    hidden: str = "missing"             # cube_finder: a frame where the arm hides the cube gives a
                                        # MISSING reward ("missing", dropped by the learner) or the
                                        # reward at the cube's last sighting this episode ("last_seen")

    def validate(self) -> "RewardConfig":
        if self.kind is None and self.model is None:
            raise ConfigError("[reward]: give model = \"DIR\" (from `robolearn reward train`) or kind = \"human\"")
        if self.kind is not None and self.kind not in KINDS:
            raise ConfigError(f"[reward] kind={self.kind!r}: choose one of {', '.join(KINDS)}")
        if self.where not in WHERE:
            raise ConfigError(f"[reward] where={self.where!r}: choose one of {', '.join(WHERE)}")
        if self.address is not None:
            check_address(self.address, "[reward] address")
        if not (isinstance(self.timeout_s, (int, float)) and math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ConfigError(f"[reward] timeout_s={self.timeout_s!r}: must be a number of seconds > 0")
        if not (isinstance(self.max_held, int) and not isinstance(self.max_held, bool) and self.max_held >= 1):
            raise ConfigError(f"[reward] max_held={self.max_held!r}: must be an integer >= 1")
        if self.kind == "human" and self.where == "server":
            raise ConfigError("[reward] kind='human' labels come from a device at the robot: where = \"server\" "
                              "cannot serve them; use where = \"env\"")
        if self.kind == "clip" and not self.goal:
            raise ConfigError("[reward] kind='clip' needs goal = \"...\" (the goal prompt)")
        if not (isinstance(self.alpha, (int, float)) and 0.0 <= self.alpha <= 1.0):
            raise ConfigError(f"[reward] alpha={self.alpha!r}: must be in [0, 1]")
        if self.threshold is not None and not (isinstance(self.threshold, (int, float)) and math.isfinite(self.threshold)):
            raise ConfigError(f"[reward] threshold={self.threshold!r}: must be a number")
        if not isinstance(self.require_grasp, bool):
            raise ConfigError(f"[reward] require_grasp={self.require_grasp!r}: true or false")
        if self.kind == "cube_finder":
            if not self.model:
                raise ConfigError("[reward] kind='cube_finder' needs model = \"DIR\": a cube finder folder "
                                  "(RUN/perception_calibration/cube_finder, from calibrate_perception)")
            if self.where != "env":
                raise ConfigError("[reward] kind='cube_finder' reads the task's goal and the arm's joints in the "
                                  "control loop: it needs where = \"env\"")
            if self.hidden not in HIDDEN:
                raise ConfigError(f"[reward] hidden={self.hidden!r}: choose one of {', '.join(HIDDEN)}")
            if self.require_grasp or self.threshold is not None:
                raise ConfigError("[reward] kind='cube_finder' (push) has no classifier threshold and no grasp: "
                                  "remove threshold / require_grasp")
        elif self.hidden != "missing":
            raise ConfigError(f"[reward] hidden={self.hidden!r} is the cube finder's (kind = \"cube_finder\", "
                              f"ArmPush): remove it")
        if self.require_grasp and self.where != "env":
            raise ConfigError("[reward] require_grasp reads the arm's gripper in the control loop: it needs "
                              "where = \"env\"")
        return self


def check_address(address, where: str = "address") -> str:
    """A ZeroMQ TCP endpoint "tcp://HOST:PORT" (the reward server's socket), checked before any
    process starts, so a typo is one line, not a client that times out forever."""
    import re

    m = re.fullmatch(r"tcp://([A-Za-z0-9.\-*]+|\[[0-9a-fA-F:]+\]):(\d+)", str(address))
    if not m or not 0 < int(m.group(2)) < 65536:
        raise ConfigError(f"{where}={address!r}: give a TCP endpoint \"tcp://HOST:PORT\" "
                          "(e.g. \"tcp://127.0.0.1:5590\")")
    return str(address)


def reward_config(data: dict | RewardConfig, where: str = "[reward]") -> RewardConfig:
    if isinstance(data, RewardConfig):
        return data.validate()
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a table of key = value pairs")
    check_keys(data, (f.name for f in dataclasses.fields(RewardConfig)), where)
    return RewardConfig(**data).validate()
