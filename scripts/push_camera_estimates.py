"""The front camera's cube estimates on ArmPush episodes in sim, against the simulator's truth:
the cube finder (the robot's push reward, rewards/push_camera.py) and, with --localiser, a policy
localiser (policies/perception.py). docs/perception.md, "Push from the camera".

    MUJOCO_GL=egl python scripts/push_camera_estimates.py [--localiser DIR] [--episodes 30] [--policy RUN]

The finder is fitted as the session's camera calibration fits it on a robot (frames at the look
pose with the cube at known points, the last quarter held out), here on sim renders. Then per
step of scripted push episodes (and noisy-scripted ones: what a learning policy does), seeds
100..: is the cube seen, the finder's error, the reward it gives vs the task's, and whether its
success agrees with the truth, per step and per episode (the first step it calls a success ends
a robot episode: precision is about that step).
"""
from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np

import robolearn  # noqa: F401  (registers the envs)


def fit_sim_finder(env, n: int = 80, seed: int = 0):
    from robolearn.policies.cube_finder import CubeFinder, render_look_frames

    images, xy = render_look_frames(env, n, np.random.default_rng(seed))
    held = np.arange(n) >= int(0.75 * n)
    return CubeFinder.fit(images, xy, camera="front", heldout=held)


def apply_reality(env, name: str, part: str = "both") -> None:
    """The reality's model parameters in the sim, and the front camera's frames through JPEG
    (`part`: "arm" keeps the nominal camera, "camera" the nominal arm)."""
    import dataclasses

    import cv2

    from robolearn.drivers.reality import ArmReality, CameraReality, apply_arm_model, load_reality

    reality = load_reality(name)
    if part == "arm":
        reality = dataclasses.replace(reality, camera=CameraReality(quality=reality.camera.quality))
    elif part == "camera":
        reality = dataclasses.replace(reality, arm=ArmReality())
    apply_arm_model(env.unwrapped.sim, reality)
    cam = env.unwrapped.backend.cameras["front"]
    read, q = cam.read, reality.camera.quality

    def jpeg_read():
        f = read()
        ok, buf = cv2.imencode(".jpg", cv2.cvtColor(np.ascontiguousarray(f.image), cv2.COLOR_RGB2BGR),
                               [cv2.IMWRITE_JPEG_QUALITY, q])
        return dataclasses.replace(f, image=cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB))

    cam.read = jpeg_read


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--localiser", default=None)
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--noise", type=float, default=0.4, help="std of the noisy-scripted episodes' action noise")
    p.add_argument("--reality-part", choices=("both", "arm", "camera"), default="both",
                   help="with --reality: only its arm physics, or only its camera (default both)")
    p.add_argument("--whole-share", type=float, default=None,
                   help="the reward's whole-cube test (default rewards/push_camera.py WHOLE_SHARE; 0: off)")
    p.add_argument("--margin", type=float, default=None,
                   help="the reward's success margin inside the 3 cm (m; default rewards/push_camera.py success_margin_for: 5 mm, or 1.71 x the finder's held-out error)")
    p.add_argument("--policy", default=None,
                   help="a run folder: its deterministic policy drives the episodes instead of the scripted pusher "
                        "(its env, with its localiser, reads the same camera frames)")
    p.add_argument("--reality", default=None,
                   help="a reality file's arm and camera (e.g. hard: the camera moved, turned, wider, tinted, "
                        "dimmer; heavier, softer, slower servos) applied to the sim, and every frame through "
                        "JPEG at the reality's quality, as the emulator's MJPEG stream serves it")
    a = p.parse_args()
    from robolearn.policies.perception import Localiser
    from robolearn.rewards.push_camera import CubeFinderPushReward
    from robolearn.tasks.arm import push_reward

    t0 = time.time()
    if a.policy:
        from robolearn.policies.checkpoints import load_policy

        # without the run's own [reality_gap]: its randomisation would reset --reality's model every episode
        policy, env, _ = load_policy(a.policy, env_kwargs={"camera": "front", "privileged_obs": True},
                                     reality_gap=not a.reality)
        modes = ("policy",)
    else:
        env = gym.make("robolearn/ArmPush-v0", obs="both", camera="front", privileged_obs=True)
        modes = ("scripted", "noisy")
    if a.reality:
        apply_reality(env, a.reality, a.reality_part)
    loc = Localiser.load(a.localiser) if a.localiser else None
    out: dict = {"episodes": a.episodes, "localiser": a.localiser, "reality": a.reality,
                 "reality_part": a.reality_part if a.reality else None, "policy": a.policy}
    try:
        finder = fit_sim_finder(env)
        out["finder_fit"] = finder.report
        if a.policy:
            from robolearn.policies.finder_estimate import FinderEstimate
            from robolearn.policies.perception import find_localiser

            est = find_localiser(env)
            out["policy_estimate"] = "cube_finder" if isinstance(est, FinderEstimate) else "localiser"
            if isinstance(est, FinderEstimate):
                est.finder = finder    # refitted on this camera, as the session's camera calibration does
        src = CubeFinderPushReward(finder)
        if a.margin is not None:
            src.success_margin = a.margin
        if a.whole_share is not None:
            src.whole_share = a.whole_share
        out["whole_share"], out["success_margin"] = src.whole_share, src.success_margin
        src.bind(env.unwrapped)
        env.unwrapped.reward_source = src     # as on the robot: the finder's success ends an episode
        task = env.unwrapped.task
        ctrl = env.unwrapped.scripted_controller()
        rng = np.random.default_rng(0)
        for mode in modes:
            err, seen, dr, loc_err = [], [], [], []
            conf = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
            ep_stats = {"fired": 0, "fired_true": 0, "true_any": 0, "true_any_fired": 0}
            fire_dist = []
            for ep in range(a.episodes):
                obs, _ = env.reset(seed=100 + ep)
                ctrl.reset()
                truth_any = False
                fired = truth_any = False
                while True:
                    act = np.asarray(policy(obs) if mode == "policy" else ctrl.act(obs), np.float64)
                    if mode == "noisy":
                        act = act + rng.normal(0, a.noise, act.shape)
                    obs, r_cam, term, trunc, info = env.step(np.clip(act, -1, 1).astype(np.float32))
                    truth = np.asarray(info["cube_pos"])
                    r_true, s_true, d_true = push_reward(truth, task.ee_pos, task.goal)
                    s_cam = bool(info["success"])
                    ok = not info.get("reward_missing")
                    seen.append(ok)
                    if ok:
                        err.append(float(np.linalg.norm(src.last_xy - truth[:2])))
                        dr.append(abs(r_cam - r_true))
                    conf[("tp" if s_true else "fp") if s_cam else ("fn" if s_true else "tn")] += 1
                    truth_any |= s_true
                    if s_cam and not fired:
                        fired = True
                        ep_stats["fired_true"] += s_true
                        fire_dist.append(d_true)
                    if loc is not None:
                        loc_err.append(float(np.linalg.norm(loc.predict(obs["front"]) - truth)))
                    if term or trunc:
                        break
                ep_stats["fired"] += fired
                ep_stats["true_any"] += truth_any
                ep_stats["true_any_fired"] += bool(truth_any and fired)
            e, d = np.asarray(err), np.asarray(dr)
            res = {"steps": len(seen), "seen_share": round(float(np.mean(seen)), 4),
                   "finder_error_mean_m": round(float(e.mean()), 4),
                   "finder_error_median_m": round(float(np.median(e)), 4),
                   "finder_error_p90_m": round(float(np.quantile(e, 0.9)), 4),
                   "reward_abs_diff_mean": round(float(d.mean()), 4),
                   "step_success": conf,
                   "episode_precision": round(ep_stats["fired_true"] / ep_stats["fired"], 4) if ep_stats["fired"] else None,
                   "episode_recall": round(ep_stats["true_any_fired"] / ep_stats["true_any"], 4) if ep_stats["true_any"] else None,
                   "episodes_true_success": ep_stats["true_any"], "episodes_fired": ep_stats["fired"],
                   "true_goal_distance_at_fire_max_m": round(float(max(fire_dist)), 4) if fire_dist else None}
            if loc_err:
                le = np.asarray(loc_err)
                res["localiser_error_mean_m"] = round(float(le.mean()), 4)
                res["localiser_error_median_m"] = round(float(np.median(le)), 4)
                res["localiser_error_p90_m"] = round(float(np.quantile(le, 0.9)), 4)
            out[mode] = res
    finally:
        env.close()
    out["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
