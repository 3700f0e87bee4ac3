"""The single-process training loop: env + agent + replay at the agent's update-to-data ratio.

Why it looks like this:
- The agent (from `robolearn.policies.registry.make_agent`) owns the maths; this loop owns the
  order of events: act -> step -> store -> `utd` updates -> log / evaluate / checkpoint.
- One loop for every kind of training. What differs between plain training, reset-free
  training with forward/backward agents (robolearn/resets/learned.py) and autonomous practice
  (robolearn/resets/practice_trainer.py) is a `TrainerHooks` object: how an episode starts,
  which agent acts, what is stored with which reward, which other learners update, what an
  episode record and the summary add, what a checkpoint holds besides the main agent. So
  Ctrl-C, periodic checkpoints, resume, run-folder protection, dropped non-finite rewards,
  interventions and failed resets work the same for all of them (the way Stable-Baselines3
  keeps `OffPolicyAlgorithm` small with callbacks). The composition layer
  (robolearn/compose/training.py) picks the hooks and wraps the env; this module imports
  nothing above the policies.
- Checkpoints resume *exactly* (robolearn/policies/checkpoints.py). They are written at the
  first episode boundary after each `checkpoint_every` env steps, so a resumed run starts the
  same next episode the uninterrupted run would have started, and continues bit-identically.
- Interventions: when a step's `info["intervention"]` is True, the human's action
  (`info["intervention_action"]`) is what gets stored, flagged; with a prior buffer (RLPD) the
  step is also added to the prior data, as HIL-SERL does.
"""
from __future__ import annotations

import dataclasses
import math
import signal
import sys
import time
from pathlib import Path
from typing import Callable

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError, ResetError, TrainingError
from robolearn.jsonfile import write_json_atomic
from robolearn.policies import evaluation
from robolearn.policies.checkpoints import CHECKPOINTS, find_checkpoint, read_json_file
from robolearn.policies.device_sampling import batch_source
from robolearn.policies.env_building import make_env
from robolearn.policies.progress import Eta
from robolearn.policies.run_folder import MetricsLog, clear_earlier_run, config_dict
from robolearn.policies.train_config import TrainConfig, config_from_dict
from robolearn.policies.trainer_hooks import TrainerHooks, reset_record
from robolearn.policies.run_summary import finished_summary, interrupted_summary
from robolearn.policies.trainer_setup import build_run
from robolearn.policies.trainer_state import restore_trainer, save_trainer_checkpoint
from robolearn.run_lock import lock_folder



class Trainer:
    """One training run in one folder. `Trainer(cfg).run()`; build one for `cfg.resets` with
    `robolearn.compose.training.build_trainer` (which picks the hooks and wraps the env)."""

    def __init__(self, cfg: TrainConfig, hooks: TrainerHooks | None = None,
                 wrap_env: Callable[[gym.Env], gym.Env] | None = None,
                 _resumed_state: dict | None = None, relabel_prior=None):
        """`relabel_prior(transitions, path) -> rewards`: this run's reward model scoring earlier
        runs' data whose reward meant something else ([replay] prior_runs; built by
        robolearn.compose.training, since reward models live above this layer)."""
        self.cfg = cfg.validate()
        self.hooks = hooks or TrainerHooks()
        self._resumed_from = _resumed_state
        self._eval_env: gym.Env | None = None
        self.env = None
        try:
            self._build(cfg, wrap_env, _resumed_state, relabel_prior)
            self.hooks.setup(self, _resumed_state)
        except BaseException:
            self.close()
            raise

    def _build(self, cfg: TrainConfig, wrap_env, _resumed_state: dict | None,
               relabel_prior=None) -> None:
        build_run(self, cfg, wrap_env, _resumed_state, relabel_prior)

    # ------------------------------------------------------------------------ properties
    @property
    def updates(self) -> int:
        return int(self.agent.num_updates)

    @property
    def eval_env(self) -> gym.Env:
        if self._eval_env is None:
            c = self.cfg
            self._eval_env = make_env(c.env, c.obs, "rgb_array", c.max_episode_steps, self._eval_kwargs,
                                      c.reality_gap, c.sim_params)
        return self._eval_env

    def policy(self, obs: dict) -> np.ndarray:
        return self.agent.act(obs, deterministic=True)

    # ----------------------------------------------------------------------------- loop
    def run(self, stop_at: int | None = None) -> dict:
        """Train to `cfg.steps` env steps (or stop early at `stop_at`, e.g. for tests).
        Returns the summary (also written to summary.json when the run completes)."""
        cfg, hooks = self.cfg, self.hooks
        if getattr(self, "_lock", None) is None:  # one writer per run folder, for the whole run
            self._lock = lock_folder(self.dir, what="run folder",
                                     busy_hint="wait for that run to end, or choose another --out")
        if self.env_steps == 0 and self._resumed_from is None:
            clear_earlier_run(self.dir, cfg.overwrite)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            if not (self.dir / "config.json").exists():
                self._write_json("config.json", {"train": dataclasses.asdict(cfg),
                                                 "agent": config_dict(self.agent.config),
                                                 **hooks.config_record(self)})
            self._log_file = MetricsLog(self.dir, self.env_steps)
        except OSError as exc:
            self._close_logs()
            raise ConfigError(f"cannot write the run folder {self.dir} ({exc.strerror or exc}): "
                              "pick a writable --out") from None
        ac = self.agent.config
        utd, bs = int(ac.utd), int(ac.batch_size)
        learning_starts = int(getattr(ac, "learning_starts", 0))
        target = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
        t0 = time.perf_counter()
        bar = self._progress_bar()
        eta = Eta(target, learning_starts, start=self.env_steps)
        last_eta = 0.0
        if self._obs is None:
            self._obs, info0 = self.env.reset(seed=cfg.seed, options=hooks.first_reset_options(self) or None)
            self._last_reset = hooks.note_reset(self, reset_record(info0), None)
        ep_ret, ep_success = 0.0, False
        self.ep_len = 0
        upd_time, upd_count = 0.0, 0
        next_ckpt = (self.env_steps // cfg.checkpoint_every + 1) * cfg.checkpoint_every if cfg.checkpoint_every else None
        a_low, a_high = self.env.action_space.low, self.env.action_space.high
        batches = self._batch_source()
        on_device = batches is not self.sampler
        self._interrupted = None
        old_handlers = self._catch_stop_signals()
        try:
            while self.env_steps < target and self._interrupted is None:
                obs = self._obs
                if self.env_steps < learning_starts:
                    action = self.rng.uniform(a_low, a_high).astype(np.float32)
                else:
                    action = hooks.acting_agent(self).act(obs)
                nxt, reward, terminated, truncated, info = self.env.step(action)
                intervened = bool(info.get("intervention", False))
                if intervened:  # store what the human did, not what the policy proposed
                    if "intervention_action" not in info:
                        raise ConfigError("the env set info['intervention'] without "
                                          "info['intervention_action'] (the action actually applied)")
                    action = np.asarray(info["intervention_action"], dtype=np.float32)
                reward, terminated, truncated, success = hooks.store(
                    self, obs, action, reward, nxt, terminated, truncated, info, intervened)
                self.env_steps += 1
                ep_ret += reward
                self.ep_len += 1
                ep_success = ep_success or success
                self._obs = nxt

                if self.env_steps >= learning_starts:
                    if len(self.replay) >= 1:
                        t_u = time.perf_counter()
                        for _ in range(utd):
                            out = self._update(batches.sample(bs))
                            for k, v in out.items():  # running sums, checkpointed with the run
                                acc = self._loss_acc.setdefault(k, [0.0, 0])
                                acc[0] += float(v)
                                acc[1] += 1
                        if on_device:  # time the updates, not their launch (act() waits anyway)
                            batches.sync()
                        dt = time.perf_counter() - t_u
                        upd_time += dt
                        self.update_time += dt
                        upd_count += utd
                    hooks.update(self)

                if self.env_steps % cfg.log_every == 0:
                    ups = upd_count / upd_time if upd_time > 0 else 0.0
                    rec = {"kind": "train", "step": self.env_steps, "updates": self.updates,
                           "updates_per_s": ups, **{k: t / n for k, (t, n) in self._loss_acc.items()}}
                    self._log(rec)
                    bar.set_postfix(self._postfix(ups), refresh=False)
                    upd_time, upd_count, self._loss_acc = 0.0, 0, {}

                if cfg.eval_every and self.env_steps % cfg.eval_every == 0:
                    self._evaluate()
                    bar.set_postfix(self._postfix(None), refresh=False)

                if terminated or truncated:
                    rec = {"kind": "episode", "step": self.env_steps, "episode": self.episodes + 1,
                           "return": ep_ret, "length": self.ep_len, "success": ep_success,
                           "terminated": bool(terminated),
                           **({"reset": self._last_reset} if self._last_reset else {})}
                    options = hooks.end_episode(self, rec)
                    rec.pop("terminated")
                    if hooks.counts_as_episode(rec):
                        self.episodes += 1
                    else:
                        rec.pop("episode")
                    self._log(rec)
                    self._ep_info = (ep_ret, rec["success"])
                    ep_ret, ep_success = 0.0, False
                    self.ep_len = 0
                    if next_ckpt is not None and self.env_steps >= next_ckpt:
                        self.wall_before += time.perf_counter() - t0
                        t0 = time.perf_counter()
                        self.save_checkpoint()
                        next_ckpt = (self.env_steps // cfg.checkpoint_every + 1) * cfg.checkpoint_every
                    try:
                        self._obs, info0 = self.env.reset(options=options or None)
                    except ResetError as exc:  # robot held by the supervisor: keep what was learned
                        self.wall_before += time.perf_counter() - t0
                        self._stop_on_failed_reset(exc)
                    self._last_reset = hooks.note_reset(self, reset_record(info0), rec)
                eta.update(self.env_steps)
                if cfg.progress and time.perf_counter() - last_eta > Eta.REFRESH_S:
                    last_eta = time.perf_counter()
                    self._eta = eta.text()
                    bar.set_postfix(self._postfix(None), refresh=False)
                bar.update(1)
            if self._interrupted is not None:  # Ctrl-C / SIGTERM: keep what was learned
                bar.close()
                self.wall_before += time.perf_counter() - t0
                self.save_checkpoint()
                return self._finish_interrupted()
            if self.env_steps < cfg.steps:  # stopped early on request
                self.wall_before += time.perf_counter() - t0
                return {"env_steps": self.env_steps, "updates": self.updates}
            if self.last_eval is None or self.last_eval["step"] != self.env_steps:
                self._evaluate()
            self.wall_before += time.perf_counter() - t0
            self.save_checkpoint(final=True)
            return self._finish()
        finally:
            for signum, handler in old_handlers.items():
                signal.signal(signum, handler)
            bar.close()
            self._close_logs()

    def _batch_source(self):
        """The host sampler, or with `device_replay` a DeviceSampler mirroring the host buffers
        on the GPU (built once, after a resume loaded them, with the checkpoint's generators)."""
        if self.batches is None:
            self.batches = batch_source(self.agent, self.replay, self.prior, self.sampler, self.cfg.seed,
                                        self.cfg.device_replay)
            if self._batches_state is not None and self.batches is not self.sampler:
                self.batches.load_state(self._batches_state)
        return self.batches

    def add_transition(self, obs, action, reward, nxt, terminated, truncated, intervened: bool) -> bool:
        """Store one step in the replay (and, for an intervention with a prior buffer, in the
        prior data); a NaN reward (the reward model had no answer) is counted, never stored."""
        if not math.isfinite(reward):
            self.rejected_missing_reward += 1
            return False
        self.replay.add(obs, action, reward, nxt, bool(terminated), bool(truncated), intervention=intervened)
        if intervened and self.prior is not None:
            self.prior.add(obs, action, reward, nxt, bool(terminated), bool(truncated), intervention=True)
        return True

    def _catch_stop_signals(self) -> dict:
        """SIGINT/SIGTERM end the loop at the next env step (then a checkpoint and the summary
        are written); a second signal aborts at once. Only the main thread may install them."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum, frame):
            if self._interrupted is not None:
                raise KeyboardInterrupt
            self._interrupted = signal.Signals(signum).name
            print(f"\n{self._interrupted}: stopping at env step {self.env_steps}, saving a checkpoint "
                  "(send it again to abort without saving)", file=sys.stderr, flush=True)

        return {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def _stop_on_failed_reset(self, exc: Exception):
        """A physical reset failed for good (reset_on_failure='raise', or the operator quit at
        the prompt) at an episode boundary: write a checkpoint and summary.json, then raise
        with the reason and the command that continues the run."""
        self.save_checkpoint()
        summary = self._finish_interrupted()
        summary.update(signal=None, stopped="reset failed", message=str(exc))
        self._write_json("summary.json", summary)
        raise type(exc)(f"{exc}. Training stopped at env step {self.env_steps}; the checkpoint and "
                        f"metrics are saved in {self.dir}: put the scene right and continue with "
                        f"`robolearn train --resume {self.dir}`") from exc

    def _finish_interrupted(self) -> dict:
        return interrupted_summary(self)

    def _update(self, batch, agent=None) -> dict:
        agent = agent or self.agent
        try:
            out = agent.update(batch)
        except TrainingError as exc:
            raise TrainingError(f"at env step {self.env_steps} (update {self.updates}): {exc}. "
                                "Check rewards/observations for NaN/inf, or lower the learning "
                                f"rate; the last good checkpoint is in {self.dir / CHECKPOINTS}") from exc
        bad = {k: v for k, v in out.items() if not math.isfinite(float(v))}
        if bad:
            raise TrainingError(f"non-finite training metric(s) {bad} at env step {self.env_steps} "
                                f"(update {self.updates}); training stopped instead of training through it")
        return out

    # ------------------------------------------------------------------------ evaluation
    def _evaluate(self) -> dict:
        res = evaluation.evaluate(self.eval_env, self.policy, self.cfg.eval_episodes, seed=self.cfg.seed)
        rec = {"kind": "eval", "step": self.env_steps, "updates": self.updates, **res.as_dict()}
        self.last_eval = rec
        self._log(rec)
        return rec

    def _postfix(self, ups: float | None) -> dict:
        p = {"eta": getattr(self, "_eta", "?")}
        if self._ep_info:
            p["ret"] = f"{self._ep_info[0]:.1f}"
        if self.last_eval:
            p["eval_ret"] = f"{self.last_eval['return']:.1f}"
            p["success"] = f"{self.last_eval['success_rate']:.0%}"
        if ups is not None:
            self._last_ups = ups
        if getattr(self, "_last_ups", None):
            p["upd/s"] = f"{self._last_ups:.0f}"
        return p

    def _progress_bar(self):
        from tqdm import tqdm

        # tqdm's own remaining-time guess averages cheap random steps with learning steps; the
        # bar shows `eta` from `Eta` instead (per-phase cost, updates and evaluations included)
        return tqdm(total=self.cfg.steps, initial=self.env_steps, disable=not self.cfg.progress,
                    desc=f"{self.cfg.algo} {self.cfg.env}", unit="step", dynamic_ncols=True,
                    mininterval=1.0,
                    bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]")

    # --------------------------------------------------------------------------- logging
    def _close_logs(self):
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _log(self, rec: dict) -> None:
        self._log_file.write(rec)

    def _write_json(self, name: str, obj: dict) -> None:
        write_json_atomic(self.dir / name, obj, indent=2)

    # ------------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, final: bool = False) -> Path:
        """Write checkpoints/step_<N>/ then atomically point checkpoints/latest.json at it, so a
        kill at any moment leaves the previous checkpoint usable. Older ones are removed."""
        return save_trainer_checkpoint(self, final)

    @classmethod
    def resume(cls, run_dir: str | Path, steps: int | None = None, progress: bool | None = None,
               video: bool | None = None,
               build: Callable[[TrainConfig, dict], "Trainer"] | None = None) -> "Trainer":
        """Rebuild a run from its latest checkpoint; `steps` may extend the total budget.
        `build(cfg, state)` makes the trainer with its hooks (robolearn.compose.training does;
        default: a plain `Trainer`). The run folder is locked first: a run still training
        there refuses the resume (its checkpoints may change under us)."""
        lock = (lock_folder(run_dir, what="run folder",
                            busy_hint="wait for that run to end before resuming it")
                if Path(run_dir).is_dir() else None)
        try:
            self = cls._resume(run_dir, steps, progress, video, build, lock)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        return self

    @classmethod
    def _resume(cls, run_dir, steps, progress, video, build, lock) -> "Trainer":
        ckpt = find_checkpoint(run_dir)
        state = read_json_file(ckpt / "trainer.json")
        train = dict(state["train"])
        train["out"] = str(Path(run_dir))
        if steps is not None:
            train["steps"] = steps
        for key, value in (("progress", progress), ("video", video)):
            if value is not None:
                train[key] = value
        cfg = config_from_dict(train, source=f"checkpoint {ckpt}")
        if cfg.steps < state["env_steps"]:
            raise ConfigError(f"--steps {cfg.steps} is below the checkpoint's {state['env_steps']} env steps")
        state["_checkpoint"] = ckpt  # for hooks that load their own files (not saved again)
        self = build(cfg, state) if build is not None else cls(cfg, _resumed_state=state)
        self._lock = lock
        if self.hooks.kind != cfg.resets:
            self.close()
            raise ConfigError(f"checkpoint {ckpt} is of a resets={cfg.resets!r} run: resume it with "
                              "`robolearn train --resume`, which builds that kind of trainer")
        try:
            self._restore(ckpt, state)
        except BaseException:
            self.close()
            raise
        return self

    def _restore(self, ckpt: Path, state: dict) -> None:
        restore_trainer(self, ckpt, state)

    def _finish(self) -> dict:
        return finished_summary(self)

    def close(self):
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()
            self._lock = None
        for env in (self.env, self._eval_env):
            if env is not None:
                env.close()
        self._eval_env = None
