"""System identification, fitting half: replay recorded hardware episodes in sim and fit the
parameters of robolearn/sim/sysid.py to them with CMA-ES (`robolearn calibrate-sim`).

Why here, above the sim: the fit reads datasets (robolearn/data), makes envs through Gymnasium
and drives them with an excitation device of the teleop interface, all layers above the
simulator; the parameters and `apply_sim_params` stay in the sim layer, where training reads them.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import numpy as np

from robolearn.configs import check_keys
from robolearn.errors import DatasetError
from robolearn.sim.sysid import DEFAULT_FIT, PARAMS, apply_sim_params, robot_of


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
        from robolearn.registry import register_all

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
