"""Domain randomization and reality-gap wrappers that work on every simulated task.

Why: a policy trained on one exact simulator overfits its masses, frictions, gains, camera and
timing; sampling those per episode makes it robust to the real robot's (unknown) values. The
wrappers touch only the simulator handle (`env.unwrapped.sim.model` / `.data`, see
docs/DEVELOPING.md), so the arm, the car and the dm_control suite all work unchanged.

One config (`RealityGapConfig`, read from the `[reality_gap]` table of a launch TOML) and one
function (`apply_reality_gap(env, config)`) turn everything on. Values are sampled per episode
from an RNG seeded by `reset(seed=...)`: the same seed gives the same values, successive
episodes differ, and `info["randomization"]` (on reset and every step) says what was used.
Nominal model values are restored before every resample, so nothing drifts across episodes.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from robolearn.configs import check_keys, read_toml
from robolearn.errors import ConfigError
from robolearn.sim.latency import (ActionLatency, ControlRateJitter, check_latency, check_range,
                                   require_sim, wrapper_rng)

Range = tuple[float, float]
SALT_MODEL = 0xD0A1
SALT_NOISE = 0x0B5E


# ---------------------------------------------------------------------------------- config
@dataclass
class DomainRandomizationConfig:
    """Per-episode physical parameters. Each is a [low, high] range or None (off).

    `*_scale` multiplies the nominal value, `*_add` adds to it (units in the comment).
    `per_element=True` draws one value per body/geom/actuator/dof/camera/light, False one
    value shared by all of them.
    """

    mass_scale: Range | None = None            # x body mass (inertia scaled alike)
    friction_scale: Range | None = None        # x geom sliding friction
    actuator_gain_scale: Range | None = None   # x actuator gain (and its kp/kv bias terms)
    joint_damping_scale: Range | None = None   # x dof damping
    joint_damping_add: Range | None = None     # + dof damping, N m s/rad (>= 0)
    camera_pos_add: Range | None = None        # + camera position, m, each axis
    camera_rot_deg: Range | None = None        # camera rotation about a random axis, degrees
    light_pos_add: Range | None = None         # + light position, m, each axis
    light_diffuse_scale: Range | None = None   # x light (and headlight) diffuse colour
    surface_rgb_scale: Range | None = None     # x each surface colour's R, G, B (geoms, materials)
    texture_repeat_scale: Range | None = None  # x each material's texture repeat (pattern size)
    per_element: bool = True

    def __post_init__(self):
        rules = {"mass_scale": dict(positive=True), "friction_scale": dict(positive=True),
                 "actuator_gain_scale": dict(positive=True), "joint_damping_scale": dict(nonneg=True),
                 "joint_damping_add": dict(nonneg=True), "camera_pos_add": {},
                 "camera_rot_deg": dict(limit=180.0), "light_pos_add": {},
                 "light_diffuse_scale": dict(nonneg=True), "surface_rgb_scale": dict(nonneg=True),
                 "texture_repeat_scale": dict(positive=True)}
        for name, kw in rules.items():
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, check_range(f"randomization.{name}", value, **kw))
        if not isinstance(self.per_element, bool):
            raise ConfigError(f"randomization.per_element={self.per_element!r}: must be true or false")

    @property
    def enabled(self) -> bool:
        return any(getattr(self, f.name) is not None for f in dataclasses.fields(self) if f.name != "per_element")


@dataclass
class ObservationNoiseConfig:
    """Gaussian noise added to the `state` observation every step (std in the state's units)."""

    state_std: float = 0.0

    def __post_init__(self):
        try:
            std = float(self.state_std)
        except (TypeError, ValueError):
            raise ConfigError(f"observation_noise.state_std={self.state_std!r} is not a number") from None
        if isinstance(self.state_std, bool) or not math.isfinite(std) or std < 0:
            raise ConfigError(f"observation_noise.state_std={self.state_std!r}: must be a finite number >= 0")
        self.state_std = std


@dataclass
class LatencyConfig:
    """Action delay: `steps` whole control periods, or `ms` milliseconds (not both)."""

    steps: int = 0
    ms: float = 0.0

    def __post_init__(self):
        self.steps, self.ms = check_latency(self.steps, self.ms)
        if self.steps and self.ms:
            raise ConfigError(f"latency: give steps={self.steps} or ms={self.ms}, not both")


@dataclass
class RateJitterConfig:
    """Control period x U(period_scale) each step (e.g. [0.8, 1.2]); None = off."""

    period_scale: Range | None = None

    def __post_init__(self):
        if self.period_scale is not None:
            self.period_scale = check_range("rate_jitter.period_scale", self.period_scale, positive=True)


@dataclass
class RealityGapConfig:
    """Everything `apply_reality_gap` can add; the `[reality_gap]` table of a launch TOML."""

    randomization: DomainRandomizationConfig = field(default_factory=DomainRandomizationConfig)
    observation_noise: ObservationNoiseConfig = field(default_factory=ObservationNoiseConfig)
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    rate_jitter: RateJitterConfig = field(default_factory=RateJitterConfig)

    @classmethod
    def from_dict(cls, data: dict, where: str = "reality_gap") -> "RealityGapConfig":
        """Build from a dict (the parsed `[reality_gap]` table); unknown keys raise ConfigError."""
        if not isinstance(data, dict):
            raise ConfigError(f"[{where}] must be a table, got {type(data).__name__}")
        parts = {f.name: f.type for f in dataclasses.fields(cls)}
        check_keys(data, parts, where)
        kwargs = {}
        for name, sub in data.items():
            sub_cls = _SECTIONS[name]
            if not isinstance(sub, dict):
                raise ConfigError(f"[{where}.{name}] must be a table, got {sub!r}")
            check_keys(sub, {f.name for f in dataclasses.fields(sub_cls)}, f"{where}.{name}")
            kwargs[name] = sub_cls(**sub)
        return cls(**kwargs)

    @classmethod
    def from_toml(cls, path: str | os.PathLike, section: str = "reality_gap") -> "RealityGapConfig":
        """Read the `[reality_gap]` table of a TOML launch file."""
        data = read_toml(path, what="reality-gap config", example="launch/reality_gap_arm.toml")
        if section not in data:
            raise ConfigError(f"{path} has no [{section}] table; add one (see launch/reality_gap_arm.toml)")
        return cls.from_dict(data[section], where=section)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Only the settings that are on / differ from the defaults (what a TOML file would hold)."""
        out: dict[str, dict[str, Any]] = {}
        for f in dataclasses.fields(self):
            sub = getattr(self, f.name)
            default = type(sub)()
            vals = {g.name: _plain(getattr(sub, g.name)) for g in dataclasses.fields(sub)
                    if getattr(sub, g.name) != getattr(default, g.name)}
            if vals:
                out[f.name] = vals
        return out

    def to_toml(self, section: str = "reality_gap") -> str:
        """TOML text that `from_toml` reads back to an equal config."""
        lines = [f"[{section}]"]
        for name, vals in self.to_dict().items():
            lines += ["", f"[{section}.{name}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in vals.items()]
        return "\n".join(lines) + "\n"

    @property
    def enabled(self) -> bool:
        return bool(self.to_dict())


_SECTIONS = {"randomization": DomainRandomizationConfig, "observation_noise": ObservationNoiseConfig,
             "latency": LatencyConfig, "rate_jitter": RateJitterConfig}


def load_reality_gap(value) -> RealityGapConfig:
    """A `RealityGapConfig` from a config, a dict (the table) or a TOML path."""
    if isinstance(value, RealityGapConfig):
        return value
    if isinstance(value, dict):
        return RealityGapConfig.from_dict(value)
    if isinstance(value, (str, os.PathLike)):
        return RealityGapConfig.from_toml(value)
    raise ConfigError(f"reality_gap={value!r}: give a RealityGapConfig, a dict or a TOML file path")


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    return str(int(v))


# ---------------------------------------------------------------------------------- wrappers
class DomainRandomization(gym.Wrapper):
    """Resample physical and visual parameters of `env.unwrapped.sim.model` at every reset.

    Order at reset: restore nominal values -> sample -> write to the model -> `mj_setConst`
    (derived constants such as subtree masses follow the new masses) -> `env.reset`. So the
    reset observation (and any reset controller) already sees the new episode's robot.
    """

    def __init__(self, env: gym.Env, config: DomainRandomizationConfig, seed: int | None = None):
        super().__init__(env)
        if not isinstance(config, DomainRandomizationConfig):
            raise ConfigError(f"DomainRandomization needs a DomainRandomizationConfig, got {config!r}")
        self.config = config
        self.sim = require_sim(env, "domain randomization")
        m = self.sim.model
        self._fields = MODEL_FIELDS
        self.nominal = nominal_model_values(m)
        self._scratch = mujoco.MjData(m)
        self._seed = seed
        self._rng: np.random.Generator | None = None
        self.values: dict[str, np.ndarray] = {}
        # geoms whose nominal colours are equal are one surface (e.g. a track's strips)
        self._colour_groups = np.unique(self.nominal["geom_rgba"], axis=0, return_inverse=True)[1].reshape(-1)

    def restore_nominal(self, set_const: bool = True) -> None:
        """Write the model's nominal values back (what it had when the wrapper was made)."""
        m = self.sim.model
        for name in self._fields:
            getattr(m, name)[...] = self.nominal[name]
        m.vis.headlight.diffuse[...] = self.nominal["headlight_diffuse"]
        if set_const:
            self._set_const()

    def reset(self, *, seed=None, options=None):
        if seed is not None or self._rng is None:
            self._rng = wrapper_rng(seed if seed is not None else self._seed, SALT_MODEL)
        self.restore_nominal(set_const=False)  # _apply recomputes the derived constants
        self.values = self._sample(self._rng)
        self._apply(self.values)
        obs, info = self.env.reset(seed=seed, options=options)
        info["randomization"] = {**info.get("randomization", {}), **self.values}
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["randomization"] = {**info.get("randomization", {}), **self.values}
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------------------- helpers
    def _sample(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        c, m = self.config, self.sim.model

        def draw(rng_range, *shape):
            if self.config.per_element:
                return rng.uniform(*rng_range, size=shape)
            return np.full(shape, rng.uniform(*rng_range))

        counts = {"mass_scale": (m.nbody,), "friction_scale": (m.ngeom,), "actuator_gain_scale": (m.nu,),
                  "joint_damping_scale": (m.nv,), "joint_damping_add": (m.nv,), "camera_pos_add": (m.ncam, 3),
                  "camera_rot_deg": (m.ncam,), "light_pos_add": (m.nlight, 3),
                  "light_diffuse_scale": (m.nlight + 1,)}  # the last entry is the headlight
        values = {}
        for name, shape in counts.items():  # fixed order: reproducible from the seed
            rng_range = getattr(c, name)
            if rng_range is not None:
                values[name] = draw(rng_range, *shape)
        if "camera_rot_deg" in values:
            axes = rng.normal(size=(m.ncam, 3))
            values["camera_rot_axis"] = axes / np.maximum(np.linalg.norm(axes, axis=1, keepdims=True), 1e-12)
        if c.surface_rgb_scale is not None:
            # one draw per channel for each group of geoms that share a colour (every strip of
            # asphalt stays one asphalt) and for each material; per_element=False: one tint
            groups = self._colour_groups
            if c.per_element:
                per_group = rng.uniform(*c.surface_rgb_scale, size=(groups.max(initial=-1) + 1, 3))
                values["geom_rgb_scale"] = per_group[groups] if m.ngeom else np.ones((0, 3))
                values["material_rgb_scale"] = rng.uniform(*c.surface_rgb_scale, size=(m.nmat, 3))
            else:
                tint = rng.uniform(*c.surface_rgb_scale, size=3)
                values["geom_rgb_scale"] = np.tile(tint, (m.ngeom, 1))
                values["material_rgb_scale"] = np.tile(tint, (m.nmat, 1))
        if c.texture_repeat_scale is not None:
            values["texture_repeat_scale"] = draw(c.texture_repeat_scale, m.nmat)
        return values

    def _apply(self, v: dict[str, np.ndarray]) -> None:
        apply_model_values(self.sim.model, self.nominal, v)
        self._set_const()

    def _set_const(self) -> None:
        set_const(self.sim.model, self.sim.data, self._scratch)


# ------------------------------------------------- parameter application (shared helpers)
#: model arrays `apply_model_values` may write (their nominal copies come from `nominal_model_values`)
MODEL_FIELDS = ("body_mass", "body_inertia", "geom_friction", "actuator_gainprm", "actuator_biasprm",
                "dof_damping", "cam_pos", "cam_quat", "light_pos", "light_diffuse", "geom_rgba", "mat_rgba",
                "mat_texrepeat")


def nominal_model_values(m: mujoco.MjModel) -> dict[str, np.ndarray]:
    """Copies of every array `apply_model_values` writes, to scale from (and restore)."""
    nominal = {name: getattr(m, name).copy() for name in MODEL_FIELDS}
    nominal["headlight_diffuse"] = m.vis.headlight.diffuse.copy()
    return nominal


def apply_model_values(m: mujoco.MjModel, nom: dict[str, np.ndarray], v: dict[str, np.ndarray]) -> None:
    """Write physical/visual parameters relative to the nominal values `nom`.

    `v` holds any of: mass_scale (nbody), friction_scale (ngeom), actuator_gain_scale (nu),
    joint_damping_scale / joint_damping_add (nv), camera_pos_add (ncam, 3), camera_rot_deg
    (ncam) with camera_rot_axis (ncam, 3), light_pos_add (nlight, 3), light_diffuse_scale
    (nlight + 1, the last is the headlight), geom_rgb_scale (ngeom, 3), material_rgb_scale
    (nmat, 3), texture_repeat_scale (nmat). Used by domain randomization (sampled values),
    the emulated reality (fixed values) and system identification (fitted values); call
    `set_const` afterwards so derived constants follow.
    """
    if "mass_scale" in v:
        m.body_mass[:] = nom["body_mass"] * v["mass_scale"]
        m.body_inertia[:] = nom["body_inertia"] * v["mass_scale"][:, None]
    if "friction_scale" in v:
        m.geom_friction[:, 0] = nom["geom_friction"][:, 0] * v["friction_scale"]
    if "actuator_gain_scale" in v:
        s = v["actuator_gain_scale"]
        m.actuator_gainprm[:, 0] = nom["actuator_gainprm"][:, 0] * s
        m.actuator_biasprm[:, 1:3] = nom["actuator_biasprm"][:, 1:3] * s[:, None]
    if "joint_damping_scale" in v or "joint_damping_add" in v:
        m.dof_damping[:] = nom["dof_damping"] * v.get("joint_damping_scale", 1.0) + v.get("joint_damping_add", 0.0)
    if "camera_pos_add" in v:
        m.cam_pos[:] = nom["cam_pos"] + v["camera_pos_add"]
    if "camera_rot_deg" in v:
        for i in range(m.ncam):
            dq = np.zeros(4)
            mujoco.mju_axisAngle2Quat(dq, v["camera_rot_axis"][i], math.radians(v["camera_rot_deg"][i]))
            q = np.zeros(4)
            mujoco.mju_mulQuat(q, nom["cam_quat"][i], dq)  # rotate in the camera's own frame
            m.cam_quat[i] = q / np.linalg.norm(q)
    if "light_pos_add" in v:
        m.light_pos[:] = nom["light_pos"] + v["light_pos_add"]
    if "light_diffuse_scale" in v:
        s = v["light_diffuse_scale"]
        m.light_diffuse[:] = nom["light_diffuse"] * s[:-1, None]
        m.vis.headlight.diffuse[:] = nom["headlight_diffuse"] * s[-1]
    if "geom_rgb_scale" in v:
        m.geom_rgba[:, :3] = np.clip(nom["geom_rgba"][:, :3] * v["geom_rgb_scale"], 0.0, 1.0)
    if "material_rgb_scale" in v:
        m.mat_rgba[:, :3] = np.clip(nom["mat_rgba"][:, :3] * v["material_rgb_scale"], 0.0, 1.0)
    if "texture_repeat_scale" in v:
        m.mat_texrepeat[:] = nom["mat_texrepeat"] * v["texture_repeat_scale"][:, None]


def set_const(m: mujoco.MjModel, d: mujoco.MjData, scratch: mujoco.MjData | None = None) -> None:
    """`mj_setConst` recomputes derived constants (subtree masses, inverse weights, camera
    offsets) from new values; the simulation state in `d` is kept as it was."""
    scratch = scratch if scratch is not None else mujoco.MjData(m)
    mujoco.mj_copyData(scratch, m, d)   # mj_setConst uses `d` as a work area
    mujoco.mj_setConst(m, d)
    mujoco.mj_copyData(d, m, scratch)
    mujoco.mj_forward(m, d)


class ObservationNoise(gym.Wrapper):
    """Add N(0, std^2) to the `state` observation on reset and every step (as sensor noise).

    The noisy state is kept inside the observation space's bounds where those are finite (a
    sensor saturates); the noise stream is seeded by `reset(seed=...)`.
    """

    def __init__(self, env: gym.Env, state_std: float, seed: int | None = None):
        super().__init__(env)
        self.state_std = ObservationNoiseConfig(state_std).state_std
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict) or "state" not in space.spaces:
            raise ConfigError("observation noise is added to obs['state'], but this env has no state "
                              "observation (make it with obs='state' or obs='both')")
        self._low, self._high = space["state"].low, space["state"].high
        self._seed = seed
        self._rng: np.random.Generator | None = None

    def _noisy(self, obs):
        obs = dict(obs)
        s = obs["state"]
        noisy = s.astype(np.float64) + self._rng.normal(0.0, self.state_std, size=s.shape)
        obs["state"] = np.clip(noisy, self._low, self._high).astype(s.dtype)
        return obs

    def reset(self, *, seed=None, options=None):
        if seed is not None or self._rng is None:
            self._rng = wrapper_rng(seed if seed is not None else self._seed, SALT_NOISE)
        obs, info = self.env.reset(seed=seed, options=options)
        info["randomization"] = {**info.get("randomization", {}), "obs_noise_std": self.state_std}
        return self._noisy(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["randomization"] = {**info.get("randomization", {}), "obs_noise_std": self.state_std}
        return self._noisy(obs), reward, terminated, truncated, info


#: Camera-side domain randomisation (Tobin et al. 2017) for models that read a real camera:
#: pose, tilt and light per episode; colours are jittered in training
#: (`policies.encoders.colour_jitter`). A `[reality_gap]` table: `{"randomization": ...}`.
CAMERA_RANDOMIZATION = {"randomization": {
    "camera_pos_add": [-0.03, 0.03], "camera_rot_deg": [0.0, 6.0], "light_pos_add": [-0.3, 0.3],
    "light_diffuse_scale": [0.5, 1.3], "per_element": False}}

#: The car's camera sees mostly track: a real room's floor, tape and walls have their own colours
#: and patterns, so the car's encoder also trains on each surface colour scaled per channel
#: (surfaces that share a colour, the track's strips, stay one surface) and the ground's pattern
#: resized; cameras and lights are drawn one each.
CAR_CAMERA_RANDOMIZATION = {"randomization": {
    **CAMERA_RANDOMIZATION["randomization"], "surface_rgb_scale": [0.6, 1.4],
    "texture_repeat_scale": [0.5, 2.0], "per_element": True}}


#: which randomisation each env's perception renders use, by env ID (an explicit table, so a new
#: env picks its own instead of matching on its name); envs not listed get CAMERA_RANDOMIZATION
PERCEPTION_RANDOMIZATION = {"robolearn/CarLap-v0": CAR_CAMERA_RANDOMIZATION}


def camera_randomization(env_id: str) -> dict:
    """The `[reality_gap]` table a perception model for `env_id` trains its renders under: the
    car's camera looks at the track, whose colour and pattern differ between sim and the room,
    so it randomises surfaces too; the arm's localisers keep camera pose + light."""
    return PERCEPTION_RANDOMIZATION.get(env_id, CAMERA_RANDOMIZATION)


def apply_reality_gap(env: gym.Env, config, seed: int | None = None) -> gym.Env:
    """Wrap `env` with every gap `config` turns on (RealityGapConfig, dict or TOML path).

    Order, inside out: DomainRandomization (model) -> ActionLatency -> ControlRateJitter (so a
    jittered period is what the latency's sub-steps are cut from) -> ObservationNoise (last, so
    it perturbs what the policy sees). `seed` seeds episodes reset without a seed.
    """
    cfg = load_reality_gap(config)
    if cfg.randomization.enabled:
        env = DomainRandomization(env, cfg.randomization, seed=seed)
    if cfg.latency.steps or cfg.latency.ms:
        env = ActionLatency(env, steps=cfg.latency.steps, ms=cfg.latency.ms)
    if cfg.rate_jitter.period_scale is not None:
        env = ControlRateJitter(env, cfg.rate_jitter.period_scale, seed=seed)
    if cfg.observation_noise.state_std > 0:
        env = ObservationNoise(env, cfg.observation_noise.state_std, seed=seed)
    return env


def make_with_reality_gap(env_id: str, reality_gap=None, seed: int | None = None, **env_kwargs) -> gym.Env:
    """`gymnasium.make(env_id, **env_kwargs)` wrapped by `apply_reality_gap` when `reality_gap`
    (a RealityGapConfig, the `[reality_gap]` dict or a TOML path) is given."""
    env = gym.make(env_id, **env_kwargs)
    if reality_gap is None:
        return env
    try:
        return apply_reality_gap(env, reality_gap, seed=seed)
    except BaseException:
        env.close()
        raise
