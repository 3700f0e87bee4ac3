"""Where is the cube on the table? Its colour in one camera frame, mapped to the table by a
homography the robot measures itself. For resets on a robot without a simulator.

Why not the policy's localiser: it is trained on frames of lift episodes, so it knows the
cube near the start region and in the gripper; after a failed episode the cube can lie
anywhere in the arm's reach, where its error grows to centimetres (~40 mm measured at
(0.10, 0.05) m), too much to grasp it. A reset can do what a policy cannot: stop and look
with the arm folded out of the camera's view (`LOOK_Q`).

Why not a learned regressor for that look: at 84x84 the 3 cm cube is 3-4 pixels; a conv net
trained on 4000 randomised renders of it at uniform reachable points did not learn it at all
(held-out error 118 mm, the same as always guessing the mean). The cube is the only red thing
on the table, though, so its pixel centre is found by its colour to a fraction of a pixel,
and a fixed camera maps the table plane to the image by a homography. That map is what the
camera calibration (robolearn/runtime/perception_calibration.py) measures on the robot: the arm puts the cube
at points it knows from its kinematics and the camera sees where. Eight numbers, fitted by
least squares from the ~30 placements that agree on one map (RANSAC drops the others: a speck
taken for the cube, a slipped placement), reported with their held-out error. A frame without a red
blob is "not seen" (a ResetError: the operator is asked), never a guess.

File: DIR/cube_finder.json (camera, image shape, homography, colour rule, look pose, fit report).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from robolearn.errors import ConfigError, DatasetError

#: joint angles (rad) of the look pose: upper arm back, forearm folded up, over the base
LOOK_Q = (0.0, -0.6, 1.2, 0.3, 0.0)
FILE = "cube_finder.json"


@dataclass
class ColourRule:
    """A pixel is the cube's when it is red enough: R above `min_red` and green and blue below
    the given shares of R (the cube 0.85/0.15/0.15; the table's G/R is ~0.7, the arm's orange ~0.6)."""

    min_red: int = 60
    max_green_share: float = 0.4
    max_blue_share: float = 0.45
    min_pixels: int = 2               # fewer: the cube is not seen (occluded, off the table)
    max_pixels: int = 200             # more: something else red is in view

    def mask(self, image: np.ndarray) -> np.ndarray:
        x = image.astype(np.int32)
        r, g, b = x[..., 0], x[..., 1], x[..., 2]
        return (r > self.min_red) & (g < self.max_green_share * r) & (b < self.max_blue_share * r)


def blob_centre(image: np.ndarray, rule: ColourRule, accept=None) -> tuple[np.ndarray, int] | None:
    """(u, v) pixel centre of the largest red blob, weighted by redness, and its size; None if
    there is no blob of an acceptable size. `accept(uv) -> bool` filters blobs by where they
    are (a finder: only blobs that map onto the table within reach; JPEG fringes of the orange
    arm can pass the colour rule, measured on the emulated hard camera)."""
    import cv2

    m = rule.mask(image).astype(np.uint8)
    n, lab, stats, _ = cv2.connectedComponentsWithStats(m, connectivity=8)
    best = None
    for k in sorted(range(1, n), key=lambda k: -int(stats[k, cv2.CC_STAT_AREA])):
        area = int(stats[k, cv2.CC_STAT_AREA])
        if not rule.min_pixels <= area <= rule.max_pixels:
            continue
        vs, us = np.nonzero(lab == k)
        x = image[vs, us].astype(np.float64)
        w = np.maximum(x[:, 0] - 0.5 * (x[:, 1] + x[:, 2]), 1.0)
        uv = np.array([np.sum(w * us) / w.sum(), np.sum(w * vs) / w.sum()])
        if accept is None or accept(uv):
            best = (uv, area)
            break
    return best


def fit_homography(uv: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """3x3 H with [x, y, 1] ~ H [u, v, 1], by the normalised DLT (least squares)."""
    def norm(p):
        c = p.mean(0)
        s = np.sqrt(2) / max(np.linalg.norm(p - c, axis=1).mean(), 1e-12)
        return np.array([[s, 0, -s * c[0]], [0, s, -s * c[1]], [0, 0, 1.0]])

    uv, xy = np.asarray(uv, float), np.asarray(xy, float)
    if len(uv) < 4:
        raise ConfigError(f"a homography needs at least 4 points, got {len(uv)}")
    tu, tx = norm(uv), norm(xy)
    a = np.c_[uv, np.ones(len(uv))] @ tu.T
    b = np.c_[xy, np.ones(len(xy))] @ tx.T
    rows = []
    for (u, v, _), (x, y, _) in zip(a, b):
        rows.append([-u, -v, -1, 0, 0, 0, x * u, x * v, x])
        rows.append([0, 0, 0, -u, -v, -1, y * u, y * v, y])
    _, _, vt = np.linalg.svd(np.asarray(rows))
    h = vt[-1].reshape(3, 3)
    h = np.linalg.inv(tx) @ h @ tu
    return h / h[2, 2]


def consistent_points(uv: np.ndarray, xy: np.ndarray, tolerance_m: float = 0.02) -> np.ndarray:
    """Mask of the points one homography maps to within `tolerance_m` of their labels (OpenCV's
    RANSAC). Why not least squares on all of them and a trim: one frame whose red blob is not the
    cube (a 2-pixel speck 40 pixels above the table, the cube hidden; lift session 15) bent the
    least-squares map so far (190 mm mean error) that no trim around its median recovered, and
    every camera reset of that session missed the cube. A slipped placement (the arm's label is
    wrong) is the same kind of outlier."""
    import cv2

    _, mask = cv2.findHomography(np.asarray(uv, np.float64), np.asarray(xy, np.float64), cv2.RANSAC,
                                 tolerance_m)
    if mask is None:
        return np.zeros(len(uv), bool)
    return mask.ravel().astype(bool)


def apply_homography(h: np.ndarray, uv: np.ndarray) -> np.ndarray:
    p = np.c_[np.atleast_2d(uv), np.ones(len(np.atleast_2d(uv)))] @ np.asarray(h).T
    return p[:, :2] / p[:, 2:3]


class CubeNotSeenError(DatasetError):
    """The camera frame shows no cube (occluded, off the table, or the light changed)."""


@dataclass
class CubeFinder:
    """`locate(camera) -> (x, y)`: the cube's table position from one frame at the look pose."""

    camera: str
    image_shape: list
    homography: list
    look_q: list = field(default_factory=lambda: list(LOOK_Q))
    rule: ColourRule = field(default_factory=ColourRule)
    report: dict = field(default_factory=dict)
    #: the whole cube's blob area (pixels) where it lies, a + b x + c y, fitted on the look-pose
    #: frames (nothing in front of the cube there); [] in files fitted before it: no check
    area_fit: list = field(default_factory=list)
    source: str = ""

    @classmethod
    def fit(cls, images: np.ndarray, xy: np.ndarray, camera: str = "front", rule: ColourRule | None = None,
            heldout: np.ndarray | None = None) -> "CubeFinder":
        """Fit from frames at the look pose with the cube at known table points `xy` (m).
        `heldout`: a mask of frames kept out of the fit, for the report's error."""
        rule = rule or ColourRule()
        heldout = np.zeros(len(images), bool) if heldout is None else np.asarray(heldout, bool)
        uv, ok, area = [], [], []
        for img in images:
            c = blob_centre(img, rule)
            uv.append(c[0] if c else (np.nan, np.nan))
            area.append(c[1] if c else 0)
            ok.append(c is not None)
        uv, ok, xy, area = np.asarray(uv), np.asarray(ok), np.asarray(xy, float), np.asarray(area, float)
        use = ok & ~heldout
        if use.sum() < 6:
            raise ConfigError(f"the cube was seen in only {int(use.sum())} of {len(images)} calibration "
                              "frames (at least 6 needed): is it red and in view at the look pose?")
        points = len(np.unique(np.round(xy[use], 3), axis=0))
        if points < 6:     # 4 points determine the 8 numbers exactly: no noise would average out
            raise ConfigError(f"the calibration frames show the cube at only {points} different places "
                              "(at least 6 needed): run more calibration cycles")
        keep = consistent_points(uv[use], xy[use])
        if keep.sum() < max(6, 0.75 * use.sum()):
            raise ConfigError(f"only {int(keep.sum())} of {int(use.sum())} calibration frames agree on one map "
                              "from the camera to the table: is the camera fixed, and the cube the only red "
                              "thing in view at the look pose?")
        h = fit_homography(uv[use][keep], xy[use][keep])
        report = {"frames": int(len(images)), "seen": int(ok.sum()), "fit_points": int(use.sum()),
                  "outliers": int((~keep).sum()),
                  "fit_error_m": float(np.linalg.norm(apply_homography(h, uv[use][keep]) - xy[use][keep],
                                                      axis=1).mean())}
        val = ok & heldout
        if val.any():
            report["heldout_points"] = int(val.sum())
            report["heldout_error_m"] = float(np.linalg.norm(apply_homography(h, uv[val]) - xy[val],
                                                             axis=1).mean())
        design = np.c_[np.ones(int(keep.sum())), xy[use][keep]]
        area_fit = np.linalg.lstsq(design, area[use][keep], rcond=None)[0]
        report["area_fit_error_px"] = float(np.abs(design @ area_fit - area[use][keep]).mean())
        return cls(camera=camera, image_shape=list(images.shape[1:]), homography=h.tolist(), rule=rule,
                   report=report, area_fit=area_fit.tolist())

    def expected_area(self, xy) -> float | None:
        """The whole cube's blob area (pixels) at table point `xy` (None: not fitted)."""
        if len(self.area_fit) != 3:
            return None
        a, b, c = self.area_fit
        return float(a + b * xy[0] + c * xy[1])

    def estimate(self, image: np.ndarray, whole_share: float = 0.0) -> np.ndarray:
        """The cube's (x, y) in m. `whole_share` > 0: a blob smaller than that share of the whole
        cube's area at its position is "not seen" (the arm hides part of the cube and pulls the
        blob's centre off it: 12-19 mm errors under 10 px against 2-3 mm for a whole one, measured
        on a push policy's episodes in sim)."""
        if tuple(image.shape) != tuple(self.image_shape):
            raise ConfigError(f"cube finder {self.source or ''} was fitted on {tuple(self.image_shape)} "
                              f"images, the camera gives {tuple(image.shape)}; set image_size to match")
        from robolearn.sim.arm_workspace import in_reach

        h = np.asarray(self.homography)
        c = blob_centre(image, self.rule, accept=lambda uv: bool(in_reach(apply_homography(h, uv)[0])))
        if c is None:
            raise CubeNotSeenError(f"the camera ({self.camera}) does not see the cube on the table "
                                   "within the arm's reach")
        xy = apply_homography(h, c[0])[0]
        if whole_share > 0:
            full = self.expected_area(xy)
            if full is not None and c[1] < whole_share * full:
                raise CubeNotSeenError(f"the camera ({self.camera}) sees only part of the cube ({c[1]} of "
                                       f"~{full:.0f} pixels): something is in front of it")
        return xy

    def locate(self, camera, frames: int = 3) -> np.ndarray:
        """Cube (x, y) in m: the median over `frames` reads of `camera` (sim or OpenCV)."""
        ests, err = [], None
        for _ in range(frames):
            try:
                ests.append(self.estimate(camera.read().image))
            except CubeNotSeenError as exc:
                err = exc
        if not ests:
            raise err
        return np.median(np.asarray(ests), axis=0)

    def save(self, out: str | Path) -> Path:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        d = asdict(self)
        d.pop("source")
        tmp = out / (FILE + ".tmp")
        tmp.write_text(json.dumps(d, indent=1))
        tmp.replace(out / FILE)
        return out

    @classmethod
    def load(cls, path: str | Path) -> "CubeFinder":
        path = Path(path)
        f = path / FILE
        if not f.is_file():
            raise DatasetError(f"cube finder {path} not found (looked for {f.resolve()}): it is made by the "
                               "camera calibration on the robot (`[finetune] calibrate_perception = true`, "
                               "docs/finetune.md)")
        try:
            d = json.loads(f.read_text())
            d["rule"] = ColourRule(**d.get("rule", {}))
            finder = cls(**d, source=str(path))
            h = np.asarray(finder.homography, float)
            if h.shape != (3, 3) or not np.all(np.isfinite(h)):
                raise ValueError(f"homography {finder.homography!r} is not a finite 3x3 matrix")
        except (ValueError, TypeError, KeyError) as exc:
            raise DatasetError(f"cube finder {f} is corrupt or from another version: {exc}") from None
        return finder


def sample_reachable_xy(rng: np.random.Generator, start_region_share: float = 0.3) -> np.ndarray:
    """A uniform point of the reset's reach area (or, `start_region_share` of the time, of the
    start region)."""
    from robolearn.sim.arm_workspace import REACH_HIGH, REACH_LOW, in_reach
    from robolearn.sim.arm_workspace import CUBE_REGION_HIGH, CUBE_REGION_LOW

    if rng.random() < start_region_share:
        return rng.uniform(CUBE_REGION_LOW, CUBE_REGION_HIGH)
    while True:
        xy = rng.uniform(REACH_LOW, REACH_HIGH)
        if in_reach(xy):
            return xy


def render_look_frames(env, n: int, rng: np.random.Generator, camera: str = "front",
                       joint_noise: float = 0.03):
    """Sim only (tests, docs): frames of a sim arm env at the look pose with the cube resting at
    reachable points; returns (images, cube x-y). The robot's own frames come from the camera
    calibration instead."""
    import math

    from robolearn.sim.arm_workspace import CUBE_HALF

    base = env.unwrapped
    task, sim, cam = base.task, base.sim, base.backend.cameras[camera]
    images, xys = [], []
    for _ in range(n):
        q = np.clip(np.asarray(LOOK_Q) + rng.uniform(-joint_noise, joint_noise, 5), task.kin.lower, task.kin.upper)
        xy = sample_reachable_xy(rng)
        yaw = rng.uniform(-math.pi, math.pi)
        sim.set_state(q, task.spec.gripper_open, cube_pos=np.array([xy[0], xy[1], CUBE_HALF]),
                      cube_quat=np.array([math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]))
        images.append(cam.read().image.copy())
        xys.append(xy)
    return np.stack(images), np.asarray(xys)
