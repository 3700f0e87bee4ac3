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
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from robolearn.data.dataset import DatasetWriter
from robolearn.teleop.session import Pacer, Readout, env_context, fmt_vec


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
    attempt = 0
    observe = getattr(device, "observe", None)
    while len(res.saved) < episodes and not res.quit:
        ep_seed = seed + attempt
        attempt += 1
        obs, info = env.reset(seed=ep_seed)
        device.reset()
        with writer.start_episode(seed=ep_seed, device=device.name, reset_info=info, **ctx) as ep:
            ep.add_reset(obs, info)
            pacer.restart()
            label = None
            source = "env"
            outcome = "end"
            ret = 0.0
            while True:
                cmd = device.read(obs)
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
    return res
