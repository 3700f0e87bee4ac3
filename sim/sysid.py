"""System identification: fit the simulator's physical parameters to episodes recorded on hardware.

Why: a policy trained on a simulator whose servos are stiffer, faster and more punctual than
the real ones learns to rely on that. Replaying the *recorded actions* in sim from the
recorded start state and minimising the trajectory error between sim and hardware over a few
physical parameters (CMA-ES, from the `cma` library) gives a simulator that moves like the
robot; `robolearn train --sim-params FILE` then trains on it.

Parameters (`ARM_PARAMS`, `CAR_PARAMS`) are plain scalars with a nominal value (the training
sim) and bounds; `apply_sim_params` writes them into an env's model with the same
`apply_model_values` helper domain randomization uses, and adds `ActionLatency` for latency.
A `[sim_params]` TOML table (written by `save_sim_params`, read by `load_sim_params`) holds a
fitted set, e.g.::

    [sim_params]
    robot = "car"
    motor_gain = 0.61
    steering_offset_rad = 0.058
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import numpy as np

from robolearn.configs import check_keys, read_toml
from robolearn.errors import ConfigError, DatasetError


@dataclass(frozen=True)
class Param:
    nominal: float
    low: float
    high: float
    doc: str


ARM_PARAMS = {
    "servo_gain_scale": Param(1.0, 0.1, 3.0, "x servo position gain (kp, kv)"),
    "max_speed_scale": Param(1.0, 0.1, 2.0, "x servo no-load speed"),
    "damping_scale": Param(1.0, 0.1, 5.0, "x joint damping"),
    "friction_scale": Param(1.0, 0.1, 3.0, "x geom sliding friction"),
    "latency_ms": Param(0.0, 0.0, 200.0, "action latency, ms"),
    # the training sim spreads each new goal over the control period (re-plans once per
    # period); a real servo heads for it at once and re-plans at its own loop rate. Nominal
    # 1 Hz = "at most once per control period", i.e. the training sim at any control rate.
    "servo_rate_hz": Param(1.0, 1.0, 500.0, "how often the servos re-plan toward their goal, Hz"),
}
CAR_PARAMS = {
    "motor_gain": Param(1.0, 0.1, 3.0, "x motor torque per unit throttle"),
    "tyre_friction_scale": Param(1.0, 0.1, 3.0, "x tyre / floor friction"),
    "steering_offset_rad": Param(0.0, -0.2, 0.2, "wheels' angle at zero steering command, rad"),
    "latency_ms": Param(0.0, 0.0, 200.0, "action latency, ms"),
}
PARAMS = {"arm": ARM_PARAMS, "car": CAR_PARAMS}
# arm: gain, speed and damping shape the same step response; fitting speed + latency alone
# folded the others into them (42 % / 25 % off on the hard reality), all four are recovered
# within 9 % with ~150 evaluations each (docs/bench/sim2real-arm4/). The servo rate matters
# for fast servos (a robot with no physics gap: 2.4x lower error), not for the hard reality's
# speed-limited ones, so it is fitted on request (--params ...,servo_rate_hz)
DEFAULT_FIT = {"arm": ("servo_gain_scale", "max_speed_scale", "damping_scale", "latency_ms"),
               "car": ("motor_gain", "steering_offset_rad", "latency_ms")}


def robot_of(env_id: str) -> str:
    name = env_id.split("/")[-1]
    if name.startswith("Arm"):
        return "arm"
    if name.startswith("Car"):
        return "car"
    raise ConfigError(f"calibrate-sim knows the arm and car envs, not {env_id!r}")


# ------------------------------------------------------------------------------ sim params
def check_sim_params(params: dict, where: str = "sim_params") -> tuple[str, dict[str, float]]:
    """(robot, {name: value}) from a `[sim_params]` table; unknown keys and out-of-range
    values raise ConfigError naming them."""
    if not isinstance(params, dict):
        raise ConfigError(f"[{where}] must be a table")
    robot = params.get("robot")
    if robot not in PARAMS:
        raise ConfigError(f"[{where}] needs robot = \"arm\" or \"car\" (got {robot!r})")
    values = {k: v for k, v in params.items() if k != "robot"}
    check_keys(values, PARAMS[robot], f"[{where}] for the {robot}")
    out = {}
    for k, v in values.items():
        p = PARAMS[robot][k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or not p.low <= v <= p.high:
            raise ConfigError(f"[{where}] {k} = {v!r}: choose a number in [{p.low}, {p.high}] ({p.doc})")
        out[k] = float(v)
    return robot, out


def load_sim_params(path: str | os.PathLike) -> dict:
    """The `[sim_params]` table of a TOML file (as written by `robolearn calibrate-sim`)."""
    data = read_toml(path, what="sim params file", example="`robolearn calibrate-sim --out FILE`")
    check_keys(data, ("sim_params", "fit"), str(path))
    if "sim_params" not in data:
        raise ConfigError(f"{path}: no [sim_params] table (write one with `robolearn calibrate-sim`)")
    check_sim_params(data["sim_params"], f"{path} sim_params")
    return data["sim_params"]


def save_sim_params(path: str | os.PathLike, robot: str, values: dict[str, float],
                    fit: dict | None = None) -> None:
    lines = ["# fitted by `robolearn calibrate-sim`; use with `robolearn train --sim-params FILE`",
             "[sim_params]", f'robot = "{robot}"']
    lines += [f"{k} = {float(v)!r}" for k, v in values.items()]
    if fit:
        lines += ["", "[fit]"]
        for k, v in fit.items():
            lines.append(f"{k} = {_toml(v)}")
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def _toml(v) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(float(v)) if isinstance(v, float) else str(v)


def apply_sim_params(env: gym.Env, params: dict) -> gym.Env:
    """Write fixed physical parameters (a `[sim_params]` table) into a sim env's model; a
    latency adds an `ActionLatency` wrapper (returned env)."""
    from robolearn.sim.latency import ActionLatency, require_sim
    from robolearn.sim.randomization import apply_model_values, nominal_model_values, set_const

    robot, values = check_sim_params(params)
    sim = require_sim(env, "sim_params")
    m = sim.model
    nom = nominal_model_values(m)
    v: dict[str, np.ndarray] = {}
    if robot == "arm":
        v["actuator_gain_scale"] = np.full(m.nu, values.get("servo_gain_scale", 1.0))
        v["joint_damping_scale"] = np.full(m.nv, values.get("damping_scale", 1.0))
        v["friction_scale"] = np.full(m.ngeom, values.get("friction_scale", 1.0))
        m.actuator_ctrlrange[:] = m.actuator_ctrlrange * values.get("max_speed_scale", 1.0)
        if "servo_rate_hz" in values:
            sim.set_servo_rate(values["servo_rate_hz"])
    else:
        gain = np.ones(m.nu)
        for name in ("motor_rl", "motor_rr"):
            gain[m.actuator(name).id] = values.get("motor_gain", 1.0)
        v["actuator_gain_scale"] = gain
        fr = np.ones(m.ngeom)
        for g in range(m.ngeom):
            nm = m.geom(g).name
            if nm.startswith("wheel_") or nm == "floor":
                fr[g] = values.get("tyre_friction_scale", 1.0)
        v["friction_scale"] = fr
    apply_model_values(m, nom, v)
    if robot == "car" and "steering_offset_rad" in values:
        # position servo: force = kp * (ctrl - q) + b0; b0 = kp * offset moves its rest angle
        for name in ("steer_fl", "steer_fr"):
            a = m.actuator(name).id
            m.actuator_biasprm[a, 0] = m.actuator_gainprm[a, 0] * values["steering_offset_rad"]
    set_const(m, sim.data)
    if values.get("latency_ms", 0.0) > 0:
        env = ActionLatency(env, ms=values["latency_ms"])
    return env


# -------------------------------------------------------------------------------- replay
@dataclass
class Recorded:
    """What replay needs from one recorded episode."""

    seed: int | None
    state: np.ndarray      # (N+1, D) measured state
    action: np.ndarray     # (N, A)


def load_recorded(path, max_episodes: int | None = None) -> tuple[str, float, list[Recorded]]:
    """(env_id, control_hz, episodes) of a dataset recorded with a `state` observation."""
    from robolearn.data.dataset import Dataset

    ds = Dataset(path)
    if "state" not in ds.observation_space.spaces:
        raise DatasetError(f"{path}: calibrate-sim needs the state observation (record with --obs state or both)")
    eps = []
    for ep in ds.episodes():
        if ep.steps < 2:
            continue
        eps.append(Recorded(seed=ep.meta.get("seed"), state=ep.observations(["state"])["state"],
                            action=np.asarray(ep.data["action"], np.float32)))
        if max_episodes and len(eps) >= max_episodes:
            break
    if not eps:
        raise DatasetError(f"{path}: no episode with at least 2 steps to fit")
    return ds.env_id, ds.control_hz, eps


def tracked(robot: str, state: np.ndarray) -> np.ndarray:
    """The measured quantities compared between sim and hardware (state layout of the tasks):
    arm: the 5 joint angles (rad); car: speed (m/s) and yaw rate (rad/s)."""
    state = np.asarray(state, np.float64)
    if robot == "arm":
        return state[..., :5]
    return np.stack([state[..., 0], state[..., 7]], axis=-1)


class Replayer:
    """Replays recorded episodes in a sim env built with given parameters."""

    def __init__(self, env_id: str, control_hz: float, episodes: list[Recorded], env_kwargs: dict | None = None):
        self.env_id, self.hz, self.episodes = env_id, float(control_hz), episodes
        self.robot = robot_of(env_id)
        self.env_kwargs = dict(env_kwargs or {})
        if self.robot == "arm" and "action_mode" not in self.env_kwargs:
            # the action size says how the recording drove the arm (4: ee_delta, 6: joint)
            dims = {e.action.shape[-1] for e in episodes}
            if dims - {4, 6} or len(dims) != 1:
                raise DatasetError(f"arm episodes with action sizes {sorted(dims)}: expected 4 "
                                   "(ee_delta) or 6 (joint)")
            self.env_kwargs["action_mode"] = "joint" if dims == {6} else "ee_delta"

    def _make(self, values: dict[str, float]):
        from robolearn.env import register_all

        register_all()
        env = gym.make(self.env_id, backend="sim", obs="state", control_hz=self.hz,
                       max_episode_steps=10 ** 6, **self.env_kwargs)
        try:
            return apply_sim_params(env, {"robot": self.robot, **values})
        except BaseException:
            env.close()
            raise

    def rollout(self, values: dict[str, float], ep: Recorded) -> np.ndarray:
        env = self._make(values)
        try:
            return self._rollout(env, ep)
        finally:
            env.close()

    def _rollout(self, env, ep: Recorded) -> np.ndarray:
        obs, _ = env.reset(seed=ep.seed)
        task = env.unwrapped.task
        s0 = ep.state[0]
        if self.robot == "arm":                  # start where the hardware started ...
            task.sim.set_state(np.asarray(s0[:5], float), float(s0[10]))
            # ... and command from there, as `start_episode` does on hardware: the commanded
            # pose starts at the measured one (a sagging arm's), not at the home pose the sim's
            # reset commands, which biased every later target by the sag (and the read noise)
            task.start_episode(np.random.default_rng(ep.seed))
        out = [tracked(self.robot, obs["state"] if self.robot == "car" else s0)]
        for a in ep.action:
            obs, *_ = env.step(a)
            out.append(tracked(self.robot, obs["state"]))
        return np.asarray(out)

    def error(self, values: dict[str, float]) -> float:
        """RMS trajectory error over all episodes (each tracked quantity in its own unit)."""
        env = self._make(values)
        try:
            sq, n = 0.0, 0
            for ep in self.episodes:
                sim = self._rollout(env, ep)
                real = tracked(self.robot, ep.state)
                sq += float(np.sum((sim - real) ** 2))
                n += real.size
            return math.sqrt(sq / n)
        finally:
            env.close()


@dataclass
class FitResult:
    robot: str
    values: dict[str, float]
    error_before: float
    error_after: float
    evaluations: int
    seconds: float


BUDGET_PER_PARAM = 150


def fit(replayer: Replayer, names=None, budget: int | None = None, seed: int = 0, popsize: int | None = None,
        log: Callable[[str], None] | None = None) -> FitResult:
    """CMA-ES over `names` (default `DEFAULT_FIT[robot]`), in coordinates normalised to each
    parameter's bounds, starting from the nominal sim; `budget` = max error evaluations
    (about: CMA-ES finishes its last generation; default `BUDGET_PER_PARAM` per parameter).
    One parameter: a grid, then scipy's bounded Brent search."""
    import cma

    robot = replayer.robot
    names = tuple(names or DEFAULT_FIT[robot])
    budget = budget if budget is not None else BUDGET_PER_PARAM * len(names)
    check_keys(dict.fromkeys(names), PARAMS[robot], f"parameters to fit for the {robot}")
    ps = [PARAMS[robot][n] for n in names]
    lo = np.array([p.low for p in ps])
    hi = np.array([p.high for p in ps])

    def decode(x):
        return {n: float(v) for n, v in zip(names, lo + np.clip(x, 0, 1) * (hi - lo))}

    t0 = time.monotonic()
    x0 = np.array([(p.nominal - p.low) / (p.high - p.low) for p in ps])
    before = replayer.error({})
    best = {"x": x0, "f": before, "evals": 1}

    def f(x):
        err = replayer.error(decode(np.atleast_1d(x)))
        best["evals"] += 1
        if err < best["f"]:
            best["x"], best["f"] = np.atleast_1d(x).copy(), err
        return err

    if len(names) == 1:
        # CMA-ES needs >= 2 dimensions. A grid first (the error is flat wherever a parameter
        # does not bind, e.g. a speed limit the recording never reached, which misleads a
        # line search), then scipy's bounded Brent search around the best grid point.
        from scipy.optimize import minimize_scalar

        n_grid = max(3, min(11, budget // 2))
        grid = np.linspace(0.0, 1.0, n_grid)
        errs = [f(x) for x in grid]
        i = int(np.argmin(errs))
        step = 1.0 / (n_grid - 1)
        minimize_scalar(f, bounds=(max(0.0, grid[i] - step), min(1.0, grid[i] + step)), method="bounded",
                        options={"maxiter": max(1, budget - n_grid - 1), "xatol": 1e-3})
        if log:
            log(f"  {best['evals']:4d} evals: best error {best['f']:.5f} at "
                + ", ".join(f"{k}={v:.4g}" for k, v in decode(best["x"]).items()))
    else:
        opts = {"bounds": [0.0, 1.0], "maxfevals": budget, "seed": seed + 1, "verbose": -9}
        if popsize:
            opts["popsize"] = popsize
        es = cma.CMAEvolutionStrategy(x0, 0.25, opts)
        while not es.stop():
            xs = es.ask()
            es.tell(xs, [f(x) for x in xs])
            if log:
                log(f"  {best['evals']:4d} evals: best error {best['f']:.5f} at "
                    + ", ".join(f"{k}={v:.4g}" for k, v in decode(best["x"]).items()))
    best_x, best_f, evals = best["x"], best["f"], best["evals"]
    return FitResult(robot, decode(best_x), before, best_f, evals, time.monotonic() - t0)


def fit_dataset(path, names=None, budget: int | None = None, seed: int = 0, max_episodes: int | None = None,
                env_kwargs: dict | None = None, log=None) -> FitResult:
    env_id, hz, eps = load_recorded(path, max_episodes)
    return fit(Replayer(env_id, hz, eps, env_kwargs), names=names, budget=budget, seed=seed, log=log)


def fit_summary(res: FitResult) -> dict:
    return {**dataclasses.asdict(res), "error_ratio": res.error_before / max(res.error_after, 1e-12)}


# ---------------------------------------------------------------------------- excitation
class ExcitationDevice:
    """Random piecewise-constant actions behind the teleop `Device` protocol, for recording
    system-identification episodes with `teleop.recorder.record`.

    Why not the task's scripted controller: it stops moving once the task is solved. A fit
    needs fast moves (that hit the servo speed limit), small ones and holds (whose onset
    shows the latency) and reversals, or speed and latency cannot be told apart. Each
    segment lasts 2..6 steps: a hold (zero action) or a random direction at full or half size.
    """

    name = "excitation"

    def __init__(self, env, seed: int = 0, hold_prob: float = 0.3, center=0.0, half_range=1.0):
        from robolearn.teleop.base import action_dim

        self.dim = action_dim(env)
        self.hold_prob = float(hold_prob)
        # actions = center + half_range * u: e.g. a car's throttle kept forward
        self.center = np.broadcast_to(np.asarray(center, float), (self.dim,)).copy()
        self.half_range = np.broadcast_to(np.asarray(half_range, float), (self.dim,)).copy()
        self._rng = np.random.default_rng(seed)
        self._a = np.zeros(self.dim)
        self._left = 0

    def reset(self) -> None:
        self._a = np.zeros(self.dim)
        self._left = 0

    def read(self, obs=None):
        from robolearn.teleop.base import DeviceCommand, clip_action

        if self._left <= 0:
            rng = self._rng
            self._left = int(rng.integers(2, 7))
            if rng.random() < self.hold_prob:
                self._a = np.zeros(self.dim)
            else:
                self._a = self.center + self.half_range * rng.uniform(-1, 1, self.dim) * rng.choice([0.5, 1.0])
        self._left -= 1
        return DeviceCommand(clip_action(self._a, self.dim), True, set())

    def help(self) -> str:
        return "excitation: random steps and holds for system identification"

    def close(self) -> None:
        pass
