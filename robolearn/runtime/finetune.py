"""The on-robot fine-tuning session: what the learner and the report add to an async run.

A session is an ordinary learner + actor run (`robolearn launch`) with four differences, all
driven by the `[finetune]` table of the launch file:
- the learner starts from a sim-pretrained checkpoint (`load = "agent"`: actor, critics and
  temperature; `"policy"`: the actor only; `"none"`: the same networks and options with fresh
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
Evaluation happens on the robot, not in the learner: deterministic episodes of the pretrained
policy before the session and of the fine-tuned one after it (`evaluate_on_robot`).
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

from robolearn.errors import ConfigError, DatasetError

log = logging.getLogger("robolearn.runtime.finetune")

REPUBLISH_S = 1.0


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
                   "encoder_layers", "normalize_obs")


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
    """The learner's env: the sim version of the robot's task (spaces, prior data; no robot)."""
    from robolearn.policies.env_building import make_env

    return make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, cfg.finetune.sim_env_kwargs, {})


def load_pretrained(agent, checkpoint: str | Path, load: str) -> None:
    """Initialise `agent` from the pretrained checkpoint; counters start at zero."""
    from safetensors.torch import load_file

    from robolearn.policies.serialize import load_state

    ckpt, _ = pretrained_state(checkpoint)
    if load == "none":  # from scratch: only the options (networks, preset) came from the checkpoint
        return
    if load == "agent":
        d = load_state(ckpt / "agent.safetensors")
        agent.load_state_dict(d)
        agent.num_updates = 0  # the session's own UTD pacing starts here
    else:
        agent.load_policy_state(load_file(str(ckpt / "policy.safetensors")))


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
    from robolearn.data.replay import MixedSampler, ReplayBuffer, transitions_to_buffer

    cfg, ft = learner.cfg, learner.cfg.finetune
    done = {"warm_start": ft.warm_start, "load": ft.load, "checkpoint": str(ft.checkpoint)}
    if resume_session(learner):  # a restarted learner continues the session, not the pretraining
        done["resumed_at_env_step"] = learner.env_steps
    else:
        load_pretrained(learner.agent, ft.checkpoint, ft.load)
    if ft.warm_start == "wsrl":
        learner.learning_starts = ft.warmup_episodes * episode_steps(learner.env)
        if "resumed_at_env_step" in done:  # UTD pacing continues from the resumed counts
            learner.learning_starts = min(learner.learning_starts, learner.env_steps)
        done["warmup_steps"] = learner.learning_starts
    elif ft.warm_start == "rlpd":
        prior = load_prior(ft.prior_data, learner)
        ac = learner.agent.config
        learner.prior = ReplayBuffer(learner.env.observation_space, learner.env.action_space,
                                     len(prior["action"]) + learner.replay.capacity,
                                     n_step=int(getattr(ac, "n_step", 1)),
                                     gamma=float(getattr(ac, "gamma", 0.99)), seed=cfg.seed + 1)
        transitions_to_buffer(prior, learner.prior)
        learner.sampler = MixedSampler(learner.replay, learner.prior, 0.5)
        learner.learning_starts = 0
        done["prior_transitions"] = int(len(prior["action"]))
        done["prior_data"] = ft.prior_data
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


# ------------------------------------------------------------------------- on the robot
def evaluate_on_robot(make_env, act, episodes: int, seed: int) -> dict:
    """Deterministic episodes on the robot env: the env's success and, where the backend has an
    oracle (`info["true_success"]`: a simulator or an emulator), the true success."""
    from robolearn.reset_report import ResetStats

    env = make_env()
    rets, model, truth, steps = [], [], [], []
    resets = ResetStats()
    t0 = time.monotonic()
    try:
        for ep in range(episodes):
            obs, info = env.reset(seed=seed + ep)
            if isinstance(info.get("reset"), dict):
                resets.add(info["reset"])
            ret, ok, true_ok, n = 0.0, False, None, 0
            while True:
                obs, r, term, trunc, info = env.step(act(obs))
                ret += float(r)
                n += 1
                ok = ok or bool(info.get("success", False))
                if "true_success" in info:
                    true_ok = bool(true_ok or info["true_success"])
                if term or trunc:
                    break
            rets.append(ret)
            model.append(ok)
            steps.append(n)
            if true_ok is not None:
                truth.append(true_ok)
    finally:
        env.close()
    return {"episodes": episodes, "return": float(np.mean(rets)) if rets else None,
            "success_rate": float(np.mean(model)) if model else None,
            "true_success_rate": float(np.mean(truth)) if truth else None,
            "env_steps": int(sum(steps)), "wall_s": round(time.monotonic() - t0, 2),
            "resets": resets.as_dict()}


# ------------------------------------------------------------------------------ report
def session_report(run_dir: str | Path, control_hz: float, extra: dict | None = None) -> dict:
    """session_report.json + session_report.png from the recorded episodes, the learner's
    metrics and the actor summaries of a finetune run folder."""
    run_dir = Path(run_dir)
    eps = _episodes(run_dir / "episodes")
    robot_s = np.cumsum([e["steps"] for e in eps]) / control_hz if eps else np.zeros(0)
    model = [bool(e.get("success")) for e in eps]
    truth = [e.get("true_success") for e in eps]
    have_truth = [t for t in truth if t is not None]
    agree = [bool(t) == m for t, m in zip(truth, model) if t is not None]
    actors = {}
    for p in sorted(run_dir.glob("actor_*.json")):
        try:
            actors[p.stem] = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
    resets = [e.get("reset", {}) for e in eps if isinstance(e.get("reset"), dict)]
    report = {
        "run": str(run_dir), "control_hz": control_hz, "episodes": len(eps),
        "robot_time_s": float(robot_s[-1]) if len(robot_s) else 0.0,
        "robot_time_per_episode_s": robot_s.tolist(),
        "model_success": model, "true_success": truth,
        "model_success_rate_last10": float(np.mean(model[-10:])) if model else None,
        "true_success_rate_last10": (float(np.mean([bool(t) for t in truth[-10:] if t is not None]))
                                     if have_truth else None),
        "reward_model_agreement": float(np.mean(agree)) if agree else None,
        "interventions": int(sum(e.get("interventions", 0) for e in eps)),
        "episodes_with_interventions": int(sum(1 for e in eps if e.get("interventions", 0))),
        "reward_missing_steps": int(sum(e.get("reward_missing", 0) for e in eps)),
        # reset records (robolearn/reset_report.py): `seconds` of robot time, `ok`, `failures`
        "resets": len(resets), "reset_time_s": float(sum(r.get("seconds", 0.0) for r in resets)),
        "reset_failures": int(sum(1 for r in resets if r.get("ok") is False or r.get("failures", 0))),
        "human_prompts": int(sum(r.get("human_prompts", 0) for r in resets)),
        "loop": {k: a.get("loop") for k, a in actors.items()},
        **(extra or {}),
    }
    # every human prompt of the session: training episodes, zero-shot and final evaluations
    evals = [report.get(k) or {} for k in ("zero_shot", "final")]
    report["human_prompts_total"] = report["human_prompts"] + int(
        sum((e.get("resets") or {}).get("human_prompts", 0) for e in evals))
    report["reset_time_total_s"] = round(report["reset_time_s"] + float(
        sum((e.get("resets") or {}).get("seconds", 0.0) for e in evals)), 1)
    tmp = run_dir / "session_report.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(run_dir / "session_report.json")
    try:
        _plot(report, run_dir / "session_report.png")
    except Exception as exc:  # a plot must never cost the JSON
        log.warning("session_report.png not written: %s", exc)
    return report


def _episodes(root: Path) -> list[dict]:
    if not (root / "meta.json").is_file():
        return []
    out = []
    for p in sorted(root.glob("episode_*/episode.json")):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return out


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.asarray(report["robot_time_per_episode_s"]) / 60.0
    fig, ax = plt.subplots(figsize=(8, 4.5))

    def rolling(xs, w=10):
        xs = np.asarray(xs, float)
        return np.array([xs[max(0, i - w + 1):i + 1].mean() for i in range(len(xs))])

    if len(t):
        ax.plot(t, rolling(report["model_success"]), label="reward-model success (rolling 10)")
        truth = report["true_success"]
        if any(v is not None for v in truth):
            idx = [i for i, v in enumerate(truth) if v is not None]
            ax.plot(t[idx], rolling([bool(truth[i]) for i in idx]), label="true success (rolling 10)")
    for key, style in (("zero_shot", "--"), ("final", ":")):
        ev = report.get(key) or {}
        v = ev.get("true_success_rate")
        v = ev.get("success_rate") if v is None else v
        if v is not None:
            ax.axhline(v, ls=style, color="grey", label=f"{key.replace('_', '-')} eval: {v:.2f}")
    ax.set_xlabel("robot time (min)")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"fine-tuning session: {report['episodes']} episodes, "
                 f"{report['interventions']} intervention steps, {report['resets']} resets")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def control_hz(cfg) -> float:
    env = make_sim_twin(cfg)
    try:
        return float(env.unwrapped.metadata.get("control_hz") or env.metadata.get("render_fps") or 10.0)
    finally:
        env.close()


def make_robot_env(cfg):
    """The robot's env exactly as the actor makes it (backend and port from [env_kwargs])."""
    from robolearn.runtime.actor import _make_env

    return _make_env(cfg)


def calibrate_robot_arm(cfg, run_dir: Path) -> dict:
    """Stop calibration (drivers/stop_calibration.py) on the session's arm, through the port the
    actor will use: writes RUN/arm_calibration.json and points env_kwargs.calibration at it, so
    the zero-shot evaluation, the actor and the final evaluation all read it. An existing
    env_kwargs.calibration is the starting point (IDs, directions, rough offsets)."""
    from robolearn.drivers.calibration import Calibration
    from robolearn.drivers.real import bus_protocol, default_arm_spec
    from robolearn.drivers.servo_bus import ServoBus
    from robolearn.drivers.stop_calibration import calibrate_against_stops, joint_names

    kw = cfg.env_kwargs
    if kw.get("backend") != "real" or not kw.get("port"):
        raise ConfigError("finetune.calibrate_arm needs the robot: set [env_kwargs] backend = \"real\" "
                          "and port, or finetune.reality for the emulated arm")
    spec = default_arm_spec()
    initial = kw.get("calibration")
    if isinstance(initial, (str, Path)):
        initial = Calibration.load(initial, required=joint_names(spec))
    elif initial is not None:
        raise ConfigError(f"env_kwargs.calibration = {initial!r}: give a calibration JSON path")
    with ServoBus(kw["port"], baudrate=int(kw.get("baudrate", 1_000_000)),
                  timeout=float(kw.get("timeout", 0.05)),
                  protocol=bus_protocol(kw.get("protocol", "feetech"))) as bus:
        res = calibrate_against_stops(bus, spec, initial, log=lambda line: print(f"calibrate-arm: {line}",
                                                                                 flush=True))
    path = Path(run_dir) / "arm_calibration.json"
    res.calibration.save(path)
    kw["calibration"] = str(path)
    return {"file": str(path), **res.summary()}


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

    def describe(self) -> str:
        return (f"{self.kind} on {self.robot.port}, reality {self.cfg.finetune.reality}, "
                f"cameras {self.robot.camera_urls}, truth {self.robot.truth_url}")

    def stop(self) -> None:
        self.robot.close()


def calibrate_robot_perception(cfg, run_dir: Path, log=print) -> dict:
    """Camera calibration on the robot (robolearn/runtime/perception_calibration.py): the arm moves the
    cube and labels camera frames from its kinematics; the cube finder for camera resets is
    fitted on them and the policy localiser (env_kwargs perception) fine-tuned, both saved to
    RUN/perception_calibration/, which every robot env of the session then reads (the sim
    twin keeps the sim-trained localiser).
    The operator is asked (the env's reset prompt) to put the cube on the start mark."""
    import gymnasium as gym

    from robolearn.registry import register_all
    from robolearn.runtime.perception_calibration import (PerceptionCalibrationConfig, calibrate_localisers,
                                                          collect_robot_frames, save_frames,
                                                          train_success_classifier)
    from robolearn.teleop.recorder import HumanLabelsOnly

    kw = dict(cfg.env_kwargs)
    if kw.get("backend") != "real":
        raise ConfigError("finetune.calibrate_perception needs the robot: set [env_kwargs] backend = "
                          "\"real\" and port (and camera), or finetune.reality for the emulated robot")
    perception = kw.pop("perception", None)
    kw.pop("cube_finder", None)                  # made here
    camera = kw.get("camera")
    from robolearn.policies.perception import Localiser

    cam_name = Localiser.load(perception).camera if perception else "front"
    register_all()
    env = gym.make(cfg.env, obs="both", reward_source=HumanLabelsOnly(), **kw)
    try:
        task = env.unwrapped.task
        if cam_name not in task.backend.cameras:
            raise ConfigError(f"camera calibration needs camera {cam_name!r}; the robot has "
                              f"{sorted(task.backend.cameras)} (env_kwargs camera = {camera!r})")
        prompt = env.unwrapped.resets.prompt

        def put_cube(xy, why):
            if hasattr(prompt, "put_cube"):
                prompt.put_cube(xy, why)
            elif prompt is not None:
                prompt.ask(f"{why}: put the cube on the table at x={xy[0]:.3f} m, y={xy[1]:.3f} m "
                           "(in front of the arm's base, x forward, y to its left)")
            else:
                raise ConfigError("camera calibration asks the operator to place the cube: run it in "
                                  "a terminal (reset_on_failure = \"prompt\")")

        pc = PerceptionCalibrationConfig(cycles=cfg.finetune.perception_cycles, seed=cfg.seed)
        frames, stats = collect_robot_frames(
            task, task.backend.cameras[cam_name], pc, put_cube,
            progress=lambda c, n, m: log(f"camera calibration: cycle {c}/{pc.cycles}, {n} + {m} frames"))
    finally:
        env.close()
    out = Path(run_dir) / "perception_calibration"
    out.mkdir(parents=True, exist_ok=True)
    save_frames(frames, out / "frames.npz")
    report = calibrate_localisers(frames, perception, out, cfg.env, pc, camera=cam_name, log=log)
    if cfg.finetune.calibrate_reward:
        report["success_classifier"] = train_success_classifier(frames, out / "success_classifier", cfg.env,
                                                                pc, camera=cam_name, log=log)
        cfg.reward = {"model": str(out / "success_classifier"), "where": "env"}
    if perception:
        cfg.env_kwargs["perception"] = str(out / "perception")
    cfg.env_kwargs["cube_finder"] = str(out / "cube_finder")
    return {"out": str(out), **stats, **report}


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


def record_on_robot(cfg, out: str | Path, episodes: int, device: str, device_config: dict,
                    seed: int | None = None) -> dict:
    """Record `episodes` teleoperated episodes on the session's robot into dataset `out`, with
    the robot env exactly as the actor makes it (calibration, cameras, perception, resets) but
    camera frames kept and the recording device's labels instead of a reward model: the data
    a robot-trained reward classifier learns from (HIL-SERL), before there is one."""
    from robolearn.data.dataset import DatasetWriter
    from robolearn.policies.env_building import make_env
    from robolearn.teleop import make_device
    from robolearn.teleop.recorder import HumanLabelsOnly, record
    from robolearn.teleop.session import Readout

    import gymnasium as gym

    from robolearn.reset_report import ResetStats

    class ResetLog(gym.Wrapper):  # the resets' statistics for the summary
        stats = ResetStats()

        def reset(self, **kw):
            obs, info = self.env.reset(**kw)
            if isinstance(info.get("reset"), dict):
                self.stats.add(info["reset"])
            return obs, info

    kwargs = {**cfg.env_kwargs, "reward_source": HumanLabelsOnly()}
    env = ResetLog(make_env(cfg.env, "both", None, cfg.max_episode_steps, kwargs, {}, cfg.sim_params))
    dev = writer = None
    try:
        hz = float(env.unwrapped.metadata.get("control_hz", 10.0))
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
        if dev is not None:
            dev.close()
        if writer is not None:
            writer.close()
        env.close()


def evaluate_checkpoint(cfg, checkpoint: str | Path, episodes: int) -> dict:
    """Deterministic episodes of a checkpoint's policy on the robot env."""
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
    res = evaluate_on_robot(lambda: make_robot_env(cfg), lambda o: agent.act(o, deterministic=True),
                            episodes, seed=cfg.seed + 7_000)
    res["checkpoint"] = str(ckpt)
    return res
