"""The recording loop: device -> env -> dataset, one crash-safe episode at a time.

Episode k uses reset seed `seed + k` (k counts every attempt, discarded ones too), stored in
its episode.json, so a sim episode can be replayed open-loop from the dataset alone.
Actions are cast to float32 *before* they reach the env, so the stored actions are exactly the
ones applied and replays reproduce the recorded states bit for bit.

Human labels: a "mark" event (key g) labels the frame it leads to "success now" (stored per
step as `success_mark`, read by reward-classifier training); a "success"/"failure" event ends the episode with that label; "discard" drops
it and starts the attempt again; "quit" drops the unfinished episode and stops. Otherwise an
episode ends when the env terminates or truncates (or after `max_steps`) and takes the env's
success verdict.

The episode clock starts when the operator is ready: with a human device nothing is stepped
(and no time-limit step passes) until the first control input (a key, a stick moved, a
takeover, a label); a device with `wait_for_operator = False` (the scripted one) starts at once.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from robolearn.errors import DeviceError
from robolearn.data.dataset_writer import DatasetWriter
from robolearn.teleop.session import Pacer, Readout, env_context, fmt_vec


def _wait_for_operator(device, obs, pacer, readout, n: int, episodes: int):
    """Read the device (without stepping the env) until the operator acts; return that first
    command, which is then applied as the episode's first step. None: the device does not wait."""
    if not getattr(device, "wait_for_operator", True):
        return None
    idle = None
    pacer.restart()
    while True:
        cmd = device.read(obs)
        action = np.asarray(cmd.action, dtype=np.float32)
        if idle is None:
            idle = action  # what the device sends untouched (e.g. an absolute gripper at "open")
        if cmd.engaged or cmd.events or not np.array_equal(action, idle):
            return cmd
        readout.update(f"episode {n}/{episodes}: ready - the episode starts with your first input")
        if pacer.hz > 0:
            pacer.wait()
        else:
            time.sleep(0.01)  # unpaced recording: still no busy loop while waiting for a human


class HumanLabelsOnly:
    """Reward source for recording on a robot that has no reward model yet (ArmLift/ArmPush on
    `backend="real"`, where only a camera model could judge success): no verdict at all.

    Why not the device's labels as the reward: a "success now" mark would then end the
    episode at its first marked frame (the env ends episodes on success), leaving one barely
    lifted positive frame per episode for the classifier these recordings exist to train. So
    the reward is MISSING (NaN: no model ran, never a made-up 0) and success stays False; the
    human's labels are what the recorder stores anyway: `success_mark` per frame (key g, a
    button) and the episode's outcome (Enter / x). `load_demos` refuses such episodes as RL
    prior data until a reward model has labelled them."""

    def reset(self) -> None:
        pass

    def __call__(self, obs: dict, info: dict) -> tuple[float, bool]:
        from robolearn.rewards.base import MISSING

        return MISSING, False


def needs_human_labels(env_id: str, env_kwargs: dict) -> bool:
    """A robot env that can only be built with a reward source, and none was given."""
    import gymnasium as gym

    from robolearn.registry import register_all, resolve_env_id

    if env_kwargs.get("backend") != "real" or env_kwargs.get("reward_source") is not None:
        return False
    register_all()
    try:
        task = gym.spec(resolve_env_id(env_id)).kwargs.get("task")
    except gym.error.Error:
        return False
    from robolearn.tasks.arm import CUBE_TASKS

    return task in CUBE_TASKS


@dataclass
class RecordResult:
    saved: list[int] = field(default_factory=list)      # episode indices written
    successes: int = 0
    discarded: int = 0
    steps: int = 0
    quit: bool = False


def record(env, device, writer: DatasetWriter, episodes: int, seed: int = 0, max_steps: int | None = None,
           rate_hz: float = 0.0, end_on_success: bool = False, readout: Readout | None = None) -> RecordResult:
    readout = readout or Readout()
    pacer = Pacer(rate_hz)
    ctx = env_context(env)
    res = RecordResult()
    observe = getattr(device, "observe", None)
    try:
        _record_loop(env, device, writer, episodes, seed, max_steps, end_on_success, readout, pacer,
                     ctx, res, observe)
    except DeviceError as exc:  # a lost device or robot: say what the dataset kept
        msg = (f"{exc}; the episode in progress was discarded, {len(res.saved)} episode(s) of this "
               f"session were kept ({writer.num_episodes} in {writer.root})")
        try:
            err = type(exc)(msg)
        except TypeError:
            err = DeviceError(msg)
        raise err from None
    return res


def _record_loop(env, device, writer, episodes, seed, max_steps, end_on_success, readout, pacer,
                 ctx, res, observe) -> None:
    attempt = 0
    while len(res.saved) < episodes and not res.quit:
        ep_seed = seed + attempt
        attempt += 1
        obs, info = env.reset(seed=ep_seed)
        device.reset()
        first = _wait_for_operator(device, obs, pacer, readout, len(res.saved) + 1, episodes)
        if first is not None and "quit" in first.events:
            res.quit = True
            readout.line("quit before the episode started")
            break
        with writer.start_episode(seed=ep_seed, device=device.name, reset_info=info, **ctx) as ep:
            ep.add_reset(obs, info)
            pacer.restart()
            label = None
            source = "env"
            outcome = "end"
            ret = 0.0
            while True:
                cmd, first = (first, None) if first is not None else (device.read(obs), None)
                ev = cmd.events
                if "quit" in ev:
                    res.quit, outcome = True, "quit"
                    readout.line(f"quit: episode in progress ({ep.steps} steps) discarded")
                    break                       # the context manager discards the episode
                if "discard" in ev:
                    res.discarded += 1
                    outcome = "discard"
                    readout.line(f"discarded attempt (seed {ep_seed}, {ep.steps} steps)")
                    break
                if ep.steps and ev & {"success", "failure"}:
                    label, source = "success" in ev, device.name
                    break
                action = np.asarray(cmd.action, dtype=np.float32)
                obs, reward, terminated, truncated, info = env.step(action)
                ret += float(reward)
                # a demonstration has no policy to intervene on: the flag comes only from an
                # InterventionWrapper inside `env` (info["intervention"])
                if "mark" in ev:  # the human's per-frame "success now" (key g)
                    info = {**info, "success_mark": True}
                ep.add_step(action, obs, reward, terminated, truncated, info, device=device.name)
                if observe is not None:
                    observe(info)
                readout.update(
                    f"episode {len(res.saved) + 1}/{episodes} step {ep.steps}"
                    f"{'/' + str(max_steps) if max_steps else ''} | action {fmt_vec(action)} | "
                    f"return {ret:+.2f} | success {'yes' if info.get('success') else 'no '} | "
                    f"{pacer.measured_hz:5.1f} Hz")
                if end_on_success and info.get("success"):
                    label = True
                    break
                if terminated or truncated or (max_steps and ep.steps >= max_steps):
                    break
                pacer.wait()
            if outcome in ("quit", "discard"):
                continue
            idx = ep.finish(success=label, label_source=source)
            res.saved.append(idx)
            res.steps += ep.steps
            ok = writer.meta["episodes"][-1]["success"]
            res.successes += int(ok)
            readout.line(f"saved episode {idx}: {ep.steps} steps, return {ret:+.2f}, "
                         f"{'success' if ok else 'failure'} (seed {ep_seed})")


def close_recording(dev, writer, env) -> None:
    """Close what a recording on the robot opened, device first (it may still be driving), the
    dataset next (its metadata is what makes the episodes loadable), the robot last."""
    if dev is not None:
        dev.close()
    if writer is not None:
        writer.close()
    env.close()
