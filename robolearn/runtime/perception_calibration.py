"""Calibrate the sim-trained camera localisers to the robot's camera, with labels from the arm.

Why: the policy sees the cube through a localiser trained on randomised sim renders
(perception.py). A real camera is never mounted, lit and tinted like the sim's: on the hard
reality (camera moved 2 cm and turned 4 deg, an 8 % wider view, tinted, dimmer) that
localiser's error grows from ~15 mm to 25-50 mm and the sim policy's success from 0.95 to
0.20 in sim itself (docs/bench/finetune/). Randomisation did not cover it; the robot can.

After stop calibration the arm is a measuring instrument (~1 mm): where it puts the cube is
known without any camera. So the robot moves the cube itself, through motions like a lift
episode's (approach, descend, grasp, lift, carry, place, move about), and every camera frame
gets a label from the arm's own kinematics: the cube on the table where the arm let go of it,
or in the gripper (only frames taken while the arm holds still, so a camera's latency cannot
shift the label). The localisers are then fine-tuned on these frames mixed with sim frames
(so what they learned in sim stays), and the held-out error on the robot's frames (whole
cycles held out) is reported before and after. Nothing here reads a simulator or an
emulator's truth; the operator is asked (the reset prompt) to put the cube on the start mark
once, and again whenever a grasp finds no cube.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robolearn.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class PerceptionCalibrationConfig:
    cycles: int = 30                   # pick-carry-place cycles on the robot (~10 s of robot time each)
    mark: tuple = (0.22, 0.0)          # where the operator puts the cube first (m)
    area_margin: float = 0.03          # cube placements: the start region grown by this (m)
    far_every: int = 4                 # every so many cycles, a placement anywhere in reach (finder)
    heldout: float = 0.2               # share of cycles (the last ones) held out for the report
    sim_frames: int = 1500             # sim frames mixed in, so the sim skill stays
    sim_heldout: int = 300             # more sim frames, held out: the sim error before and after
    epochs: int = 15                   # with lr 1e-3: the held-out robot-frame error near the cube
    lr: float = 1e-3                   # on the table 10.5/9.6/9.2 -> 8.2/7.9/7.6 mm against 6 epochs at
                                       # 3e-4, on sessions 21/20/19's frames (stop 50; training 28 -> 52 s)
    seed: int = 0
    mark_every: int = 5                # the operator puts the cube back on the mark every so many
                                       # cycles: a grasp centres the cube across the fingers only, so
                                       # the arm's idea of where it is drifts ~2 mm a cycle (measured)
    in_hand_frames: int = 3            # frames at each still point with the cube in the hand
    hover_points: int = 3              # still points over the cube before each grasp (on the table):
                                       # 5-7.5 cm up (its top at 3 cm), up to 1.5 cm across, where the
                                       # lift policy decides to come down. The approach's moving frames
                                       # left the wrist localiser 8-9 mm off the truth there, these
                                       # 5-6 mm (stop 59, scripts/hover_frames_ab.py)
    hover_frames: int = 2              # frames at each of them
    label_margin: float = 0.01         # success classifier: frames within this of the lift height
                                       # (m) are left out (the cube's seat in the hand is ~1 cm unsure)
    classifier_epochs: int = 40        # with the best held-out epoch from 10 on kept (classifier.py):
                                       # 15 epochs gave held-out recall 0.24-0.60 on sessions 10-13's
                                       # frames, this 0.75-0.94 (stop 46)


IN_HAND_DZ = -0.005   # the cube's centre below the grasp point when held (grasp_z 0.02, centre 0.015)


class _Frames:
    def __init__(self, extra=None):
        self.images, self.labels, self.cycle, self.kind = [], [], [], []
        self.extra_fn, self.extra = extra, []

    def add(self, image, label, cycle, kind):
        self.images.append(np.asarray(image).copy())
        self.labels.append(np.asarray(label, np.float32))
        self.cycle.append(cycle)
        self.kind.append(kind)
        if self.extra_fn is not None:
            self.extra.append(self.extra_fn())

    def extend(self, other: "_Frames") -> None:
        for name in ("images", "labels", "cycle", "kind", "extra"):
            getattr(self, name).extend(getattr(other, name))

    def arrays(self):
        if not self.images:
            return None
        out = {"images": np.stack(self.images), "labels": np.stack(self.labels),
               "cycle": np.asarray(self.cycle), "kind": np.asarray(self.kind)}
        for key in (self.extra[0] if self.extra else {}):
            out[key] = np.stack([np.asarray(e[key]) for e in self.extra])
        return out


def collect_robot_frames(task, camera, cfg: PerceptionCalibrationConfig, put_cube, look_q=None,
                         progress=None, extra=None) -> tuple[dict, dict]:
    """Drive the arm through `cfg.cycles` cycles and label camera frames from its kinematics.

    `put_cube(xy, why)`: the operator puts the cube at `xy` (a prompt). `extra()`, if given, is
    called with every frame taken and returns a dict of arrays kept beside it (another camera,
    a bench's ground truth: bench/perception_transfer.py). Returns
    ({"episode": frames for the policy localiser (x, y, z), "look": frames at the look pose
    (x, y)}, stats)."""
    from robolearn.policies.cube_finder import LOOK_Q, sample_reachable_xy
    from robolearn.resets.scripted import EeMover
    from robolearn.resets.cube_camera import PlaceCubeByCamera
    from robolearn.resets.scripted import MoveToJoints
    from robolearn.sim.arm_workspace import CUBE_HALF, CUBE_REGION_HIGH, CUBE_REGION_LOW

    rng = np.random.default_rng(cfg.seed)
    dt = 1.0 / task.control_hz
    hover, grasp_z, place_z = 0.06, 0.02, 0.026
    ep, look = _Frames(extra), _Frames(extra)
    holds = PlaceCubeByCamera(finder=None)          # its gripper test: is the cube held?
    stats = {"cycles": 0, "operator_placements": 0, "missed_grasps": 0, "slipped": 0, "robot_s": 0.0}
    # a cycle's frames are kept only when it ends with the cube where the arm believes it is
    cur = {"ep": _Frames(extra), "look": _Frames(extra)}
    look_q = np.clip(np.asarray(LOOK_Q if look_q is None else look_q), task.kin.lower, task.kin.upper)
    t_robot = [0.0]

    def run(gen, label=None, cycle=0, every=1):
        """Drive a motion generator; label frames on the way (label(): the cube's position)."""
        k = 0
        for d in gen:
            t_robot[0] += float(d)
            k += 1
            if label is not None and k % every == 0:
                cur["ep"].add(camera.read().image, label(), cycle, 0)

    def still(label, cycle, n=2, frames=cfg.in_hand_frames, kind=1, store="ep"):
        """Hold still `n` periods, then take `frames` frames (the label cannot lag the image)."""
        for _ in range(n):
            task.arm.advance(dt)
            t_robot[0] += dt
        for _ in range(frames):
            cur[store].add(camera.read().image, label(), cycle, kind)
            task.arm.advance(dt)
            t_robot[0] += dt

    def go(mover, target, **kw):   # soft arrival: a sagging arm goes on from where it was told to be
        return mover.to(target, tol=0.012, soft=True, max_periods=60, **kw)

    def in_hand():
        return task.kin.fk(task.arm.read().q) + np.array([0.0, 0.0, IN_HAND_DZ])

    run(MoveToJoints(task.home_q, task.home_gripper, dt=dt).motion(task.arm))
    put_cube(np.asarray(cfg.mark, float), "calibrating the camera: the arm moves the cube itself from here")
    stats["operator_placements"] += 1
    known = np.array([cfg.mark[0], cfg.mark[1], CUBE_HALF])
    low = np.asarray(CUBE_REGION_LOW) - cfg.area_margin
    high = np.asarray(CUBE_REGION_HIGH) + cfg.area_margin
    def back_to_the_mark(why):
        run(MoveToJoints(task.home_q, task.home_gripper, dt=dt).motion(task.arm))
        put_cube(np.asarray(cfg.mark, float), why)
        stats["operator_placements"] += 1
        return np.array([cfg.mark[0], cfg.mark[1], CUBE_HALF])

    for c in range(cfg.cycles):
        cur["ep"], cur["look"] = _Frames(extra), _Frames(extra)
        if c and cfg.mark_every and c % cfg.mark_every == 0:
            known = back_to_the_mark("camera calibration: put the cube back on the mark (the arm's idea "
                                     "of where it is drifts a little with every grasp)")
        on_table = lambda: known.copy()  # noqa: E731 - the cube where the arm left it
        mover = EeMover(task, 0.02)
        # move about near the cube, then approach, descend, close (the cube on the table)
        for _ in range(2):
            near = known[:2] + rng.uniform(-0.07, 0.07, 2)
            run(go(mover, (near[0], near[1], rng.uniform(0.05, 0.12)), open_=True), on_table, c)
        run(go(mover, (known[0], known[1], hover), open_=True, roll=0.0), on_table, c)
        for _ in range(cfg.hover_points):   # the lift policy's hover, held still (kind 3)
            over = known[:2] + rng.uniform(-0.015, 0.015, 2)
            run(go(mover, (over[0], over[1], rng.uniform(0.05, 0.075)), open_=True, roll=0.0, speed=0.6))
            still(on_table, c, frames=cfg.hover_frames, kind=3)
        run(go(mover, (known[0], known[1], hover), open_=True, roll=0.0, speed=0.6))
        run(go(mover, (known[0], known[1], grasp_z), open_=True, roll=0.0, speed=0.6), on_table, c)
        run(mover.hold(6, open_=False), on_table, c)
        if not holds.holding(task):
            stats["missed_grasps"] += 1
            run(mover.hold(3, open_=True))
            run(go(mover, (known[0], known[1], hover + 0.02), open_=True))
            known = back_to_the_mark("the calibration grasp found no cube")
            continue
        # lift, carry (frames only while holding still: the cube moves with the hand)
        # (from 2 cm above the table: frames of a cube held but not yet lifted far enough)
        # The gripper is checked at every stop: a cube that slipped out lies somewhere unknown,
        # and the cycle's frames (labelled as if it were held) are dropped
        far = cfg.far_every and c % cfg.far_every == cfg.far_every - 1
        goal = sample_reachable_xy(rng, 0.0) if far else rng.uniform(low, high)
        mid = 0.5 * (known[:2] + goal) + rng.uniform(-0.03, 0.03, 2)
        held = True
        for target, speed in (((known[0], known[1], rng.uniform(0.04, 0.13)), 0.6),
                              ((mid[0], mid[1], rng.uniform(0.06, 0.13)), 1.0),
                              ((goal[0], goal[1], rng.uniform(0.05, 0.12)), 1.0)):
            run(go(mover, target, open_=False, speed=speed))
            if not holds.holding(task):
                held = False
                break
            still(in_hand, c)
        if held:
            run(go(mover, (goal[0], goal[1], hover), open_=False))
            run(go(mover, (goal[0], goal[1], place_z), open_=False, speed=0.6))
            held = holds.holding(task)
        if not held:
            stats["slipped"] += 1
            run(mover.hold(3, open_=True))
            known = back_to_the_mark("the cube slipped out of the gripper during the camera calibration")
            continue
        run(mover.hold(6, open_=True))
        let_go = task.kin.fk(task.arm.read().q)          # where the arm let go of it
        known = np.array([let_go[0], let_go[1], CUBE_HALF])
        run(go(mover, (known[0], known[1], hover), open_=True, speed=0.6), on_table, c)
        if holds.pushed_open(task):            # wedged across the open fingers: the operator
            known = back_to_the_mark("the cube stayed wedged across the open fingers")
            continue
        for _ in range(2):
            near = known[:2] + rng.uniform(-0.08, 0.08, 2)
            run(go(mover, (near[0], near[1], rng.uniform(0.05, 0.12)), open_=True), on_table, c)
        # the look pose: frames for the cube finder
        run(MoveToJoints(look_q, task.home_gripper, dt=dt).motion(task.arm))
        still(lambda: known[:2].copy(), c, n=3, frames=2, kind=2, store="look")
        run(MoveToJoints(task.home_q, task.home_gripper, dt=dt).motion(task.arm))
        ep.extend(cur["ep"])
        look.extend(cur["look"])
        stats["cycles"] += 1
        if progress is not None:
            progress(c + 1, len(ep.images), len(look.images))
    stats["robot_s"] = round(t_robot[0], 1)
    return {"episode": ep.arrays(), "look": look.arrays()}, stats


def heldout_cycles(cycle: np.ndarray, share: float) -> np.ndarray:
    """Mask of the frames of the last `share` of calibration cycles (at least one; none with two
    cycles or fewer): held out by cycle, since a cycle's frames see one cube placement."""
    cycles = np.unique(cycle)
    n_val = max(1, int(round(share * len(cycles)))) if len(cycles) > 2 else 0
    return np.isin(cycle, cycles[len(cycles) - n_val:]) if n_val else np.zeros(len(cycle), bool)


def adapt_localiser(localiser, images: np.ndarray, labels: np.ndarray, sim_images: np.ndarray,
                    sim_labels: np.ndarray, epochs: int | None = None, lr: float | None = None,
                    seed: int = 0, head_only: bool = False):
    """Fine-tune a copy of `localiser` on robot frames + sim frames (equal weight per frame);
    `head_only`: the conv backbone stays as trained in sim (a frozen-feature candidate).
    `epochs` / `lr` default to the calibration's recipe (`PerceptionCalibrationConfig`)."""
    import copy

    import torch
    import torch.nn.functional as F

    from robolearn.policies.perception import Localiser, _augment

    recipe = PerceptionCalibrationConfig()
    epochs = recipe.epochs if epochs is None else epochs
    lr = recipe.lr if lr is None else lr
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    net = copy.deepcopy(localiser.net).train().requires_grad_(True)
    if head_only:
        net.convs.requires_grad_(False)
    mean = np.asarray(localiser.meta["target_mean"], np.float32)
    std = np.asarray(localiser.meta["target_std"], np.float32)
    x = torch.as_tensor(np.concatenate([images, sim_images]))
    y = torch.as_tensor((np.concatenate([labels, sim_labels]).astype(np.float32) - mean) / std)
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=lr)
    bs = min(64, len(x))
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(perm) - bs + 1, bs):
            idx = perm[i:i + bs]
            loss = F.smooth_l1_loss(net(_augment(x[idx], g)), y[idx], beta=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    meta = dict(localiser.meta)
    return Localiser(net.eval().requires_grad_(False), meta)


def mean_error_m(localiser, images, labels) -> float | None:
    if images is None or not len(images):
        return None
    return float(np.linalg.norm(localiser.predict(images) - labels, axis=1).mean())


def calibrate_localisers(frames: dict, policy_localiser_dir: str | Path | None, out: str | Path,
                         env_id: str, cfg: PerceptionCalibrationConfig, camera: str = "front",
                         log=print) -> dict:
    """From the robot's frames: fit the cube finder (out/cube_finder, a homography from the
    look-pose frames of `camera`) and fine-tune the policy localiser (out/perception), each
    reported with its error on held-out robot frames (the last cycles).

    The frames' `images` are `camera`'s; a localiser of another camera (the wrist) reads the
    frames kept beside them under its camera's name (`collect_robot_frames(extra=...)`), and a
    camera-frame localiser's labels are the arm's labels moved into that camera's frame at the
    joints measured with each frame (`q`): the wrist camera moves with the arm. Its errors are
    distances, the same in either frame."""
    from robolearn.policies.cube_finder import CubeFinder
    from robolearn.policies.perception import Localiser, collect_frames

    out = Path(out)
    report = {}

    def split(data):
        return heldout_cycles(data["cycle"], cfg.heldout)

    look = frames.get("look")
    if look is None:
        raise ConfigError("camera calibration recorded no look-pose frames")
    finder = CubeFinder.fit(look["images"], look["labels"], camera=camera, heldout=split(look))
    finder.save(out / "cube_finder")
    report["cube_finder"] = finder.report
    log(f"camera calibration: cube finder: {json_round(finder.report)}")
    if policy_localiser_dir:
        data = frames.get("episode")
        loc = Localiser.load(policy_localiser_dir)
        images, labels = localiser_frames(data, loc, camera, policy_localiser_dir)
        val = split(data)
        tr = ~val
        t0 = time.monotonic()
        k = cfg.sim_frames
        sx, sy = collect_frames(env_id, k + cfg.sim_heldout, loc.camera, seed=cfg.seed + 17,
                                in_camera_frame=loc.frame == "camera")
        (sx, sy), (vx, vy) = (sx[:k], sy[:k]), (sx[k:], sy[k:])   # the last episodes: held out
        tuned = adapt_localiser(loc, images[tr], labels[tr], sx, sy, cfg.epochs, cfg.lr, cfg.seed)
        rep = {"camera": loc.camera, "frame": loc.frame,
               "robot_frames": int(tr.sum()), "heldout_robot_frames": int(val.sum()),
               "sim_frames": int(len(sx)),
               "heldout_robot_error_before_m": mean_error_m(loc, images[val], labels[val]),
               "heldout_robot_error_after_m": mean_error_m(tuned, images[val], labels[val]),
               "heldout_sim_error_before_m": mean_error_m(loc, vx, vy),
               "heldout_sim_error_after_m": mean_error_m(tuned, vx, vy),
               "train_s": round(time.monotonic() - t0, 1),
               "labels": "robot frames: the arm's kinematics" + (
                   f" (in camera {loc.camera!r}'s frame at the measured joints)" if loc.frame == "camera"
                   else "") + "; sim frames: randomised renders"}
        tuned.meta["calibrated"] = {"from": str(policy_localiser_dir), **rep}
        tuned.save(out / "perception")
        report["perception"] = rep
        log(f"camera calibration: policy localiser ({loc.camera}, {loc.frame} frame): held-out robot-frame "
            f"error {_mm(rep['heldout_robot_error_before_m'])} -> {_mm(rep['heldout_robot_error_after_m'])}")
    return report


def localiser_frames(data: dict | None, loc, camera: str, name) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) of the calibration's episode frames as `loc` reads them: its camera's
    images, labels in its frame (world, or its camera's at the measured joints `q`)."""
    key = "images" if loc.camera == camera else loc.camera
    if data is None or key not in data:
        raise ConfigError(f"{name} reads camera {loc.camera!r}; the calibration recorded no "
                          f"{loc.camera!r} frames (give the env camera {loc.camera!r} beside {camera!r})")
    images, labels = data[key], np.asarray(data["labels"], np.float32)
    shape = tuple(loc.meta["image_shape"])
    if tuple(images.shape[1:]) != shape:
        raise ConfigError(f"{name} was trained on {shape} images; the calibration frames do not match")
    if loc.frame == "camera":
        from robolearn.policies.perception import to_camera
        from robolearn.sim.kinematics import ArmKinematics

        if "q" not in data:
            raise ConfigError(f"{name} gives the cube in camera {loc.camera!r}'s frame: the calibration "
                              "frames need the measured joints (q) beside them")
        kin = ArmKinematics()
        labels = np.stack([to_camera(p, *kin.camera_pose(q, loc.camera))
                           for p, q in zip(labels, data["q"])]).astype(np.float32)
    return images, labels


def json_round(d: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


def _mm(v) -> str:
    return "n/a" if v is None else f"{v * 1000:.1f} mm"


def success_labels(heights: np.ndarray, lift_height: float, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """(label, keep): lifted when the cube's height above its resting height is at least
    `lift_height` (the task's success), frames within `margin` of it left out."""
    heights = np.asarray(heights, float)
    return heights >= lift_height, np.abs(heights - lift_height) >= margin


def success_classifier_data(frames: dict, env_id: str, label_margin: float, camera: str = "front") -> dict:
    """The success classifier's training frames (`fit_classifier`'s layout, + `keep`) from the
    calibration frames: labelled by the cube's height from the arm's kinematics. Also the base
    set a session's retrains start from (robolearn/rewards/retrain.py)."""
    from robolearn.sim.arm_workspace import CUBE_HALF, LIFT_HEIGHT

    data = frames.get("episode")
    if data is None:
        raise ConfigError("camera calibration recorded no frames for the success classifier")
    label, keep = success_labels(data["labels"][:, 2] - CUBE_HALF, LIFT_HEIGHT, label_margin)
    if not label[keep].any() or label[keep].all():
        raise ConfigError(f"the calibration frames show {'no' if not label[keep].any() else 'only'} "
                          "lifted cube(s): the classifier needs both; run more calibration cycles")
    cycle = data["cycle"][keep]
    episodes = sorted(int(c) for c in np.unique(cycle))
    lab = label[keep]
    return {"frames": {camera: data["images"][keep]}, "labels": lab, "episode": cycle,
            "episodes": episodes, "episode_has_success": [bool(lab[cycle == e].any()) for e in episodes],
            "cameras": [camera], "image_shape": tuple(data["images"].shape[1:]), "env_id": env_id,
            "keep": keep}


def load_frames_npz(path: str | Path) -> dict:
    """`save_frames`' file back as {part: {key: array}}."""
    out: dict = {}
    with np.load(path) as z:
        for name in z.files:
            part, _, key = name.partition("_")
            out.setdefault(part, {})[key] = z[name]
    return out


def train_success_classifier(frames: dict, out: str | Path, env_id: str, cfg: PerceptionCalibrationConfig,
                             camera: str = "front", log=print) -> dict:
    """A lift success classifier from the robot's own camera frames, labelled by the arm's
    kinematics (the cube's height: on the table, or in the hand at a measured height), saved as
    a `[reward]` model (rewards/classifier.py; threshold for 0.99 precision on held-out cycles).
    Why: a classifier trained on sim renders fired on the robot's frames without a lift
    (docs/bench/finetune/); these frames come from the robot's camera itself."""
    from robolearn.rewards.classifier import ClassifierConfig, fit_classifier

    model_data = success_classifier_data(frames, env_id, cfg.label_margin, camera)
    lab = model_data["labels"]
    keep = model_data.pop("keep")
    ccfg = ClassifierConfig(cameras=[camera], epochs=cfg.classifier_epochs, colour_jitter=False,
                            seed=cfg.seed, select_from_epoch=min(10, cfg.classifier_epochs))
    t0 = time.monotonic()
    _, report = fit_classifier(model_data, ccfg, out, log=lambda m: None,
                               source="robot frames of the camera calibration (labels: the arm's kinematics)")
    rep = {"frames": int(keep.sum()), "positive_frames": int(lab.sum()),
           "left_out_near_threshold": int((~keep).sum()), "held_out": report["held_out"],
           "held_out_frames": report["held_out_frames"], "train_s": round(time.monotonic() - t0, 1)}
    log(f"camera calibration: success classifier: {rep['positive_frames']} lifted of {rep['frames']} "
        f"frames, held-out {json_round(report['held_out'])}")
    return rep


def save_frames(frames: dict, path: str | Path) -> Path:
    """The calibration's labelled frames as one .npz (no pickles), so they are never lost."""
    path = Path(path)
    arrays = {f"{part}_{k}": v for part, d in frames.items() if d is not None for k, v in d.items()}
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(path)
    return path
