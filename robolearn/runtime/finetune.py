"""The on-robot fine-tuning session: what the learner and the report add to an async run.

A session is an ordinary learner + actor run (`robolearn launch`) with four differences, all
driven by the `[finetune]` table of the launch file:
- the learner starts from a sim-pretrained checkpoint (`load = "agent"`: actor, critics and
  temperature; `"policy"`: the actor and its temperature (unless `[learner.agent]
  init_temperature` is set); `"none"`: the same networks and options with fresh
  weights, i.e. training from scratch on the robot, the baseline) and never opens the robot: its env is the *sim
  twin* (same observation and action spaces, by the env contract) built from
  `sim_env_kwargs`, used for spaces and for sim prior data only;
- the warm start: `wsrl` (WSRL: the first `warmup_episodes` episodes are pretrained-policy
  rollouts that seed the replay before any update, no offline data kept) or `rlpd` (prior
  data kept and sampled 50/50 with online data, updates from the first step);
- the actor acts with the pretrained weights from its first step (never randomly on a robot)
  and records every episode (`data/recording.py`);
- the learner re-publishes its weights while it is not updating (warm-up, a restart) so an
  actor that (re)connects gets them within a second.
Evaluation happens on the robot, not in the learner: episodes of the pretrained policy before
the session and of the fine-tuned one after it (`evaluate_on_robot`), with the policy's mean
action, or sampled actions with `[finetune] eval_actions = "sampled"` (both evaluations alike).
The calibration steps on the robot are in `finetune_calibration.py`, the session report in
`finetune_report.py`.
"""
from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import numpy as np

from robolearn.env import env_control_hz
from robolearn.errors import CameraError, ConfigError, DatasetError

log = logging.getLogger("robolearn.runtime.finetune")

REPUBLISH_S = 1.0
OUTAGE_POLL_S = 0.05   # an evaluation waiting for a camera looks at it this often
#: warm_start = "rlpd": the prior buffer's share of every batch (sim rollouts, robot demos,
#: interventions), RLPD's symmetric sampling; `[replay] prior_runs` (e.g. the pretraining run's
#: replay) then take 0.25 more from the online half (policies/replay_setup.py, `batch_shares`)
SESSION_PRIOR_FRACTION = 0.5


#: `robot_minutes`: the final evaluation is expected to take this much longer per episode than
#: the zero-shot one did, unless `[finetune] final_time_margin` says otherwise (a learning policy's
#: episodes run longer; resets vary: push sessions 13-15 measured 1.01, 1.01 and 1.37, and 1.25
#: overran a 29-minute budget by 0.6 min; lift sessions 25-30 0.61-0.89, their zero-shot policy
#: pushing the cube about and its resets taking longer), and this long per episode when there was
#: no zero-shot evaluation to time
FINAL_EVAL_MARGIN = 1.4
FINAL_EVAL_S_PER_EPISODE = 30.0


class RobotBudget:
    """`[finetune] robot_minutes`: the session's whole robot time, kept by ending training early.

    Why: on a robot the scarce thing is robot time, not env steps. Calibration, resets and the
    evaluations take what they take (push: ~14 of ~24 minutes); a fixed step count either wastes
    the budget or overruns it. The session counts wall time from its first robot motion (the
    robot is occupied all along, idle or not) and stops training once what is used plus the final
    evaluation's expected time (the zero-shot evaluation's time per episode x the margin)
    reach the budget."""

    def __init__(self, minutes: float, final_episodes: int, t0: float | None = None,
                 margin: float = FINAL_EVAL_MARGIN):
        self.budget_s = 60.0 * float(minutes)
        self.final_episodes = int(final_episodes)
        self.margin = float(margin)
        self.t0 = time.monotonic() if t0 is None else t0
        self.s_per_episode = FINAL_EVAL_S_PER_EPISODE

    def timed_evaluation(self, evaluation: dict) -> None:
        """The zero-shot evaluation's wall time per episode (resets included) sets the reserve."""
        if evaluation.get("episodes") and evaluation.get("wall_s"):
            self.s_per_episode = float(evaluation["wall_s"]) / evaluation["episodes"]

    @property
    def final_reserve_s(self) -> float:
        return self.final_episodes * self.s_per_episode * self.margin

    def used_s(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self.t0

    def training_over(self, now: float | None = None) -> bool:
        return self.budget_s > 0 and self.used_s(now) + self.final_reserve_s >= self.budget_s

    def as_dict(self, now: float | None = None) -> dict:
        return {"robot_minutes": round(self.budget_s / 60.0, 2),
                "final_reserve_s": round(self.final_reserve_s, 1), "final_time_margin": self.margin,
                "used_s": round(self.used_s(now), 1)}


def pretrained_state(checkpoint: str | Path) -> tuple[Path, dict]:
    """(checkpoint folder, its trainer.json) of a sim-pretrained run."""
    from robolearn.policies.checkpoints import find_checkpoint

    if not checkpoint:
        raise ConfigError("finetune.checkpoint is empty: set it to the run folder of the "
                          "sim-pretrained policy (robolearn train ... --out RUN)")
    if not Path(checkpoint).exists():
        raise DatasetError(f"finetune.checkpoint {checkpoint} not found: train in sim first "
                           "(robolearn train ... --out RUN) and point at RUN")
    ckpt = find_checkpoint(checkpoint)
    try:
        state = json.loads((ckpt / "trainer.json").read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"checkpoint {ckpt} is incomplete or corrupt: {exc}") from None
    return ckpt, state


#: AgentConfig fields that decide the networks' shapes: taken from the pretrained run itself,
#: so a checkpoint stays loadable after a preset's defaults change
NETWORK_OPTIONS = ("actor_hidden", "critic_hidden", "num_critics", "critic_layer_norm", "critic_dropout",
                   "critic_batch_renorm", "target_network", "pixels", "feature_dim", "encoder_filters",
                   "encoder_layers", "normalize_obs", "actor", "flow_steps", "flow_variant")


def pretrained_network_options(checkpoint: str | Path) -> dict:
    """The network-shape options the pretrained run resolved (its config.json), {} if absent."""
    import ast

    path = Path(checkpoint) / "config.json"
    try:
        agent = json.loads(path.read_text()).get("agent", {})
    except (OSError, ValueError):
        return {}
    out = {}
    for k in NETWORK_OPTIONS:
        if k in agent:
            v = agent[k]
            out[k] = ast.literal_eval(v) if isinstance(v, str) and v.startswith("(") else v
    return out


def resolve_agent(cfg) -> None:
    """Take algo and agent options from the pretrained run (the networks must match), with the
    launch file's [learner.agent] on top (e.g. utd). A different algo is an error."""
    _, state = pretrained_state(cfg.finetune.checkpoint)
    train = state.get("train", {})
    algo = train.get("algo") or state.get("launch", {}).get("algo")
    if algo and cfg.algo != algo:
        raise ConfigError(f"launch file says algo = {cfg.algo!r} but {cfg.finetune.checkpoint} was "
                          f"trained with {algo!r}; the networks must match: set algo = {algo!r}")
    pre = pretrained_network_options(cfg.finetune.checkpoint)
    pre.update(state.get("agent_overrides", {}))
    pre.update(cfg.learner.agent)
    cfg.learner.agent = pre
    pre_obs = train.get("obs")
    if pre_obs and pre_obs != cfg.obs:
        raise ConfigError(f"launch file says obs = {cfg.obs!r} but the pretrained policy reads "
                          f"{pre_obs!r}; use the same observation mode")


def make_sim_twin(cfg):
    """The learner's env: the sim version of the robot's task (spaces, prior data; no robot),
    with `[finetune] sim_params` (a calibrate-sim fit) when set, so its prior data moves like the robot."""
    from robolearn.policies.env_building import make_env

    return make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, cfg.finetune.sim_env_kwargs, {},
                    cfg.finetune.sim_params or None)


def load_pretrained(agent, checkpoint: str | Path, load: str, keep_temperature: bool = True) -> float | None:
    """Initialise `agent` from the pretrained checkpoint; counters start at zero. Returns the
    temperature it carried over (None: none).

    `load = "policy"` also carries the pretrained temperature unless `keep_temperature` is False
    (`init_temperature` is among the resolved agent options: the launch file's or the pretrained
    run's own): the actor's spread was tuned at it, and the preset's 0.1 beside a loaded actor
    from a run that ended at 0.004-0.008 widens the sampled actions from the first update (the
    car's practice stalled until its launch file set 0.01)."""
    from safetensors.torch import load_file

    from robolearn.policies.serialize import load_state

    ckpt, _ = pretrained_state(checkpoint)
    if load == "none":  # from scratch: only the options (networks, preset) came from the checkpoint
        return None
    if load == "agent":
        d = load_state(ckpt / "agent.safetensors")
        agent.load_state_dict(d)
        agent.num_updates = 0  # the session's own UTD pacing starts here
        return agent.alpha
    agent.load_policy_state(load_file(str(ckpt / "policy.safetensors")))
    if not keep_temperature:
        return None
    log_alpha = load_state(ckpt / "agent.safetensors").get("log_alpha")
    if log_alpha is None:
        raise ConfigError(f"{ckpt / 'agent.safetensors'} holds no temperature (log_alpha): set "
                          "[learner.agent] init_temperature in the launch file")
    import torch
    with torch.no_grad():
        agent.log_alpha.copy_(torch.as_tensor(log_alpha))
    return agent.alpha


def resume_session(learner) -> bool:
    """Load the session's own last checkpoint (agent, replay, env-step count) if there is one."""
    from robolearn.policies.serialize import load_state
    from robolearn.policies.checkpoints import CHECKPOINTS, LATEST, find_checkpoint

    root = learner.dir / CHECKPOINTS
    if not (root / LATEST).is_file():
        return False
    ckpt = find_checkpoint(root)
    state = json.loads((ckpt / "trainer.json").read_text())
    learner.agent.load_state_dict(load_state(ckpt / "agent.safetensors"))
    if (ckpt / "replay").is_dir():
        learner.replay.load(ckpt / "replay")
    learner.env_steps = int(state.get("env_steps", 0))
    log.info("resumed the session from %s (env step %d, %d updates)", ckpt, learner.env_steps,
             learner.agent.num_updates)
    return True


def episode_steps(env) -> int:
    spec = getattr(env, "spec", None)
    n = getattr(spec, "max_episode_steps", None) if spec is not None else None
    if not n:
        raise ConfigError("finetune.warm_start = \"wsrl\" counts warm-up in episodes but the env "
                          "declares no max_episode_steps; set max_episode_steps in the launch file")
    return int(n)


def prepare_learner(learner) -> dict:
    """Pretrained weights + warm start on a freshly built `Learner`. Returns what it did."""
    from robolearn.policies.replay_setup import add_prior

    cfg, ft = learner.cfg, learner.cfg.finetune
    done = {"warm_start": ft.warm_start, "load": ft.load, "checkpoint": str(ft.checkpoint)}
    if resume_session(learner):  # a restarted learner continues the session, not the pretraining
        done["resumed_at_env_step"] = learner.env_steps
    else:
        temperature = load_pretrained(learner.agent, ft.checkpoint, ft.load,
                                      keep_temperature="init_temperature" not in cfg.learner.agent)
        if temperature is not None:
            done["temperature"] = round(temperature, 6)
    if ft.warm_start == "wsrl":
        learner.learning_starts = ft.warmup_episodes * episode_steps(learner.env)
        if "resumed_at_env_step" in done:  # UTD pacing continues from the resumed counts
            learner.learning_starts = min(learner.learning_starts, learner.env_steps)
        done["warmup_steps"] = learner.learning_starts
    elif ft.warm_start == "rlpd":
        prior = load_prior(ft.prior_data, learner)
        demos = load_robot_demos(learner) if ft.robot_demos else None
        n_demos = len(demos["action"]) if demos is not None else 0
        learner.prior, learner.sampler = add_prior(
            learner.replay, learner.env.observation_space, learner.env.action_space, learner.agent.config,
            prior, len(prior["action"]) + n_demos + learner.replay.capacity, cfg.seed + 1,
            prior_fraction=SESSION_PRIOR_FRACTION,
            earlier=learner.earlier, earlier_fraction=learner.earlier_fraction)
        from robolearn.data.replay import transitions_to_buffer

        if demos is not None:
            transitions_to_buffer(demos, learner.prior)
            done["robot_demo_transitions"] = int(n_demos)
        if "resumed_at_env_step" in done:  # the prior buffer is not checkpointed: the operator's
            # interventions so far are in the resumed replay, flagged; they join the prior again
            done["resumed_interventions"] = _interventions_to_prior(
                learner.replay, learner.prior, ft.prior_takeovers, learner.takeover_prior.grace_steps,
                learner.takeover_prior.climb)
        learner.learning_starts = 0
        done["prior_transitions"] = int(len(prior["action"])) + n_demos
        done["prior_data"] = ft.prior_data
        if learner.earlier is not None:   # [replay] prior_runs: e.g. the pretraining run's replay
            done["earlier_transitions"] = len(learner.earlier)
            done["earlier_fraction"] = learner.earlier_fraction
    else:
        learner.learning_starts = 0
    learner.republish_s = REPUBLISH_S
    return done


def load_prior(spec: str, learner) -> dict:
    """`sim:N`: N episodes of the pretrained policy in the sim twin; else as `--demos`."""
    from robolearn.policies.demos import collect_rollouts, episode_count, load_demos

    if spec.startswith("sim:"):
        n = episode_count(spec, "finetune.prior_data")
        agent = learner.agent
        return collect_rollouts(learner.env, lambda obs: agent.act(obs, deterministic=False), n,
                                seed=learner.cfg.seed)
    return load_demos(spec, learner.env, seed=learner.cfg.seed)


def _interventions_to_prior(replay, prior, takeovers: str = "all", grace_steps: int = 20,
                            climb: tuple[int, int] | None = None) -> int:
    """Copy the flagged intervention transitions of `replay` into `prior` (with `takeovers` =
    "successful", only those of takeovers that ended in a success; with `climb`, not their climbs:
    runtime/takeover_prior.py); returns how many."""
    from robolearn.data.replay import transitions_to_buffer
    from robolearn.runtime.takeover_prior import climb_mask, successful_takeover_mask

    t = replay.transitions()
    keep = np.asarray(t["intervention"], bool)
    if takeovers == "successful":
        keep = successful_takeover_mask(keep, t["terminated"], t["truncated"], grace_steps)
    if climb is not None:
        keep &= ~climb_mask(t["action"], climb)
    if keep.any():
        transitions_to_buffer({k: ({o: a[keep] for o, a in v.items()} if isinstance(v, dict) else v[keep])
                               for k, v in t.items()}, prior)
    return int(keep.sum())


def load_robot_demos(learner) -> dict:
    """The demos the session recorded on the robot (RUN/robot_demos, `record_robot_demos`)."""
    from robolearn.policies.demos import load_demos

    path = learner.dir / ROBOT_DEMOS
    if not (path / "meta.json").is_file():
        raise DatasetError(f"finetune.robot_demos: {path} holds no dataset; `robolearn finetune` records "
                           "it before starting the learner")
    return load_demos(str(path), learner.env, seed=learner.cfg.seed)


# ------------------------------------------------------------------------- on the robot
def evaluate_on_robot(make_env, act, episodes: int, seed: int, max_outage_s: float = 120.0) -> dict:
    """Episodes of `act` on the robot env: the env's success and, where the backend has an
    oracle (`info["true_success"]`: a simulator or an emulator), the true success. A step whose
    reward is missing (NaN: e.g. the camera did not see the cube) is counted, not summed: one such
    step made the whole mean return NaN. A camera that stops giving frames (in a step or a reset)
    is what it is in training (runtime/camera_outage.py): the robot held, the episode dropped
    (`camera_dropped`), a wait of up to `max_outage_s` for the stream, and the same episode (its
    seed) run again; lift session 37 ended in its zero-shot evaluation on one frame 1.14 s old.
    `per_episode` keeps each episode's seed, steps and outcomes: which of a final's episodes failed,
    to run again with `scripts/eval_session_checkpoint.py --trace` (its seeds are these)."""
    from robolearn.reset_report import ResetStats
    from robolearn.runtime.camera_outage import CameraOutage

    env = make_env()
    rows = []             # one per episode; the rates below are their means
    resets = ResetStats()
    outage = None
    t0 = time.monotonic()
    try:
        while len(rows) < episodes:
            ep, n = len(rows), None
            try:
                obs, info = env.reset(seed=seed + ep)
                if isinstance(info.get("reset"), dict):
                    resets.add(info["reset"])
                ret, ok, true_ok, n, ep_missing = 0.0, False, None, 0, 0
                while True:
                    obs, r, term, trunc, info = env.step(act(obs))
                    if math.isfinite(float(r)):
                        ret += float(r)
                    else:
                        ep_missing += 1
                    n += 1
                    ok = ok or bool(info.get("success", False))
                    if "true_success" in info:
                        true_ok = bool(true_ok or info["true_success"])
                    if term or trunc:
                        break
            except CameraError as exc:
                outage = outage or CameraOutage(env, max_outage_s)
                if len(outage.outages) >= episodes:   # a stream that keeps failing, not a hiccup
                    raise
                outage.dropped(exc, n)
                while outage.poll() == "pause":
                    time.sleep(OUTAGE_POLL_S)
                continue                              # the same episode again
            # a step whose reward is missing (NaN) is counted, not summed into the return
            rows.append({"seed": seed + ep, "steps": n, "success": ok, "true_success": true_ok,
                         "return": ret, "reward_missing_steps": ep_missing})
    finally:
        env.close()
    truth = [r["true_success"] for r in rows if r["true_success"] is not None]
    out = {"episodes": episodes, "return": float(np.mean([r["return"] for r in rows])) if rows else None,
           "success_rate": float(np.mean([r["success"] for r in rows])) if rows else None,
           "true_success_rate": float(np.mean(truth)) if truth else None,
           "env_steps": int(sum(r["steps"] for r in rows)),
           "reward_missing_steps": int(sum(r["reward_missing_steps"] for r in rows)),
           "wall_s": round(time.monotonic() - t0, 2), "resets": resets.as_dict(),
           "per_episode": rows}
    if outage is not None:
        out.update(outage.summary())
    return out


def control_hz(cfg) -> float:
    env = make_sim_twin(cfg)
    try:
        return env_control_hz(env, 10.0)
    finally:
        env.close()


def make_robot_env(cfg):
    """The robot's env exactly as the actor makes it (backend and port from [env_kwargs])."""
    from robolearn.runtime.actor import _make_env

    return _make_env(cfg)


class EmulatedRobotSession:
    """`robolearn emulate` in its own process for a session: port, cameras, truth, calibration."""

    def __init__(self, cfg, log_path: Path):
        from robolearn.drivers.emulation import start_emulator

        kind = "car" if "Car" in cfg.env else "arm"
        self.cfg, self.kind = cfg, kind
        self.robot = start_emulator(kind, reality=cfg.finetune.reality, cameras=True,
                                    seed=cfg.seed, subprocess=True)

    def env_kwargs(self) -> dict:
        kw = {"backend": "real", "port": self.robot.port}
        if self.robot.hand_url:  # no person at an emulated robot: the emulated operator answers
            # failed resets by putting the cube back by hand (counted as human prompts)
            kw["reset_prompt"] = f"operator:{self.robot.hand_url}"
            kw["reset_on_failure"] = "prompt"
        if self.kind == "car":  # lap progress from its pose tracker; no hand can lift the car, so
            # the emulated operator answers a failed recovery by asking for another (car_operator.py)
            kw["tracker"] = self.robot.tracker_url
            kw["reset_prompt"] = "operator:car"
            kw["reset_on_failure"] = "prompt"
            # the emulated car shares this machine's cores with the learner, the actor's camera
            # encoder and whatever else runs: its telemetry was seen 630 ms late under load, which
            # the driver's 250 ms watchdog turns into an e-stop. A real car's link is not starved
            # this way; there the driver's default applies (the firmware's own 250 ms command
            # failsafe stays on in both)
            kw["stale_after"] = self.cfg.env_kwargs.get("stale_after", 1.0)
            # its camera renders on the same starved cores: a frame 1.05 s old ended session 2's
            # first run (load 8-10); allow 2 s here (a real camera: the driver's 1 s default)
            cam = dict(self.cfg.env_kwargs.get("camera_options") or {})
            cam.setdefault("stale_after", 2.0)
            kw["camera_options"] = cam
        if self.kind == "arm":  # the emulator shares this machine's cores (with the learner and
            # anything else running): allow it 250 ms a reply before a retry (a real bus: ~1 ms)
            kw["timeout"] = self.cfg.env_kwargs.get("timeout", 0.25)
        if self.cfg.obs in ("pixels", "both") or self.cfg.env_kwargs.get("perception"):
            names = self.cfg.env_kwargs.get("camera") or self.cfg.finetune.sim_env_kwargs.get("camera")
            names = [names] if isinstance(names, str) else list(names or self.robot.camera_urls)
            missing = [n for n in names if n not in self.robot.camera_urls]
            if missing:
                raise ConfigError(f"the emulated robot has cameras {sorted(self.robot.camera_urls)}, "
                                  f"not {missing}")
            kw["camera"] = {n: self.robot.camera_urls[n] for n in names}
        return kw

    @property
    def truth_url(self) -> str:
        return self.robot.truth_url or ""

    def info(self) -> dict:
        """robot.json: where the emulated robot is (port, cameras, truth, fault control)."""
        return {"kind": self.kind, "port": self.robot.port, "cameras": self.robot.camera_urls,
                "truth": self.robot.truth_url, "faults": self.robot.faults_url,
                "pid": self.robot.process.pid if self.robot.process is not None else None}

    def fault_state(self) -> dict | None:
        """The emulator's own count of the faults done to it and of the goal writes it received
        (GET /faults.json), None if it cannot be asked."""
        from robolearn.drivers.truth import fetch_truth
        from robolearn.errors import DeviceError

        if not self.robot.faults_url:
            return None
        try:
            return fetch_truth(self.robot.faults_url + ".json")
        except DeviceError:
            return None

    def describe(self) -> str:
        return (f"{self.kind} on {self.robot.port}, reality {self.cfg.finetune.reality}, "
                f"cameras {self.robot.camera_urls}, truth {self.robot.truth_url}")

    def stop(self) -> None:
        self.robot.close()


def hand_moves(truth_url: str) -> int | None:
    """How often the emulated operator's hand moved the cube in this session (the emulator's
    own count, to set beside the human prompts: the hand is never used silently)."""
    from robolearn.drivers.truth import fetch_truth
    from robolearn.errors import DeviceError

    try:
        return fetch_truth(truth_url).get("hand_moves")
    except DeviceError:
        return None


def start_emulator(cfg, log_path: Path) -> EmulatedRobotSession:
    return EmulatedRobotSession(cfg, log_path)


def _reset_log(env):
    """`env` keeping its resets' statistics (`.stats`) for a recording's summary."""
    import gymnasium as gym

    from robolearn.reset_report import ResetStats

    class ResetLog(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.stats = ResetStats()

        def reset(self, **kw):
            obs, info = self.env.reset(**kw)
            if isinstance(info.get("reset"), dict):
                self.stats.add(info["reset"])
            return obs, info

    return ResetLog(env)


ROBOT_DEMOS = "robot_demos"  # RUN/robot_demos: the emulated operator's demos on the robot
DEMO_HOLD_FRAMES = 30        # robot demos: frames the cube is held up before the operator ends it


def record_robot_demos(cfg, run_dir: str | Path, episodes: int) -> dict:
    """Demonstrations on the robot for RLPD's prior data (HIL-SERL records 10-20): the emulated
    operator drives the lift through the teleop path (`record` + `OperatorDevice`, as `robolearn
    record --device operator`) on the robot env exactly as the actor makes it, so the steps
    carry the session's own reward model and observations. Appends until the dataset holds
    `episodes` (a resumed session does not record them again). Robot time is counted."""
    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.teleop import make_device
    from robolearn.teleop.recorder import close_recording, record
    from robolearn.teleop.session import Readout

    out = Path(run_dir) / ROBOT_DEMOS
    env = _reset_log(make_robot_env(cfg))
    dev = writer = None
    try:
        hz = env_control_hz(env, 10.0)
        writer = DatasetWriter(out, env_id=cfg.env, control_hz=hz, observation_space=env.observation_space,
                               action_space=env.action_space, obs_mode=cfg.obs)
        had = writer.num_episodes
        res = None
        if had < episodes:
            # the operator holds the cube up for DEMO_HOLD_FRAMES before saying "success": the
            # session's reward model must get to see the lift (its reward is what the prior data
            # teaches; in the first session the default 8 frames ended every demo before it fired)
            dev = make_device("operator", env, truth_url=cfg.finetune.truth_url, mode="demo",
                              seed=cfg.seed + 31, success_frames=DEMO_HOLD_FRAMES, fail_hold=DEMO_HOLD_FRAMES)
            res = record(env, dev, writer, episodes - had, seed=writer.next_seed(), rate_hz=0.0,
                         readout=Readout())
        eps = writer.meta["episodes"]
        steps = int(sum(e.get("steps", 0) for e in eps))
        return {"dataset": str(out), "episodes": len(eps), "recorded_now": len(res.saved) if res else 0,
                "successes": int(sum(bool(e.get("success")) for e in eps)), "steps": steps,
                "robot_time_s": round(steps / hz, 1), "resets": env.stats.as_dict()}
    finally:
        close_recording(dev, writer, env)


def record_on_robot(cfg, out: str | Path, episodes: int, device: str, device_config: dict,
                    seed: int | None = None) -> dict:
    """Record `episodes` teleoperated episodes on the session's robot into dataset `out`, with
    the robot env exactly as the actor makes it (calibration, cameras, perception, resets) but
    camera frames kept and the recording device's labels instead of a reward model: the data
    a robot-trained reward classifier learns from (HIL-SERL), before there is one."""
    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.policies.env_building import make_env
    from robolearn.teleop import make_device
    from robolearn.teleop.recorder import HumanLabelsOnly, close_recording, record
    from robolearn.teleop.session import Readout

    kwargs = {**cfg.env_kwargs, "reward_source": HumanLabelsOnly()}
    env = _reset_log(make_env(cfg.env, "both", None, cfg.max_episode_steps, kwargs, {}, cfg.sim_params))
    dev = writer = None
    try:
        hz = env_control_hz(env, 10.0)
        writer = DatasetWriter(out, env_id=cfg.env, control_hz=hz, observation_space=env.observation_space,
                               action_space=env.action_space, obs_mode="both")
        dev = make_device(device, env, **device_config)
        readout = Readout()
        readout.line(dev.help())
        first = writer.next_seed() if seed is None else seed
        res = record(env, dev, writer, episodes, seed=first, rate_hz=0.0, readout=readout)
        return {"dataset": str(out), "saved": len(res.saved), "successes": res.successes,
                "discarded": res.discarded, "steps": res.steps, "total_episodes": writer.num_episodes,
                "resets": env.stats.as_dict()}
    finally:
        close_recording(dev, writer, env)


def evaluate_checkpoint(cfg, checkpoint: str | Path, episodes: int) -> dict:
    """Episodes of a checkpoint's policy on the robot env: mean actions, or sampled ones
    (`finetune.eval_actions`)."""
    from safetensors.torch import load_file

    from robolearn.policies.registry import make_agent
    from robolearn.policies.checkpoints import find_checkpoint

    ckpt = find_checkpoint(checkpoint)
    env = make_robot_env(cfg)
    try:
        agent = make_agent(cfg.algo, env.observation_space, env.action_space, seed=cfg.seed,
                           **cfg.learner.agent)
    finally:
        env.close()
    try:
        agent.load_policy_state(load_file(str(ckpt / "policy.safetensors")))
    except OSError as exc:
        raise DatasetError(f"checkpoint {ckpt} is incomplete or corrupt: {exc}") from None
    mean = cfg.finetune.eval_actions == "mean"   # the zero-shot and the final act alike
    act = lambda o: agent.act(o, deterministic=mean)  # noqa: E731
    if "CarLap" in cfg.env:  # laps, lap times and collisions per lap (runtime/finetune_car.py)
        from robolearn.runtime.finetune_car import evaluate_car

        res = evaluate_car(cfg, act, episodes, seed=cfg.seed + 7_000)
    else:
        res = evaluate_on_robot(lambda: make_robot_env(cfg), act, episodes, seed=cfg.seed + 7_000,
                                max_outage_s=cfg.actor.camera_outage_s)
    res["checkpoint"] = str(ckpt)
    res["actions"] = cfg.finetune.eval_actions
    return res
