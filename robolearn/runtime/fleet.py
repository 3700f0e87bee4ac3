"""A sim actor that steps a Gymnasium vector of envs (`[cluster] envs_per_actor = N`).

Why: domain-randomised sim training wants many env streams; one process per env pays an
interpreter, a torch copy and a policy per env. Here one process runs a `SyncVectorEnv` of N
envs (sub-env j seeded `seed + j`, so each draws its own randomisation), acts for all N each
tick with one policy, and streams each sub-env's transitions as today: one `LearnerLink` per
sub-env (actor id `<id>.e<j>`), so the learner sees N ordinary actors, each a clean stream
(the replay's n-step chains never splice two sub-envs), in today's message format. Only link 0
loads weights (one spare-agent pair); the others ignore them. Same fixed-rate loop
(`FixedRateLoop`) and the same pause rules as `Actor` (hold still with no learner and no
weights unless `act_without_learner`).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path

import numpy as np

from robolearn.env import env_control_hz
from robolearn.jsonfile import write_json_atomic
from robolearn.runtime import messages as M
from robolearn.runtime.actor import LearnerLink, _make_agent, _make_env, hold_for_lost_learner
from robolearn.runtime.config import LaunchConfig
from robolearn.runtime.loop import FixedRateLoop

log = logging.getLogger("robolearn.runtime.fleet")


def make_vector_env(cfg: LaunchConfig, n: int):
    """N copies of the launch file's env in one `SyncVectorEnv`; the final observation of an
    episode comes back in the same step (SAME_STEP autoreset), as a transition needs it."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    return gym.vector.SyncVectorEnv([lambda: _make_env(cfg) for _ in range(n)],
                                    autoreset_mode=AutoresetMode.SAME_STEP)


class VectorActor:
    """N sim envs in one actor process; `run()` returns a summary dict like `Actor.run`."""

    def __init__(self, cfg: LaunchConfig, actor_id: str, data_endpoint: str,
                 weights_endpoint: str, n_envs: int, seed: int | None = None,
                 out_dir: Path | None = None, stop: threading.Event | None = None):
        from robolearn.runtime.transport import CurveClient

        self.cfg, self.acfg = cfg, cfg.actor
        self.actor_id = actor_id
        self.n = int(n_envs)
        self.seed = cfg.seed if seed is None else seed
        self.out_dir = Path(out_dir) if out_dir else None
        self.stop_event = stop or threading.Event()
        self.venv = make_vector_env(cfg, self.n)
        one = self.venv.envs[0]
        self.fingerprint = M.env_fingerprint(cfg.env, one.observation_space, one.action_space)
        self.action_space = one.action_space
        agents = [_make_agent(cfg, one, self.seed) for _ in range(2)]
        curve = CurveClient(Path(cfg.keys)) if cfg.keys else None
        self.links = [LearnerLink(self.acfg, data_endpoint, weights_endpoint, f"{actor_id}.e{j}",
                                  self.fingerprint, curve=curve,
                                  spare_agents=agents if j == 0 else [])
                      for j in range(self.n)]
        self.active = None
        self.rng = np.random.default_rng(self.seed)
        hz = self.acfg.loop_hz
        if hz is None:
            hz = env_control_hz(one, 0.0)
        self.loop = FixedRateLoop(float(hz), gc_in_slack=False)
        self.obs = None
        self.env_steps = 0
        self.swaps = 0
        self.paused_ticks = 0
        self.exit_reason = "running"
        self.ep_success = np.zeros(self.n, bool)
        self.episodes: list[dict] = []

    def _act(self, j: int, obs_j: dict) -> np.ndarray:
        if self.active is None:
            if self.acfg.random_until_weights:
                return self.rng.uniform(self.action_space.low, self.action_space.high).astype(np.float32)
            return np.zeros(self.action_space.shape, np.float32)
        return np.asarray(self.active.act(obs_j, deterministic=False), np.float32)

    def _before_tick(self):
        lead = self.links[0]
        try:
            new = lead.ready.get_nowait()
        except queue.Empty:
            new = None
        if new is not None:
            old, self.active = self.active, new
            self.swaps += 1
            if old is not None:
                lead.free.put(old)
        for link in self.links:
            if link.refused:
                self.exit_reason = f"refused: {link.refused}"
            elif link.error is not None:
                self.exit_reason = f"link failed: {link.error}"
            elif link.shutdown:
                self.exit_reason = "learner finished"
            else:
                continue
            self.stop_event.set()
        if self.acfg.max_steps and self.env_steps >= self.acfg.max_steps:
            self.exit_reason = "max_steps"
            self.stop_event.set()
        if self.stop_event.is_set():
            return "pause"
        return hold_for_lost_learner(self, lead)

    def tick(self):
        if self._before_tick() == "pause":
            if self.loop.unpaced:
                time.sleep(0.01)
            return None
        if self.obs is None:
            self.obs, _ = self.venv.reset(seed=[self.seed + j for j in range(self.n)])
            return "restart"
        t0 = time.monotonic()
        obs = self.obs
        per_env = [{k: v[j] for k, v in obs.items()} for j in range(self.n)]
        actions = np.stack([self._act(j, o) for j, o in enumerate(per_env)])
        nxt, reward, term, trunc, info = self.venv.step(actions)
        done = np.logical_or(term, trunc)
        final = info.get("final_obs") if done.any() else None
        success = np.asarray(info.get("success", np.zeros(self.n, bool)), bool)
        if done.any():  # SAME_STEP: a finished env's last-step info is in final_info
            final_success = np.asarray(info["final_info"].get("success", np.zeros(self.n, bool)), bool)
            success = np.where(done, final_success, success)
        for j in range(self.n):
            next_j = final[j] if final is not None and done[j] else {k: v[j] for k, v in nxt.items()}
            self.env_steps += 1
            self.ep_success[j] |= bool(success[j])
            self.links[j].submit({
                "obs": {k: np.array(v) for k, v in per_env[j].items()},
                "action": actions[j], "reward": float(reward[j]),
                "next_obs": {k: np.array(v) for k, v in next_j.items()},
                "terminated": bool(term[j]), "truncated": bool(trunc[j]),
                "intervention": False, "success": bool(success[j]), "step": self.env_steps})
            if done[j]:
                self.episodes.append({"env": j, "success": bool(self.ep_success[j])})
                self.ep_success[j] = False
        self.obs = nxt
        return time.monotonic() - t0

    def run(self) -> dict:
        import torch

        torch.set_num_threads(self.acfg.threads)
        for link in self.links:
            link.start()
        t0 = time.monotonic()
        failure = None
        try:
            self.loop.run(self.tick, stop=self.stop_event)
            if self.exit_reason == "running":
                self.exit_reason = "stopped"
        except BaseException as exc:  # noqa: BLE001 - the summary still says why
            failure = exc
            self.exit_reason = f"error: {type(exc).__name__}: {exc}"
            raise
        finally:
            deadline = time.monotonic() + 0.5
            while any(lk.outbox and lk.learner_alive for lk in self.links) and time.monotonic() < deadline:
                time.sleep(0.01)
            for link in self.links:
                link.stop()
            for link in self.links:
                link.join(timeout=2.0)
            self.venv.close()
            summary = self.summary(time.monotonic() - t0)
            if failure is not None:
                summary["error"] = f"{type(failure).__name__}: {failure}"
            if self.out_dir is not None:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                write_json_atomic(self.out_dir / f"actor_{self.actor_id}.json", summary, indent=1)
        return summary

    def summary(self, wall_s: float) -> dict:
        eps = self.episodes
        return {
            "actor_id": self.actor_id, "envs": self.n, "exit_reason": self.exit_reason,
            "env_steps": self.env_steps, "episodes": len(eps), "wall_s": round(wall_s, 3),
            "train_success_rate_last20": (float(np.mean([e["success"] for e in eps[-20:]]))
                                          if eps else None),
            "sent": sum(lk.sent for lk in self.links), "dropped": sum(lk.dropped for lk in self.links),
            "weights_received": self.links[0].weights_received, "weight_swaps": self.swaps,
            "paused_ticks": self.paused_ticks, "loop": self.loop.stats.summary(),
        }
