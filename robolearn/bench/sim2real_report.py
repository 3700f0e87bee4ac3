"""results.md of `robolearn bench sim2real`: the measured results dict as Markdown tables and text."""
from __future__ import annotations


def markdown(r: dict, argv: list[str]) -> str:
    lines = ["# sim2real benchmark", "", f"Command: `robolearn bench sim2real {' '.join(argv)}`", "",
             f"Measured {r['date']} on {r['machine']}. Timings depend on load (pessimistic on a shared CPU).", ""]
    if "scripted" in r:
        lines += ["## Scripted controller: sim vs emulated realities (ArmReach, real driver stack)", "",
                  "| condition | episodes | success (env) | true success | true final distance (m) | steps | "
                  "trajectory error vs nominal sim (rad) | x no-gap |", "|---|---|---|---|---|---|---|---|"]
        for row in r["scripted"]:
            lines.append(f"| {row['condition']} | {row['episodes']} | {row['success_rate']:.2f} | "
                         f"{row['true_success_rate']:.2f} | {row['true_final_distance_m']:.4f} | "
                         f"{row['mean_steps']:.1f} | {row['trajectory_error_rad']:.4f} | "
                         f"{row['trajectory_error_vs_no_gap']:.2f} |")
        lines += ["", "Success (env) is what the robot believes (measured joints + kinematics); true success "
                  "uses the emulator's true joint angles (the calibration offsets of a reality fool the "
                  "first). Trajectory error replays each episode's actions in the nominal sim from the "
                  "same start; `no-gap` is the emulator without a reality file (the real loop's timing "
                  "alone), the baseline of the last column; `sim` replays itself (0 by determinism).", ""]
    if "camera" in r:
        s, c = r["camera"]["emulator_stream"], r["camera"]["capture_latency"]
        lines += ["## HTTP camera through OpenCVCamera", "",
                  f"- emulator MJPEG stream at {s['image'][1]}x{s['image'][0]}: **{s['frames_per_s']:.1f} frames/s** "
                  f"received vs {s['rendered_per_s']:.1f} rendered/s in the same {s['seconds']:.1f} s "
                  f"(ratio {s['received_vs_rendered']:.2f}; render setting {s['render_fps_setting']:g} fps)",
                  f"- capture latency (publish -> frame in `read()`), synthetic 84x84 stream: p50 "
                  f"**{c['p50_ms']:.1f} ms**, p90 {c['p90_ms']:.1f} ms over {c['frames']} frames; in-process "
                  f"JPEG encode+decode floor {c['encode_decode_floor_ms']:.2f} ms (p50 = {c['p50_vs_floor']:.0f}x floor)", ""]
    if "stops" in r:
        st = r["stops"]
        lines += ["## Stop calibration on the hard reality (`robolearn calibrate-arm`)", "",
                  "Each joint driven slowly into one mechanical stop (the MJCF joint range, in true "
                  "coordinates in the emulator), stall detected from the present position, offset = "
                  "reading at the stop - stop angle. The hidden offsets are the reality file's; the "
                  "procedure sees only the servo bus.", "",
                  "| joint | hidden offset (rad) | Feetech: recovered | error | Dynamixel: recovered | error |",
                  "|---|---|---|---|---|---|"]
        for name, f in st["feetech"]["joints"].items():
            d = st["dynamixel"]["joints"][name]
            lines.append(f"| {name} | {f['hidden']:+.3f} | {f['recovered']:+.4f} | {f['error']:+.4f} | "
                         f"{d['recovered']:+.4f} | {d['error']:+.4f} |")
        fe, dx = st["feetech"], st["dynamixel"]
        lines += ["", f"Largest error: Feetech {fe['max_abs_error_rad']:.4f} rad, Dynamixel "
                  f"{dx['max_abs_error_rad']:.4f} rad (one tick = 0.0015 rad); the whole procedure took "
                  f"{fe['wall_s']:.0f} s / {dx['wall_s']:.0f} s.", "",
                  "| Feetech arm, hard reality | uncalibrated (horns assumed at the centre tick) | "
                  "stop-calibrated |", "|---|---|---|"]
        cu, cc = fe["commanded"]["uncalibrated"], fe["commanded"]["calibrated"]
        su, sc = fe["scripted"]["uncalibrated"], fe["scripted"]["calibrated"]
        lines += [f"| commanded poses ({cu['goals']}): believed vs true gripper position (mm) | "
                  f"{cu['belief_error_mm']:.1f} | {cc['belief_error_mm']:.1f} |",
                  f"| commanded poses: true gripper vs goal (mm) | {cu['true_reach_error_mm']:.1f} | "
                  f"{cc['true_reach_error_mm']:.1f} |",
                  f"| scripted reach ({su['episodes']} episodes): success believed | {su['success_rate']:.2f} | "
                  f"{sc['success_rate']:.2f} |",
                  f"| scripted reach: TRUE success | {su['true_success_rate']:.2f} | {sc['true_success_rate']:.2f} |",
                  f"| scripted reach: true final distance (m) | {su['true_final_distance_m']:.4f} | "
                  f"{sc['true_final_distance_m']:.4f} |", "",
                  "What is left of a commanded pose's error with the calibration is the hard reality's "
                  "soft servos sagging under gravity (half the gain, 1.4x the link mass): closed-loop "
                  "control on the measured joints removes it, calibration cannot and need not.", ""]
    for c in r.get("calibrate", []):
        unit = "rad (joint angles)" if c["robot"] == "arm" else "(speed m/s and yaw rate rad/s)"
        lines += [f"## calibrate-sim on the hard reality: {c['robot']}", "",
                  f"{c['episodes']} excitation episodes x {c['steps_per_episode']} steps recorded through "
                  f"the real driver stack; fit over {', '.join(c['fitted_params'])} "
                  f"({c['evaluations']} evaluations, {c['fit_s']:.0f} s).", "",
                  "| parameter | hidden | target | fitted | relative error | within 15% |", "|---|---|---|---|---|---|"]
        for k, p in c["params"].items():
            lines.append(f"| {k} | {p['hidden']:.4g} | {p['target']:.4g} | {p['fitted']:.4g} | "
                         f"{100 * p['relative_error']:.1f}% | {'yes' if p['within_15pct'] else 'no'} |")
        lines += ["", f"Target = hidden, except latency: hidden + the host loop's own latency "
                  f"({c['host_loop_latency_ms']:.1f} ms, fitted on a no-gap recording).", "",
                  f"RMS trajectory error {unit}: **{c['error_before']:.4f} before -> "
                  f"{c['error_after']:.4f} after ({c['error_ratio']:.1f}x lower)**; for comparison, a recording on the "
                  f"emulator without a reality vs the nominal sim (the real loop with no physics gap): "
                  f"{c['nogap_error']:.4f}.", ""]
        if "home_start_replay" in c:
            h = c["home_start_replay"]
            lines += [f"Most of that no-gap error is how the servos track a new goal, not timing: with "
                      f"their re-planning rate fitted on the no-gap recording ({c['nogap_servo_rate_hz']:.0f} Hz; "
                      f"the training sim re-plans once per control period, spreading a small move over "
                      f"it) it is {c['nogap_error_servo_rate_fitted']:.4f}. The hard reality's servos are "
                      "speed-limited on these moves, where the rate does not matter, so the default fit "
                      "leaves it out (`--params ...,servo_rate_hz` fits it).", "",
                      "The replay starts each episode as the hardware did (the commanded pose from the "
                      "measured start state, `start_episode`). Under the previous replay (targets "
                      "integrated from the sim's home pose, so a sagging arm's start biased every target), "
                      f"the same fit scores {h['error_before']:.4f} before -> {h['error_after']:.4f} after "
                      f"({h['error_ratio']:.2f}x).", ""]
    return "\n".join(lines)
