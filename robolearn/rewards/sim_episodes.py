"""Labelled sim episodes for training and validating reward models against ground truth.

Kinds (all run to the env's time limit, ignoring termination, so a success is followed by
frames that hold it: success *states* are what a classifier must recognise, as SERL's "hold
the success pose while recording positives"):
- `scripted`: the task's scripted controller (successes);
- `random`: uniform random actions (failures, the cube mostly untouched);
- `no_grasp`: scripted with the gripper held open (arm goes through the motions, cube stays);
- `low_lift`: scripted, but the grasp point never rises above 2.5 cm over the grasp height,
  so the cube is held up by less than the 5 cm success height (hard negatives);
- `hover`: the arm moves between random points 5-14 cm above the table within 10 cm of the
  cube, gripper open or closed, never grasping (hard negatives: from the front camera a gripper
  in front of the cube at lift height hides it and looks like a lift; rlpd found that pose
  within a few thousand steps when such frames were missing, docs/bench/rewards/rl.md);
- `policy`: a trained policy checkpoint (`policy=` callable obs -> action).
Per frame the sim's ground truth is recorded: `success`, `progress` (push: 1 - cube-goal
distance / initial distance; lift: cube height / lift height; reach: 1 - distance / initial)
and `task_progress`, the task's own dense-reward potential normalised the same way (push:
1 - phi / phi_0 with phi = cube-goal distance + 0.5 grasp point-cube distance, the quantity
ArmPush's reward is -10 x; reach: as `progress`; lift, whose reward is sparse: as `progress`).
Why both for push: the cube-goal distance does not move while the arm approaches the cube, so
`progress` calls the first third of a push "no progress" (all ties), whereas the task's own
reward, which RL optimises, counts the approach.
"""
from __future__ import annotations

from typing import Callable, Iterator

import gymnasium as gym
import numpy as np

from robolearn.env import env_control_hz
from robolearn.errors import ConfigError

KINDS = ("scripted", "random", "no_grasp", "low_lift", "hover", "policy")
HOVER_STEPS = 25          # control steps per hover waypoint


def true_progress(env) -> float:
    """Ground-truth task progress in [0, 1] from the sim (validation only, never in a learner)."""
    task = env.unwrapped.task
    name = getattr(task, "name", "")
    if name == "lift":
        from robolearn.sim.arm_workspace import CUBE_HALF, LIFT_HEIGHT

        return float(np.clip((task.cube_pose()[0][2] - CUBE_HALF) / LIFT_HEIGHT, 0.0, 1.0))
    if name == "push":
        pos = task.cube_pose()[0]
        return float(np.linalg.norm(pos[:2] - task.goal[:2]))  # turned into 1 - d/d0 by the caller
    if name == "reach":
        return float(np.linalg.norm(task.goal - task.ee_pos))
    raise ConfigError(f"no ground-truth progress for task {name!r}")


def task_potential(env) -> float | None:
    """The distance the task's dense reward is -10 x (push, reach); None for a sparse task."""
    task = env.unwrapped.task
    name = getattr(task, "name", "")
    if name == "push":
        pos = task.cube_pose()[0]
        return float(np.linalg.norm(pos[:2] - task.goal[:2]) + 0.5 * np.linalg.norm(pos - task.ee_pos))
    if name == "reach":
        return float(np.linalg.norm(task.goal - task.ee_pos))
    return None


def _distance_based(env) -> bool:
    return getattr(env.unwrapped.task, "name", "") in ("push", "reach")


def run_episode(env, kind: str, seed: int, policy: Callable | None = None,
                steps: int | None = None) -> dict:
    """One episode of `kind`: frames (obs per step, N+1), actions, per-frame truth."""
    if kind not in KINDS:
        raise ConfigError(f"episode kind {kind!r}: choose one of {', '.join(KINDS)}")
    if kind == "policy" and policy is None:
        raise ConfigError("kind='policy' needs a policy (a checkpoint: --policy RUN_DIR)")
    base = env.unwrapped
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    ctrl = None
    if kind in ("scripted", "no_grasp", "low_lift", "hover"):
        ctrl = base.scripted_controller()
        ctrl.reset()
    steps = steps or (env.spec.max_episode_steps if env.spec and env.spec.max_episode_steps else 100)
    raw, pot = true_progress(env), task_potential(env)
    d0, p0 = max(raw, 1e-6), max(pot or 0.0, 1e-6)
    prog = [1.0 - raw / d0 if _distance_based(env) else raw]
    out = {"obs": [obs], "action": [], "success": [False], "progress": prog,
           "task_progress": [prog[0] if pot is None else 1.0 - pot / p0]}
    for t in range(steps):
        if kind == "random":
            a = rng.uniform(-1, 1, env.action_space.shape)
        elif kind == "hover":
            if t % HOVER_STEPS == 0:
                cube = base.task.cube_pose()[0]
                waypoint = np.array([cube[0] + rng.uniform(-0.1, 0.1), cube[1] + rng.uniform(-0.1, 0.1),
                                     rng.uniform(0.05, 0.14)])
                grip = float(rng.choice([-1.0, 1.0]))
            a = ctrl.toward(waypoint, grip)
        elif kind == "policy":
            a = policy(obs)
        else:
            a = np.asarray(ctrl.act(obs), np.float64)
            if kind == "no_grasp":
                a[-1] = 1.0
            elif kind == "low_lift" and getattr(ctrl, "phase", "") == "lift":
                from robolearn.sim.arm_workspace import EE_STEP

                cap = 0.02 + 0.025  # grasp height + 2.5 cm
                room = (cap - base.task.ee_cmd[2]) / EE_STEP
                a[2] = min(a[2], room)
        a = np.clip(np.asarray(a, np.float32), -1, 1)
        obs, r, term, trunc, info = base.step(a)  # past termination on purpose (see module doc)
        raw, pot = true_progress(env), task_potential(env)
        out["obs"].append(obs)
        out["action"].append(a)
        out["success"].append(bool(info["success"]))
        out["progress"].append(1.0 - raw / d0 if _distance_based(env) else raw)
        out["task_progress"].append(out["progress"][-1] if pot is None else 1.0 - pot / p0)
    out["success"] = np.asarray(out["success"])
    for k in ("progress", "task_progress"):
        out[k] = np.clip(np.asarray(out[k], np.float64), -1.0, 1.0)
    return out


def record_dataset(env_id: str, out: str, plan: list[tuple[str, int]], seed: int = 0,
                   env_kwargs: dict | None = None, log: Callable[[str], None] = print,
                   reality_gap: dict | None = None) -> str:
    """Write a dataset (robolearn.data.dataset format) of episodes given as (kind, count);
    per-step `success` is the sim's ground truth, so `labels.frame_labels` reads it as a
    recorded human/env label would be read. `reality_gap`: a [reality_gap] table
    (robolearn.sim.randomization), e.g. camera pose and light per episode, so a model trained
    on the frames survives a real camera (`CAMERA_RANDOMIZATION`)."""
    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.policies.env_building import make_env

    env = make_env(env_id, "both", env_kwargs=env_kwargs or {}, reality_gap=reality_gap or {})
    try:
        hz = env_control_hz(env, 10.0)
        with DatasetWriter(out, env_id=env_id, control_hz=hz, observation_space=env.observation_space,
                           action_space=env.action_space, obs_mode="both") as w:
            k = 0
            for kind, count in plan:
                for _ in range(count):
                    s = seed + k
                    k += 1
                    ep = run_episode(env, kind, s)
                    with w.start_episode(seed=s, device=kind, extra={"kind": kind}) as e:
                        e.add_reset(ep["obs"][0], {})
                        for t, a in enumerate(ep["action"]):
                            e.add_step(a, ep["obs"][t + 1], float(ep["success"][t + 1]), False, False,
                                       {"success": bool(ep["success"][t + 1])}, device=kind)
                        e.finish(success=bool(ep["success"].any()), label_source="env")
                    log(f"{kind} episode seed {s}: {int(ep['success'].sum())} success frames")
    finally:
        env.close()
    return out


def fresh_episodes(env, plan: list[tuple[str, int]], seed: int, policy: Callable | None = None) -> Iterator[tuple[str, dict]]:
    k = 0
    for kind, count in plan:
        for _ in range(count):
            yield kind, run_episode(env, kind, seed + k, policy=policy)
            k += 1


def check_env(env: gym.Env) -> None:
    if getattr(env.unwrapped, "sim", None) is None:
        raise ConfigError("reward validation needs a sim env (ground truth); backend='real' has none")
