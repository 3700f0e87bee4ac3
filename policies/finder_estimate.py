"""The cube finder as the policy's cube estimate (`env_kwargs perception = FINDER_DIR`).

Why: for a cube that stays on the table (ArmPush) the fixed camera's cube finder
(policies/cube_finder.py: red blob -> table homography) is a better estimate than a learned
localiser, and it is the same estimator in sim and on the robot: in sim its homography is fitted
on sim renders (`robolearn perception fit-finder`), on the robot by the session's camera
calibration on the robot's own frames. Measured on scripted pushes in sim: 4.7 mm mean vs 11.9 mm
for the push localiser; on the emulated hard robot the lift session's finder was 7 mm held-out
against 26 mm for the calibrated localiser (docs/perception.md, "Push from the camera").

The finder abstains when it sees no cube (the arm in front of it); a policy needs a value every
step, so the estimate is (x, y, seen): the last position seen in this episode with seen = 0 (the
start region's centre before any), and seen = 1 on a fresh sighting. A frozen, stateless model
it is not: `reset()` forgets the last sighting (PerceptionFeatures calls it at every episode).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

#: the finder's three outputs appended to `state`
TARGETS = ["cube_x", "cube_y", "cube_seen"]


class FinderEstimate:
    """`predict(image) -> (x, y, seen)` float32, with the duck type of a `Localiser` that
    PerceptionFeatures reads (`camera`, `dim`, `frame`, `meta`, `digest`, `source`)."""

    frame = "world"
    dim = len(TARGETS)

    def __init__(self, finder, digest: str = "", source: str = ""):
        self.finder = finder
        self.digest = digest
        self.source = source
        self.meta = {"kind": "cube_finder", "camera": finder.camera, "image_shape": list(finder.image_shape),
                     "targets": list(TARGETS), "frame": "world"}
        self.last: np.ndarray | None = None
        self.seen = 0
        self.not_seen = 0

    @property
    def camera(self) -> str:
        return self.finder.camera

    def reset(self) -> None:
        self.last = None

    def predict(self, image: np.ndarray) -> np.ndarray:
        from robolearn.policies.cube_finder import CubeNotSeenError
        from robolearn.sim.arm_workspace import CUBE_REGION_HIGH, CUBE_REGION_LOW

        if image.ndim == 4:
            return np.stack([self.predict(im) for im in image])
        try:
            xy = self.finder.estimate(image)
        except CubeNotSeenError:
            self.not_seen += 1
            xy = self.last if self.last is not None else 0.5 * (CUBE_REGION_LOW + CUBE_REGION_HIGH)
            return np.array([xy[0], xy[1], 0.0], np.float32)
        self.seen += 1
        self.last = np.asarray(xy, float)
        return np.array([xy[0], xy[1], 1.0], np.float32)

    @classmethod
    def load(cls, path: str | Path) -> "FinderEstimate":
        from robolearn.policies.cube_finder import FILE, CubeFinder

        finder = CubeFinder.load(path)
        digest = hashlib.sha256((Path(path) / FILE).read_bytes()).hexdigest()
        return cls(finder, digest, str(path))


def is_finder_dir(path: str | Path) -> bool:
    from robolearn.policies.cube_finder import FILE

    return (Path(path) / FILE).is_file()
