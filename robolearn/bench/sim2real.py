"""`robolearn bench sim2real`: what the reality gap does, what the camera path costs, what
calibration recovers, all against the emulated hardware (real driver stack over a pty).

Sections, each with its baseline measured in the same run:
1. scripted controller on ArmReach: sim vs the emulator without a reality (the real loop's
   timing alone: the baseline) vs `--reality mild` vs `--reality hard` (backend "real"). Success as the env reports it (from measured joints and
   kinematics, as on hardware) and *true* success (the emulator's true joint angles through
   the same kinematics: calibration offsets fool the first, not the second); trajectory error
   = RMS joint-angle difference between each episode and a replay of its actions in the
   nominal sim from the same start (the sim row is the floor of that measure).
2. HTTP camera: frames/s arriving through `OpenCVCamera` at 84x84 from the emulator's MJPEG
   stream vs the frames the emulator rendered in the same window; capture latency (publish ->
   frame available in `read()`) of a synthetic MJPEG stream vs an in-process JPEG encode +
   decode of the same frames (the floor without HTTP/FFmpeg).
3. calibrate-sim, arm and car: excitation episodes recorded on the hard reality; the fitted
   parameters vs the hidden values, and trajectory error before / after. The latency the fit sees includes
   the host loop's own delay, measured by fitting latency on a no-gap recording.
4. stops (not in the default set): `robolearn calibrate-arm`'s stop calibration on the hard
   reality (Feetech and Dynamixel), offsets recovered vs hidden; commanded poses and the
   scripted reach controller with the default calibration (the baseline) vs the recovered one.

Results go to --out (default docs/bench/sim2real/): results.md (command at the top) and
results.json. Timing figures depend on the machine's load.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from robolearn.bench.sim2real_calibration import REACH, _log, calibrate_section, stops_section
from robolearn.bench.sim2real_report import markdown


# ------------------------------------------------------------------ 1. scripted controller
def scripted_section(episodes: int, hz: float, seed: int) -> list[dict]:
    import gymnasium as gym

    from robolearn.drivers.emulation import start_emulator
    from robolearn.registry import register_all
    from robolearn.runtime.sim_fit import Recorded, Replayer, tracked
    from robolearn.sim.arm_workspace import REACH_RADIUS
    from robolearn.tasks.scripted import make_scripted

    register_all()
    rows = []
    for name in ("sim", "no-gap", "mild", "hard"):
        reality = {"sim": None, "no-gap": None}.get(name, name)
        robot = start_emulator("arm", reality=reality, cameras=False) if name != "sim" else None
        kw = dict(backend="real", port=robot.port) if robot else {}
        env = gym.make(REACH, obs="state", control_hz=hz, **kw)
        recs, success, true_success, true_dist, steps = [], [], [], [], []
        t0 = time.monotonic()
        try:
            ctrl = make_scripted(env)
            for ep in range(episodes):
                obs, _ = env.reset(seed=seed + ep)
                ctrl.reset()
                states, actions = [obs["state"].copy()], []
                while True:
                    a = ctrl.act(obs)
                    obs, _, term, trunc, info = env.step(a)
                    states.append(obs["state"].copy())
                    actions.append(np.asarray(a, np.float32))
                    if term or trunc:
                        break
                task = env.unwrapped.task
                q_true = (robot.emulator.plant.true_positions()[:5] if robot else
                          np.asarray(task.sim.read().q))
                d = float(np.linalg.norm(task.kin.fk(q_true) - task.goal))
                success.append(bool(info["success"]))
                true_success.append(d < REACH_RADIUS)
                true_dist.append(d)
                steps.append(len(actions))
                recs.append(Recorded(seed=seed + ep, state=np.asarray(states), action=np.asarray(actions)))
        finally:
            env.close()
            if robot:
                robot.close()
        wall = time.monotonic() - t0
        rep = Replayer(REACH, hz, recs, env_kwargs={"action_mode": "ee_delta"})
        errs = [float(np.sqrt(np.mean((rep.rollout({}, r) - tracked("arm", r.state)) ** 2))) for r in recs]
        row = {"condition": name, "episodes": episodes, "success_rate": float(np.mean(success)),
               "true_success_rate": float(np.mean(true_success)),
               "true_final_distance_m": float(np.mean(true_dist)), "mean_steps": float(np.mean(steps)),
               "trajectory_error_rad": float(np.mean(errs)), "wall_s": wall}
        _log(f"scripted {name}: {row}")
        rows.append(row)
    floor = rows[1]["trajectory_error_rad"]       # the real loop with no physics gap
    for r in rows:
        r["trajectory_error_vs_no_gap"] = r["trajectory_error_rad"] / max(floor, 1e-9)
    return rows


# --------------------------------------------------------------------------- 2. camera path
def camera_section(seconds: float) -> dict:
    import cv2

    from robolearn.drivers.camera import OpenCVCamera
    from robolearn.drivers.emulation import start_emulator
    from robolearn.drivers.mjpeg_server import MjpegServer

    out: dict = {}
    # (a) the emulator's rendered camera through OpenCVCamera at 84x84
    with start_emulator("arm", reality="mild") as robot:
        cam = OpenCVCamera(robot.camera_urls["front"], name="front", image_size=(84, 84))
        try:
            frame = cam.read()
            time.sleep(0.5)
            f0, r0, t0 = cam.frames, robot.streamer.frames, time.monotonic()
            time.sleep(seconds)
            frame = cam.read()
            dt = time.monotonic() - t0
            got, rendered = cam.frames - f0, robot.streamer.frames - r0
        finally:
            cam.close()
    out["emulator_stream"] = {"image": list(frame.image.shape), "seconds": dt,
                              "frames_per_s": got / dt, "rendered_per_s": rendered / dt,
                              "received_vs_rendered": got / max(rendered, 1),
                              "render_fps_setting": robot.reality.camera.fps}
    _log(f"camera stream: {out['emulator_stream']}")

    # (b) capture latency on a synthetic stream whose grey level identifies each frame
    server = MjpegServer(["lat"])
    published: dict[int, float] = {}
    stop = threading.Event()
    levels = list(range(20, 240, 8))           # 28 distinct grey levels, reused cyclically

    def produce():
        k = 0
        while not stop.wait(1 / 30):
            g = levels[k % len(levels)]
            published[g] = time.monotonic()
            server.publish("lat", np.full((84, 84, 3), g, np.uint8))
            k += 1

    th = threading.Thread(target=produce, daemon=True)
    th.start()
    cam = OpenCVCamera(server.url("lat"), name="lat", image_size=(84, 84))
    lat = []
    try:
        cam.read()
        last, t_end = None, time.monotonic() + seconds
        while time.monotonic() < t_end:
            f = cam.read()
            if f.stamp != last:
                last = f.stamp
                g = int(round(float(f.image.mean())))
                near = min(published, key=lambda x: abs(x - g))
                if abs(near - g) <= 2:
                    lat.append(f.stamp - published[near])
            time.sleep(0.001)
    finally:
        cam.close()
        stop.set()
        th.join()
        server.close()
    img = np.full((84, 84, 3), 128, np.uint8)
    n, t0 = 200, time.perf_counter()
    for _ in range(n):
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        cv2.imdecode(buf, cv2.IMREAD_COLOR)
    floor = (time.perf_counter() - t0) / n
    lat_ms = np.asarray(lat) * 1e3
    out["capture_latency"] = {"frames": int(lat_ms.size), "p50_ms": float(np.percentile(lat_ms, 50)),
                              "p90_ms": float(np.percentile(lat_ms, 90)),
                              "encode_decode_floor_ms": floor * 1e3,
                              "p50_vs_floor": float(np.percentile(lat_ms, 50)) / (floor * 1e3)}
    _log(f"capture latency: {out['capture_latency']}")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    parser = argparse.ArgumentParser(prog="robolearn bench sim2real", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10, help="scripted episodes per condition")
    parser.add_argument("--calib-episodes", type=int, default=10, help="excitation episodes for calibrate-sim")
    parser.add_argument("--calib-steps", type=int, default=40, help="steps per excitation episode")
    parser.add_argument("--budget", type=int, default=600, help="calibrate-sim evaluations, arm (CMA-ES)")
    parser.add_argument("--car-budget", type=int, default=200, help="calibrate-sim evaluations, car")
    parser.add_argument("--car-steps", type=int, default=30, help="steps per car excitation episode")
    parser.add_argument("--camera-seconds", type=float, default=5.0, help="window of each camera measurement")
    parser.add_argument("--sections", default="scripted,camera,calibrate",
                        help="comma-separated subset of scripted, camera, calibrate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="docs/bench/sim2real", help="folder for results.md / results.json")
    args = parser.parse_args(argv)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    bad = sections - {"scripted", "camera", "calibrate", "calibrate-arm", "stops"}
    if bad:
        from robolearn.errors import ConfigError
        raise ConfigError(f"--sections: unknown {sorted(bad)}; choose from scripted, camera, calibrate, "
                          "calibrate-arm (the arm's calibrate-sim fit alone), stops (robolearn calibrate-arm)")
    import os
    import platform

    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    r: dict = {"command": "robolearn bench sim2real " + " ".join(argv),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs"}
    if "scripted" in sections:
        r["scripted"] = scripted_section(args.episodes, 10.0, args.seed)
    if "camera" in sections:
        r["camera"] = camera_section(args.camera_seconds)
    if "stops" in sections:
        tmp = Path(tempfile.mkdtemp(prefix="sim2real-stops-"))
        try:
            r["stops"] = stops_section(args.episodes, args.seed, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if sections & {"calibrate", "calibrate-arm"}:
        tmp = Path(tempfile.mkdtemp(prefix="sim2real-"))
        try:
            r["calibrate"] = [
                calibrate_section("arm", args.calib_episodes, args.calib_steps, args.budget, args.seed, tmp)]
            if "calibrate" in sections:
                r["calibrate"].append(calibrate_section("car", args.calib_episodes, args.car_steps,
                                                        args.car_budget, args.seed, tmp))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(r, indent=2))
    (out / "results.md").write_text(markdown(r, argv))
    print(markdown(r, argv))
    _log(f"wrote {out}/results.md, results.json")
    return 0
