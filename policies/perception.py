"""Perception pretrained in simulation: a frozen object localiser that makes pixels cheap.

Why (Tobin et al. 2017, domain randomisation): a small conv net trained *only* on renders with
randomised camera pose, lighting and colours learned to localise objects well enough to
transfer to real images. Here it is trained to predict the simulator's privileged truth (the
cube's position) from one camera frame, then frozen: the env computes its prediction once per
frame (`PerceptionFeatures`, appended to `state`), so the learner sees a short vector, replay
stores that vector (features cached, no conv in the update), and an update costs what a
state update costs. End-to-end DrQ stays the option for GPUs.

Files: DIR/perception.safetensors (the net) and DIR/perception.json (env, camera, frame, image
size, target names and normalisation, held-out error). Nothing is downloaded; a checkpoint is
loaded from a local path only.

Frames: a camera fixed to the world (`front`) is trained on world coordinates (`"frame":
"world"`); a camera that moves with the arm (`wrist`) on the cube in its own frame (`"frame":
"camera"`), since what it sees depends on where the arm put it. `PerceptionFeatures` turns a
camera-frame estimate into world coordinates with the arm's kinematics at the joints measured
in the same observation (`state[:5]`, the same source on sim and hardware), so the policy's
feature means "the cube in the world" whichever camera.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robolearn.errors import ConfigError, DatasetError

WEIGHTS = "perception.safetensors"
META = "perception.json"
# privileged-vector slices the localiser can learn, per arm task (see robolearn/tasks/arm.py)
TARGETS = {"robolearn/ArmLift-v0": (slice(3, 6), ["cube_x", "cube_y", "cube_z"]),
           "robolearn/ArmPush-v0": (slice(3, 6), ["cube_x", "cube_y", "cube_z"]),
           # the car: where it is in its lane and what the track does ahead (robolearn/tasks/car.py
           # PRIVILEGED_LABELS), i.e. what its camera shows and its odometry cannot know
           "robolearn/CarLap-v0": (slice(0, 6), ["lateral", "sin_heading_err", "cos_heading_err",
                                                 "curv_0.5m", "curv_1m", "curv_2m"])}
#: the frames a localiser's targets can be in (meta "frame"; a model without it is "world")
FRAMES = ("world", "camera")
CAMERA_TARGETS = ["cube_cam_x", "cube_cam_y", "cube_cam_z"]
#: the arm tasks' state starts with the measured joints q (5, rad): robolearn/tasks/arm.py
JOINTS = slice(0, 5)


def default_frame(camera: str) -> str:
    """"camera" for a camera that moves with the arm (mounted on one of its links), else "world"."""
    from robolearn.sim.kinematics import ArmKinematics

    return "camera" if ArmKinematics().camera_on_arm(camera) else "world"


class LocaliserNet(nn.Module):
    """uint8 (B, H, W, 3) -> normalised targets (B, T). Strided convs: ~6 M multiply-adds at
    84x84, so training on thousands of frames takes a minute on a CPU core."""

    def __init__(self, image_shape: tuple[int, int, int], n_targets: int, filters: int = 32):
        super().__init__()
        h, w, c = image_shape
        self.image_shape = (h, w, c)
        self.convs = nn.Sequential(
            nn.Conv2d(c, filters, 3, stride=2), nn.ReLU(),
            nn.Conv2d(filters, filters, 3, stride=2), nn.ReLU(),
            nn.Conv2d(filters, 2 * filters, 3, stride=2), nn.ReLU(),
            nn.Conv2d(2 * filters, 2 * filters, 3, stride=1), nn.ReLU())
        with torch.no_grad():
            n = self.convs(torch.zeros(1, c, h, w)).numel()
        self.head = nn.Sequential(nn.Linear(n, 256), nn.ReLU(), nn.Linear(256, n_targets))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        return self.head(self.convs(x).flatten(1))


@dataclass
class Localiser:
    """A trained, frozen localiser: `predict(image) -> targets in physical units`."""

    net: LocaliserNet
    meta: dict
    digest: str = ""  # sha256 of the files it was loaded from: a resumed run checks it
    source: str = ""  # the folder it was loaded from (for error messages)

    @property
    def camera(self) -> str:
        return self.meta["camera"]

    @property
    def dim(self) -> int:
        return len(self.meta["targets"])

    @property
    def frame(self) -> str:
        """"world", or "camera": the estimate is in `camera`'s own frame (see the module doc)."""
        return self.meta.get("frame", "world")

    @torch.inference_mode()
    def predict(self, images: np.ndarray) -> np.ndarray:
        batched = images.ndim == 4
        x = torch.as_tensor(images if batched else images[None])
        y = self.net(x).numpy() * np.asarray(self.meta["target_std"]) + np.asarray(self.meta["target_mean"])
        y = y.astype(np.float32)
        return y if batched else y[0]

    def save(self, out: str | Path) -> Path:
        from safetensors.torch import save_file

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, str(out / WEIGHTS))
        (out / META).write_text(json.dumps(self.meta, indent=1))
        return out

    @classmethod
    def load(cls, path: str | Path) -> "Localiser":
        from safetensors.torch import load_file

        path = Path(path)
        if not (path / META).is_file() or not (path / WEIGHTS).is_file():
            raise DatasetError(f"perception model {path} not found (looked in {path.resolve()}): expected "
                               f"{META} and {WEIGHTS}; train it first with `robolearn perception train "
                               f"--env ENV_ID --out {path}`")
        try:
            meta = json.loads((path / META).read_text())
            net = LocaliserNet(tuple(meta["image_shape"]), len(meta["targets"]), meta.get("filters", 32))
            weights = load_file(str(path / WEIGHTS))
            net.load_state_dict(weights)
            digest = hashlib.sha256((path / WEIGHTS).read_bytes() + (path / META).read_bytes()).hexdigest()
        except (ValueError, KeyError, TypeError, RuntimeError, OSError) as exc:
            raise DatasetError(f"perception model {path} is corrupt or from another version: {exc}") from None
        if meta.get("frame", "world") not in FRAMES:
            raise DatasetError(f"perception model {path}: frame {meta['frame']!r} is not one of {FRAMES}")
        bad = [k for k, v in weights.items() if not torch.isfinite(v).all()]
        if bad:  # it would put NaN into every observation, and from there into replay
            raise DatasetError(f"perception model {path} has NaN/inf weights in {bad[:5]}: the file is "
                               f"corrupt; delete {path} and train it again with `robolearn perception "
                               f"train --env {meta.get('env', 'ENV_ID')} --out {path}`")
        net.eval().requires_grad_(False)
        return cls(net, meta, digest, str(path))


class PerceptionFeatures(gym.ObservationWrapper):
    """Appends the localiser's prediction (physical units, world frame, computed once per frame
    from `camera`) to `state`, so every learner, replay, export and runtime path reads it as
    part of the one state vector; drops the camera images unless `keep_images`. The prediction
    comes from a camera, which hardware has, so the result still runs on `backend="real"`.
    A camera-frame localiser's estimate is turned into the world frame at the joints measured
    in the same observation (`state[:5]`), with the arm's kinematic model (`kinematics`: the
    task's own, `task.kin`, by default)."""

    def __init__(self, env: gym.Env, localiser: Localiser, keep_images: bool = False, kinematics=None):
        super().__init__(env)
        cam = localiser.camera
        self.kin = None
        if localiser.frame == "camera":
            self.kin = _camera_kinematics(env, localiser, kinematics)
        space = env.observation_space
        if cam not in space.spaces:
            raise ConfigError(f"perception model reads camera {cam!r}, the env has "
                              f"{sorted(space.spaces)}: make the env with camera={cam!r}")
        if tuple(space[cam].shape) != tuple(localiser.meta["image_shape"]):
            raise ConfigError(f"perception model was trained on {tuple(localiser.meta['image_shape'])} "
                              f"images, camera {cam!r} gives {tuple(space[cam].shape)}")
        self.localiser = localiser
        self.keep_images = keep_images
        if "state" not in space.spaces:
            raise ConfigError("perception appends to the `state` observation: use obs='state' or 'both'")
        spaces = {k: s for k, s in space.spaces.items()
                  if keep_images or not (len(s.shape) == 3 and s.dtype == np.uint8)}
        n = space["state"].shape[0] + localiser.dim
        spaces["state"] = gym.spaces.Box(-np.inf, np.inf, shape=(n,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict(spaces)

    def reset(self, **kwargs):
        if hasattr(self.localiser, "reset"):   # an estimator with memory (the finder's last sighting)
            self.localiser.reset()
        return super().reset(**kwargs)

    def observation(self, obs):
        out = {k: v for k, v in obs.items() if k in self.observation_space.spaces}
        pred = self.localiser.predict(obs[self.localiser.camera])
        if not np.all(np.isfinite(pred)):  # never let it reach replay or the robot
            raise DatasetError(f"perception model {self.localiser.source or '(in memory)'} gave "
                               f"NaN/inf {pred.tolist()} for a camera frame: its weights are corrupt; "
                               "train it again with `robolearn perception train`")
        if self.kin is not None:
            pred = to_world(pred, *self.kin.camera_pose(obs["state"][JOINTS], self.localiser.camera))
        out["state"] = np.concatenate((obs["state"], pred))
        return out


def _camera_kinematics(env: gym.Env, localiser: Localiser, kinematics=None):
    """The kinematics that place a camera-frame localiser's camera, from the env's arm model."""
    from robolearn.sim.kinematics import ArmKinematics

    name = localiser.source or "(in memory)"
    if kinematics is None:
        task = getattr(env.unwrapped, "task", None)
        task_kin = getattr(task, "kin", None)
        if not isinstance(task_kin, ArmKinematics):
            raise ConfigError(f"perception model {name} gives the cube in camera {localiser.camera!r}'s "
                              "frame, which needs the arm's kinematics; this env has none (an arm env only)")
        kinematics = ArmKinematics(task_kin.model)   # its own MjData: never disturbs the task's
    try:
        kinematics.model.camera(localiser.camera)
    except KeyError:
        raise ConfigError(f"perception model {name} gives the cube in camera {localiser.camera!r}'s frame, "
                          f"which the arm model does not have: use it with the camera it was trained on") from None
    return kinematics


def find_localiser(env: gym.Env) -> Localiser | None:
    """The localiser of the PerceptionFeatures wrapper in `env`'s wrapper chain, if any."""
    while env is not None:
        if isinstance(env, PerceptionFeatures):
            return env.localiser
        env = getattr(env, "env", None)
    return None


def camera_names(env_kwargs: dict) -> list[str] | None:
    """The camera names an arm env's `camera` option gives (None: the env's default cameras):
    a name, a list of names, {name: source}; on backend="real" a single source is `front`."""
    cams = env_kwargs.get("camera")
    if cams is None:
        return None
    if isinstance(cams, dict):
        return list(cams)
    if env_kwargs.get("backend") == "real":
        return ["front"]         # a real arm's one source (URL, device index) is named front
    return [cams] if isinstance(cams, str) else list(cams)


def load_estimator(path: str | Path):
    """`perception = DIR`: a localiser folder, or a cube finder folder (policies/finder_estimate.py:
    the finder's (x, y, seen) as the estimate)."""
    from robolearn.policies.finder_estimate import FinderEstimate, is_finder_dir

    return FinderEstimate.load(path) if is_finder_dir(path) else Localiser.load(path)


def wrap_env_kwargs(env_id: str, obs: str, kwargs: dict) -> tuple[dict, Localiser | None]:
    """Take `perception=DIR` out of env kwargs: the env then renders the model's camera."""
    path = kwargs.pop("perception", None)
    if not path:
        return kwargs, None
    loc = load_estimator(path)
    if loc.meta.get("env") and loc.meta["env"] != env_id:
        raise ConfigError(f"perception model {path} was trained on {loc.meta['env']}, not {env_id}")
    cams = kwargs.get("camera")
    if cams is not None and loc.camera not in camera_names(kwargs):
        why = " (it gives the cube in that camera's frame)" if loc.frame == "camera" else ""
        raise ConfigError(f"perception model {path} was trained on camera {loc.camera!r}{why}; env_kwargs "
                          f"camera = {cams!r} lacks it: add {loc.camera!r} (backend='real': "
                          f"{{{loc.camera} = SOURCE}})")
    kwargs = dict(kwargs)
    if obs == "pixels":
        raise ConfigError("perception appends to the state vector: use obs='state' (or 'both')")
    kwargs["obs"] = "both"
    if kwargs.get("camera") is None:
        kwargs["camera"] = loc.camera
    kwargs.setdefault("image_size", list(loc.meta["image_shape"][:2]))  # the size it was trained on
    return kwargs, loc


# ------------------------------------------------------------------------------ training
#: share of an episode's frames kept (rendered): the scene changes little from one step to the
#: next, so a few frames from many episodes teach where the cube is better than every frame of
#: a few (with every frame, 4000 frames came from ~60 cube positions and the net missed new
#: positions by ~15 mm in plain sim)
KEEP_FRAME = 0.15


def collect_frames(env_id: str, frames: int, camera: str, seed: int = 0,
                   randomize: bool = True, progress=None,
                   keep: float = KEEP_FRAME, in_camera_frame: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N,H,W,3), privileged targets (N,T)) from domain-randomised episodes that
    mix the scripted controller (the cube grasped, carried, lifted) with random actions; each
    step's frame is rendered and kept with probability `keep` (episode order is kept, so a
    tail split holds out whole episodes). `in_camera_frame`: targets in the camera's frame as
    the arm's nominal kinematics place it at the measured joints (a camera that moves with the
    arm, the wrist's: world = `to_world(target, *kin.camera_pose(q, camera))`)."""
    from robolearn.sim.randomization import DomainRandomization, camera_randomization, load_reality_gap

    if env_id not in TARGETS:
        raise ConfigError(f"no perception targets defined for {env_id}; supported: {', '.join(TARGETS)}")
    if not 0 < keep <= 1:
        raise ConfigError(f"keep={keep}: a share of frames in (0, 1]")
    sl, _ = TARGETS[env_id]
    env = gym.make(env_id, obs="state", camera=camera, privileged_obs=True)
    if randomize:  # Tobin et al.: camera pose, lighting (the car: surface colours, patterns too);
        # colours are also jittered in training
        gap = load_reality_gap(camera_randomization(env_id))
        env = DomainRandomization(env, gap.randomization, seed=seed)
    rng = np.random.default_rng(seed)
    ctrl = env.unwrapped.scripted_controller()
    cam = env.unwrapped.backend.cameras[camera]
    kin = None
    if in_camera_frame:
        from robolearn.sim.kinematics import ArmKinematics
        kin = ArmKinematics()
    images, targets = [], []
    ep = 0
    try:
        while len(images) < frames:
            obs, _ = env.reset(seed=seed + ep)
            ctrl.reset()
            ep += 1
            mode = rng.choice(["scripted", "noisy", "random"], p=[0.45, 0.35, 0.2])
            while len(images) < frames:
                if rng.random() < keep:
                    images.append(cam.read().image.copy())
                    target = obs["privileged"][sl]
                    if kin is not None:
                        q = env.unwrapped.task.arm.read().q
                        target = to_camera(target, *kin.camera_pose(q, camera))
                    targets.append(target)
                    if progress is not None:
                        progress(1)
                if mode == "random":
                    a = rng.uniform(-1, 1, env.action_space.shape)
                else:
                    a = np.asarray(ctrl.act(obs), dtype=np.float64)
                    if mode == "noisy":
                        a = a + rng.normal(0, 0.4, a.shape)
                obs, _, term, trunc, _ = env.step(np.clip(a, -1, 1).astype(np.float32))
                if term or trunc:
                    break
    finally:
        env.close()
    return np.stack(images), np.stack(targets).astype(np.float32)


def to_camera(p_world, cam_pos, cam_rot) -> np.ndarray:
    """World point -> the camera's frame (cam_rot: camera -> world)."""
    return (np.asarray(cam_rot).T @ (np.asarray(p_world, float) - cam_pos)).astype(np.float32)


def to_world(p_cam, cam_pos, cam_rot) -> np.ndarray:
    return (np.asarray(cam_pos) + np.asarray(cam_rot) @ np.asarray(p_cam, float)).astype(np.float32)


#: random zoom about the image centre in training: a camera whose field of view differs from the
#: sim's by up to this factor (a lens, a crop; domain randomisation moves and turns the camera
#: but never changes its field of view)
ZOOM = 1.1


def random_zoom(x: torch.Tensor, g: torch.Generator, zoom: float = ZOOM) -> torch.Tensor:
    """Scale each image of (B, C, H, W) about its centre by a factor in [1/zoom, zoom]."""
    b = x.shape[0]
    s = torch.exp((torch.rand(b, generator=g) * 2 - 1) * float(np.log(zoom)))
    theta = torch.zeros(b, 2, 3)
    theta[:, 0, 0] = theta[:, 1, 1] = 1.0 / s
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def _augment(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Colour (per-channel gain = tint, brightness, contrast), a +-4 px shift and a zoom
    (another field of view), on uint8 NHWC."""
    from robolearn.policies.encoders import colour_jitter, random_shift

    xf = colour_jitter(x.float(), g).permute(0, 3, 1, 2)
    xf = random_zoom(random_shift(xf, 4, g), g).permute(0, 2, 3, 1)
    return xf.clamp(0, 255)


def train_localiser(images: np.ndarray, targets: np.ndarray, *, env_id: str, camera: str,
                    epochs: int = 20, batch_size: int = 128, lr: float = 1e-3, seed: int = 0,
                    holdout: float = 0.15, progress=None, target_names: list[str] | None = None,
                    frame: str = "world") -> tuple[Localiser, dict]:
    """Fit a LocaliserNet; returns it frozen and a report with held-out errors (target units).
    `frame`: what the targets are in (recorded in the meta: PerceptionFeatures converts a
    "camera" model's output to the world); `target_names` default to the env's perception
    targets (TARGETS), or CAMERA_TARGETS in the camera frame."""
    if frame not in FRAMES:
        raise ConfigError(f"frame={frame!r}: one of {', '.join(FRAMES)}")
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    n = len(images)
    if n < 50:
        raise ConfigError(f"{n} frames are too few to train a localiser (use --frames >= 1000)")
    # held out: the last frames, i.e. whole episodes the net never saw a frame of (frames of
    # one episode are near-duplicates: a random split would report memorisation as accuracy)
    n_val = max(1, int(n * holdout))
    val, tr = np.arange(n - n_val, n), np.arange(n - n_val)
    mean, std = targets[tr].mean(0), targets[tr].std(0) + 1e-6
    if np.all(std < 1e-3):  # one episode's frames: the net could only learn a constant
        raise ConfigError(f"the {n} frames show the object in one place (targets vary by < 1 mm): "
                          "render more episodes (--frames >= 1000)")
    batch_size = min(batch_size, len(tr))  # a tiny set still trains (one batch per epoch)
    net = LocaliserNet(images.shape[1:], targets.shape[1])
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    x_all = torch.as_tensor(images)
    y_all = torch.as_tensor((targets - mean) / std)
    steps = epochs * max(1, len(tr) // batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    t0 = time.monotonic()
    for _ in range(epochs):
        order = torch.as_tensor(tr)[torch.randperm(len(tr), generator=g)]
        for i in range(0, len(order) - batch_size + 1, batch_size):
            idx = order[i:i + batch_size]
            pred = net(_augment(x_all[idx], g))  # float [0, 255] NHWC, like the uint8 frames
            loss = F.smooth_l1_loss(pred, y_all[idx], beta=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if progress is not None:
                progress(1)
    names = target_names or (CAMERA_TARGETS if frame == "camera" else TARGETS[env_id][1])
    meta = {"env": env_id, "camera": camera, "frame": frame, "image_shape": list(images.shape[1:]),
            "targets": list(names), "target_mean": mean.tolist(),
            "target_std": std.tolist(),
            "filters": 32, "frames": int(n), "epochs": epochs, "train_s": round(time.monotonic() - t0, 1)}
    loc = Localiser(net.eval().requires_grad_(False), meta)
    err = np.abs(loc.predict(images[val]) - targets[val])
    report = {"heldout_frames": int(n_val),
              "heldout_mae_m": err.mean(0).round(5).tolist(),
              "heldout_p90_m": np.quantile(err, 0.9, axis=0).round(5).tolist(),
              "heldout_mean_dist_m": float(np.linalg.norm(loc.predict(images[val]) - targets[val],
                                                         axis=1).mean()),
              # the same distance for a constant guess (the training mean): what "learned" beats
              "heldout_mean_dist_guess_m": float(np.linalg.norm(targets[val] - mean, axis=1).mean())}
    loc.meta["report"] = report
    return loc, report
