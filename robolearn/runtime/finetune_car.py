"""What a fine-tuning session adds for the car: lap-time evaluations on the robot, the reference
lap of pure pursuit on the emulator's *true* pose, demonstration laps driven through the
gamepad by the emulated operator, and the report's car entries.

Why a reference lap inside the session: a lap time means little without the one a good
controller gets on the same car, the same day (the same reality, battery, load on this
machine). Pure pursuit steering by the emulator's true pose (/truth.json, what only an
emulator knows) is that controller; the policy only ever sees the car's sensors and camera.
Evaluations run whole episodes without the practice wrapper (a crash does not end them, the
car backs off and goes on, as in a race) and count laps, lap times and IMU collisions.
"""
from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np

from robolearn.env import env_control_hz
from robolearn.errors import ConfigError, DatasetError

#: an evaluation episode: 45 s at 20 Hz (3 laps of pure pursuit take about 27 s + the run-up)
EVAL_STEPS = 900
EVAL_LAPS = 3
#: laps of track driven per point of the report's collisions-per-lap curve
CURVE_WINDOW_LAPS = 2.0


def is_car(cfg) -> bool:
    return "CarLap" in cfg.env


def _eval_cfg(cfg, max_steps: int):
    """The robot env of the session for whole evaluation episodes: no practice wrapper."""
    c = copy.deepcopy(cfg)
    c.env_kwargs["practice"] = False
    c.max_episode_steps = max_steps
    return c


def drive(env, act, seed: int, laps: int, on_reset=None) -> dict:
    """One episode on the robot env until `laps` laps are done or it ends: lap times (s),
    collisions, steps, missing-reward steps, the reset record."""
    obs, info = env.reset(seed=seed)
    reset = info.get("reset") if isinstance(info.get("reset"), dict) else None
    if on_reset is not None:
        on_reset()
    lap_times, n, missing, done_laps = [], 0, 0, 0
    while True:
        obs, r, term, trunc, info = env.step(act(obs))
        n += 1
        missing += int(bool(info.get("reward_missing")))
        if info.get("laps", 0) > done_laps:
            done_laps = int(info["laps"])
            lap_times.append(float(info["lap_time"]))
        if done_laps >= laps or term or trunc:
            break
    return {"laps": done_laps, "lap_times_s": [round(t, 3) for t in lap_times],
            "collisions": int(info.get("collisions", 0)), "steps": n, "reward_missing_steps": missing,
            "reset": reset}


def summarise(runs: list[dict], hz: float, t0: float) -> dict:
    from robolearn.reset_report import ResetStats

    stats = ResetStats()
    for r in runs:
        if r["reset"]:
            stats.add(r["reset"])
    times = [t for r in runs for t in r["lap_times_s"]]
    laps = sum(r["laps"] for r in runs)
    coll = sum(r["collisions"] for r in runs)
    return {"episodes": len(runs), "laps": laps, "lap_times_s": times,
            "best_lap_time_s": min(times) if times else None,
            "mean_lap_time_s": round(float(np.mean(times)), 3) if times else None,
            "collisions": coll, "collisions_per_lap": round(coll / laps, 3) if laps else None,
            "env_steps": int(sum(r["steps"] for r in runs)),
            "robot_time_s": round(sum(r["steps"] for r in runs) / hz, 1),
            "reward_missing_steps": int(sum(r["reward_missing_steps"] for r in runs)),
            "per_episode": [{k: r[k] for k in ("laps", "lap_times_s", "collisions", "steps")} for r in runs],
            "resets": stats.as_dict(), "wall_s": round(time.monotonic() - t0, 1)}


def evaluate_car(cfg, act, episodes: int, seed: int, laps: int = EVAL_LAPS,
                 max_steps: int = EVAL_STEPS, on_reset=None) -> dict:
    """`episodes` whole episodes of `act` on the robot (at most `max_steps` and the launch
    file's max_episode_steps each): laps, lap times, collisions per lap, and the link's late
    counts (`link`: serial write retries, tracker silences)."""
    from robolearn.runtime.actor import _make_env, car_stats

    c = _eval_cfg(cfg, min(max_steps, cfg.max_episode_steps or max_steps))
    env = _make_env(c)
    hz = env_control_hz(env, 20.0)
    t0 = time.monotonic()
    try:
        runs = [drive(env, act, seed + i, laps, on_reset) for i in range(episodes)]
    finally:
        link = car_stats(env)
        env.close()
    return {**summarise(runs, hz, t0), "link": link}


def pure_pursuit_true_pose(cfg, laps: int = EVAL_LAPS, seed: int = 0) -> dict:
    """The reference: pure pursuit steering by the emulator's true pose (/truth.json), on the
    session's robot, one episode of `laps` laps (timed by the tracker, as the policy's are).
    The truth is polled beside the loop (`LiveTruth`): a late answer is a step without a pose
    (pure pursuit brakes, counted in `truth`), only `tracker_lost_after` s without one stops."""
    from robolearn.drivers.truth import TRUTH_LOST_AFTER, LiveTruth
    from robolearn.runtime.actor import _make_env, car_stats
    from robolearn.tasks.car_scripted import PurePursuit

    url = cfg.finetune.truth_url
    if not url:
        raise ConfigError("the pure-pursuit reference needs the emulator's true pose: run the session on "
                          "the emulated car (finetune.reality)")
    c = _eval_cfg(cfg, EVAL_STEPS)
    c.env_kwargs.pop("perception", None)   # it reads no observation: no camera encoder needed
    if c.obs != "state":
        c.obs = "state"
    c.env_kwargs.pop("camera", None)
    env = _make_env(c)
    truth = None
    try:
        truth = LiveTruth(url, lost_after=float(cfg.env_kwargs.get("tracker_lost_after", TRUTH_LOST_AFTER)))
        hz = env_control_hz(env, 20.0)
        pp = PurePursuit(env, locate=truth.car_pose)
        t0 = time.monotonic()
        run = drive(env, pp.act, seed, laps, on_reset=pp.reset)
    finally:
        if truth is not None:
            truth.close()
        link = car_stats(env)
        env.close()
    out = summarise([run], hz, t0)
    out["truth"] = {**truth.stats(), "blind_steps": pp.blind_steps}
    out["link"] = link
    return out


def episode_curve(episodes: list[dict], hz: float, track_length: float) -> dict:
    """Per recorded training episode, in robot time: collisions and distance, and collisions per
    lap of distance over windows of CURVE_WINDOW_LAPS laps (is the car crashing less?)."""
    t, coll, dist = [], [], []
    clock = 0.0
    for e in episodes:
        clock += e["steps"] / hz
        t.append(round(clock, 1))
        coll.append(int(e.get("collisions", 0)))
        d = e.get("progress", 0.0) - e.get("progress_start", e.get("progress", 0.0))
        dist.append(max(float(d), 0.0))
    curve, c_acc, d_acc = [], 0, 0.0
    for i in range(len(t)):
        c_acc += coll[i]
        d_acc += dist[i]
        if d_acc >= CURVE_WINDOW_LAPS * track_length or i == len(t) - 1:
            if d_acc > 0:
                curve.append({"robot_time_s": t[i], "laps_driven": round(d_acc / track_length, 2),
                              "collisions": c_acc,
                              "collisions_per_lap": round(c_acc / (d_acc / track_length), 3)})
            c_acc, d_acc = 0, 0.0
    laps_driven = sum(dist) / track_length
    return {"robot_time_s": t, "collisions": coll, "distance_m": [round(d, 2) for d in dist],
            "collisions_per_lap_curve": curve,
            "training_laps_driven": round(laps_driven, 2),
            "training_collisions": int(sum(coll)),
            "training_collisions_per_lap": round(sum(coll) / laps_driven, 3) if laps_driven else None,
            "training_laps_completed": int(sum(e.get("laps", 0) for e in episodes)),
            "practice_triggers": {k: sum(1 for e in episodes if e.get("practice_trigger") == k)
                                  for k in ("collision", "no_progress")}}


def car_report_entries(run_dir: Path, hz: float, teleports_before, teleports_after) -> dict:
    """The car's entries of session_report.json (beside finetune_report's common ones)."""
    from robolearn.runtime.finetune_report import episode_records
    from robolearn.sim.track import Track

    eps = episode_records(Path(run_dir) / "episodes")
    out = {"car": episode_curve(eps, hz, Track().length)}
    if teleports_before is not None and teleports_after is not None:
        out["teleports"] = int(teleports_after) - int(teleports_before)
    else:
        out["teleports"] = None
    return out


def record_demo_laps(cfg, out: str | Path, episodes: int, seed: int = 0, laps: int = 2) -> dict:
    """Demonstration laps on the session's robot, driven by the emulated operator through the
    gamepad path (teleop/car_operator.py) with the teleop recorder, the robot env exactly as the
    actor makes it (camera encoder included) and the tracker's reward. Writes the dataset to
    `out` and its rewarded transitions to `out`/demos.npz (steps the tracker did not see have no
    reward and are left out): `finetune.prior_data` reads that file."""
    from robolearn.data.dataset import load_transitions
    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.policies.env_building import make_env
    from robolearn.teleop import make_device
    from robolearn.teleop.recorder import record

    url = cfg.finetune.truth_url
    if not url:
        raise ConfigError("the emulated car operator sees the car through the emulator's truth: record "
                          "demonstrations on the emulated car (finetune.reality), or drive them yourself "
                          "with `robolearn finetune LAUNCH --record DIR --device gamepad`")
    kwargs = {**cfg.env_kwargs, "practice": False}
    env = make_env(cfg.env, cfg.obs, None, EVAL_STEPS * 2, kwargs, {}, cfg.sim_params)
    out = Path(out)
    dev = writer = None
    try:
        hz = env_control_hz(env, 20.0)
        writer = DatasetWriter(out, env_id=cfg.env, control_hz=hz, observation_space=env.observation_space,
                               action_space=env.action_space, obs_mode="state")
        dev = make_device("car_operator", env, truth_url=url, seed=seed, demo_laps=laps)
        res = record(env, dev, writer, episodes, seed=seed, rate_hz=0.0)
    finally:
        from robolearn.teleop.recorder import close_recording

        close_recording(dev, writer, env)
    t = load_transitions(out, keys=["state"])
    keep = np.isfinite(t["reward"])
    if not keep.any():
        raise DatasetError(f"demonstrations in {out} have no step with a reward: was the tracker running?")
    arrays = {"action": t["action"][keep], "reward": t["reward"][keep],
              "terminated": t["terminated"][keep], "truncated": t["truncated"][keep],
              "obs_state": t["obs"]["state"][keep], "next_obs_state": t["next_obs"]["state"][keep]}
    np.savez(out / "demos.npz", **arrays)
    summary = {"dataset": str(out), "npz": str(out / "demos.npz"), "episodes": len(res.saved),
               "steps": res.steps, "transitions": int(keep.sum()), "unrewarded_steps": int((~keep).sum()),
               "demo_return_m": round(float(t["reward"][keep].sum()), 2)}
    (out / "demos_summary.json").write_text(json.dumps(summary, indent=1))
    return summary
