"""Where is the cube on the table? A camera localiser for resets on a robot without a simulator.

Why a second localiser: the policy's localiser (perception.py) is trained on frames of lift
episodes, so it knows the cube near the start region and in the gripper; after a failed
episode the cube can lie anywhere in the arm's reach, where its error grows to centimetres
(~40 mm measured at (0.10, 0.05) m), too much to grasp it. A reset can do what a policy
cannot: stop and look. So this model sees one thing only, the table from the front camera
with the arm folded over its base (`LOOK_Q`, out of the way of every reachable cube), and is
trained on domain-randomised renders of a resting cube at uniform points of the whole reach
area (robolearn/resets/cube.py `in_reach`) with any yaw. Targets: the cube's x, y (m). Yaw is
not estimated (the cube is ~4 px wide at 84x84): a top-down grasp at the radial wrist roll
takes a 3 cm cube at any yaw (probe in docs/bench/finetune/), and the reset checks the grasp
by the gripper's measured opening.

Files: the `Localiser` format (perception.safetensors + perception.json with `"purpose":
"cube_finder"` and `look_q`). `robolearn perception train --env robolearn/ArmLift-v0
--targets look --out DIR` trains one.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from robolearn.errors import ConfigError, DatasetError

#: joint angles (rad) of the look pose: upper arm back, forearm folded up, over the base
LOOK_Q = (0.0, -0.6, 1.2, 0.3, 0.0)
PURPOSE = "cube_finder"
TARGET_NAMES = ["cube_x", "cube_y"]


def sample_reachable_xy(rng: np.random.Generator, start_region_share: float = 0.3) -> np.ndarray:
    """A uniform point of the reset's reach area (or, `start_region_share` of the time, of the
    start region, where placed cubes are checked)."""
    from robolearn.resets.cube import REACH_HIGH, REACH_LOW, in_reach
    from robolearn.tasks.arm import CUBE_REGION_HIGH, CUBE_REGION_LOW

    if rng.random() < start_region_share:
        return rng.uniform(CUBE_REGION_LOW, CUBE_REGION_HIGH)
    while True:
        xy = rng.uniform(REACH_LOW, REACH_HIGH)
        if in_reach(xy):
            return xy


def collect_look_frames(env_id: str, frames: int, camera: str = "front", seed: int = 0,
                        randomize: bool = True, image_size=(84, 84), progress=None,
                        joint_noise: float = 0.05, per_world: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(images (N,H,W,3) uint8, cube x-y (N,2)): the arm near LOOK_Q (+- `joint_noise` rad per
    joint, gripper anywhere), the cube resting at a reachable point with a uniform yaw;
    camera pose and lights randomised every `per_world` frames (Tobin et al. 2017)."""
    import gymnasium as gym

    from robolearn.sim.randomization import CAMERA_RANDOMIZATION, DomainRandomization, load_reality_gap
    from robolearn.tasks.arm import CUBE_HALF

    if env_id not in ("robolearn/ArmLift-v0", "robolearn/ArmPush-v0"):
        raise ConfigError(f"the cube finder is for the cube tasks (ArmLift, ArmPush), not {env_id}")
    env = gym.make(env_id, obs="both", camera=camera, image_size=list(image_size))
    if randomize:
        env = DomainRandomization(env, load_reality_gap(CAMERA_RANDOMIZATION).randomization, seed=seed)
    rng = np.random.default_rng(seed)
    base = env.unwrapped
    task, sim, cam = base.task, base.sim, base.backend.cameras[camera]
    look = np.asarray(LOOK_Q)
    images, targets = [], []
    try:
        while len(images) < frames:
            env.reset(seed=seed + len(images))
            for _ in range(min(per_world, frames - len(images))):
                q = np.clip(look + rng.uniform(-joint_noise, joint_noise, 5), task.kin.lower, task.kin.upper)
                g = rng.uniform(task.spec.gripper_closed, task.spec.gripper_open)
                xy = sample_reachable_xy(rng)
                yaw = rng.uniform(-math.pi, math.pi)
                sim.set_state(q, g, cube_pos=np.array([xy[0], xy[1], CUBE_HALF]),
                              cube_quat=np.array([math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]))
                images.append(cam.read().image.copy())
                targets.append(xy.astype(np.float32))
                if progress is not None:
                    progress(1)
    finally:
        env.close()
    return np.stack(images), np.stack(targets)


class CubeFinder:
    """A trained finder: `locate(camera) -> (x, y)` from the median of a few fresh frames."""

    def __init__(self, localiser):
        if localiser.meta.get("purpose") != PURPOSE:
            raise ConfigError(f"{localiser.source or 'this model'} is not a cube finder (it is a policy "
                              "localiser); train one with `robolearn perception train --env "
                              "robolearn/ArmLift-v0 --targets look --out DIR`")
        self.localiser = localiser
        self.look_q = np.asarray(localiser.meta.get("look_q", LOOK_Q), dtype=np.float64)

    @classmethod
    def load(cls, path: str | Path) -> "CubeFinder":
        from robolearn.policies.perception import Localiser

        return cls(Localiser.load(path))

    @property
    def camera(self) -> str:
        return self.localiser.camera

    def locate(self, camera, frames: int = 3) -> np.ndarray:
        """Cube (x, y) in m from `frames` reads of `camera` (a `Camera`: sim or OpenCV)."""
        shape = tuple(self.localiser.meta["image_shape"])
        imgs = []
        for _ in range(frames):
            img = camera.read().image
            if tuple(img.shape) != shape:
                raise ConfigError(f"cube finder {self.localiser.source} was trained on {shape} images, "
                                  f"the camera gives {tuple(img.shape)}; set image_size to match")
            imgs.append(img)
        est = np.median(self.localiser.predict(np.stack(imgs)), axis=0)
        if not np.all(np.isfinite(est)):
            raise DatasetError(f"cube finder {self.localiser.source} gave a non-finite estimate "
                               f"{est.tolist()}: its weights are corrupt; train it again")
        return est.astype(np.float64)
