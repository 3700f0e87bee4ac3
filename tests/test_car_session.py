"""The car's fine-tuning session (issue 24): camera encoder targets, the emulated gamepad
operator, the reset prompt of the emulated car, the session's report, and a short session on
the emulated hard car end to end (slow)."""
import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from robolearn.errors import ConfigError
from robolearn.registry import register_all

register_all()


# ------------------------------------------------------------------- the gamepad operator
def test_operator_sticks_go_through_the_gamepad_mapping():
    """The operator's thumbs become raw evdev axis values, which the gamepad's own mapping turns
    into the car's action (signs, range, dead zone): what a real pad sends, not the action."""
    from robolearn.teleop.car_operator import CAR_AXES, STICK_RANGE, stick_value
    from robolearn.teleop.gamepad import GamepadConfig, GamepadState

    pad = GamepadState(2, GamepadConfig(axes=CAR_AXES), {a.lstrip("-"): STICK_RANGE for a in CAR_AXES})
    for steer, throttle in ((0.5, 0.8), (-0.7, -0.3), (1.0, -1.0)):
        pad.apply("EV_ABS", "ABS_X", stick_value(-steer))
        pad.apply("EV_ABS", "ABS_RY", stick_value(-throttle))
        np.testing.assert_allclose(pad.command().action, [steer, throttle], atol=1e-3)
    pad.apply("EV_ABS", "ABS_X", stick_value(-0.05))          # inside the dead zone
    assert pad.command().action[0] == 0.0
    assert not pad.command().engaged
    pad.apply("EV_KEY", "BTN_TL", 1)
    assert pad.command().engaged


def test_car_operator_needs_the_truth_url():
    env = gym.make("robolearn/CarLap-v0")
    try:
        from robolearn.teleop import make_device

        with pytest.raises(ConfigError, match="truth URL"):
            make_device("car_operator", env)
    finally:
        env.close()


def test_car_prompt_retries_then_continues():
    from robolearn.resets.prompt import CONTINUE, RETRY
    from robolearn.teleop.operator import make_prompt

    p = make_prompt("operator:car")
    assert [p.ask("recovery failed") for _ in range(4)] == [RETRY, RETRY, CONTINUE, RETRY]
    assert p.asked == 4


def test_car_operator_drives_demo_laps_on_the_emulated_hard_car():
    """Through the gamepad path, seeing the true car 0.2 s late: two laps, then "success"."""
    from robolearn.drivers.emulation import start_emulator
    from robolearn.teleop import make_device

    with start_emulator("car", reality="hard", cameras=True, seed=1) as robot:
        env = gym.make("robolearn/CarLap-v0", backend="real", port=robot.port, tracker=robot.tracker_url,
                       max_episode_steps=900)
        try:
            dev = make_device("car_operator", env, truth_url=robot.truth_url, seed=1)
            obs, _ = env.reset(seed=1)
            dev.reset()
            for _ in range(900):
                cmd = dev.read(obs)
                assert cmd.engaged
                obs, _, term, trunc, info = env.step(cmd.action)
                dev.observe(info)
                if cmd.events or term or trunc:
                    break
            assert cmd.events == {"success"}
            assert info["laps"] >= 2 and info["best_lap_time"] < 14.0
            assert env.unwrapped.teleport_count() == 0
        finally:
            env.close()


# ------------------------------------------------------------------------- the report
def test_episode_curve_counts_collisions_per_lap_of_distance():
    from robolearn.runtime.finetune_car import episode_curve

    L = 10.0
    eps = [{"steps": 100, "collisions": 2, "progress": 5.0, "progress_start": -5.0, "laps": 0},
           {"steps": 100, "collisions": 1, "progress": 15.0, "progress_start": -5.0, "laps": 1},
           {"steps": 200, "collisions": 0, "progress": 30.0, "progress_start": -10.0, "laps": 3,
            "practice_trigger": "no_progress"}]
    c = episode_curve(eps, 20.0, L)
    assert c["robot_time_s"] == [5.0, 10.0, 20.0]
    assert c["training_laps_driven"] == 7.0 and c["training_collisions"] == 3
    # windows of >= 2 laps of distance: 3 laps (3 collisions), then 4 laps (none)
    assert [w["collisions_per_lap"] for w in c["collisions_per_lap_curve"]] == [1.0, 0.0]
    assert c["practice_triggers"] == {"collision": 0, "no_progress": 1}


def test_car_only_finetune_options_are_checked():
    from robolearn.runtime.config import LaunchConfig, FinetuneConfig

    with pytest.raises(ConfigError, match="demo_episodes"):
        LaunchConfig(env="robolearn/ArmReach-v0",
                     finetune=FinetuneConfig(checkpoint="x", demo_episodes=2)).validate()
    with pytest.raises(ConfigError, match="demo_episodes >= 1"):
        LaunchConfig(env="robolearn/CarLap-v0",
                     finetune=FinetuneConfig(checkpoint="x", warm_start="rlpd", prior_data="demos")).validate()


def test_shipped_car_session_keeps_the_loaded_actor_and_the_robot_time_budget():
    """The launch file's learner options are valid agent options, the actor waits for the fresh
    critic for a small part of the session, and the driving fits 20 min of robot time with the
    recoveries (session 1: 67 s of recoveries per 600 s of driving)."""
    from pathlib import Path

    from robolearn.policies.agent_config import AgentConfig
    from robolearn.runtime.config import load_launch

    cfg = load_launch(Path(__file__).resolve().parents[1] / "launch" / "finetune_car_lap_real.toml")
    agent = AgentConfig(**cfg.learner.agent).validate()
    steps = cfg.learner.total_env_steps
    assert agent.privileged == "none" and cfg.finetune.load == "policy"
    assert 0 < agent.actor_frozen_updates <= 0.2 * 2 * steps      # utd 2 (the pretrained run's)
    assert agent.init_temperature < AgentConfig.init_temperature
    assert steps / 20.0 * (1 + 67 / 600) <= 20 * 60


# ------------------------------------------------------------------------ the encoder
def test_car_encoder_targets_are_the_track_relative_truth(tmp_path):
    """The car's camera encoder is trained on the sim's track-relative privileged entries and
    appends 6 numbers to the car's 10 sensor entries."""
    from robolearn.policies.env_building import make_env
    from robolearn.policies.perception import collect_frames, train_localiser
    from robolearn.tasks.car import PRIVILEGED_LABELS

    images, targets = collect_frames("robolearn/CarLap-v0", 80, "front", seed=0, keep=0.5)
    assert images.shape == (80, 84, 84, 3) and targets.shape == (80, 6)
    assert np.abs(targets[:, 0]).max() < 1.5 and np.all(np.abs(targets[:, 1:3]) <= 1.0)
    loc, report = train_localiser(images, targets, env_id="robolearn/CarLap-v0", camera="front", epochs=1)
    assert loc.meta["targets"] == list(PRIVILEGED_LABELS) and len(report["heldout_mae_m"]) == 6
    loc.save(tmp_path / "enc")
    env = make_env("robolearn/CarLap-v0", "state", None, 50, {"perception": str(tmp_path / "enc")})
    try:
        obs, _ = env.reset(seed=0)
        assert set(obs) == {"state"} and obs["state"].shape == (16,)
    finally:
        env.close()


# --------------------------------------------------------------------- a whole session
@pytest.mark.slow
def test_finetune_session_on_the_emulated_hard_car(tmp_path):
    """`robolearn finetune` on `emulate car --reality hard`, short budget: the pure-pursuit
    reference on the true pose, one demonstration by the gamepad operator as prior data,
    zero-shot, learner + practising actor, final, and the car's report keys."""
    run = tmp_path / "pre"
    subprocess.run([sys.executable, "-m", "robolearn.cli", "train", "--env", "robolearn/CarLap-v0",
                    "--algo", "sac", "--steps", "200", "--out", str(run), "--learning-starts", "100",
                    "--eval-episodes", "1", "--eval-every", "0", "--no-video", "--no-progress",
                    "--max-episode-steps", "100"], check=True, capture_output=True)
    launch = tmp_path / "ft.toml"
    launch.write_text(f'''env = "robolearn/CarLap-v0"
algo = "sac"
obs = "state"
max_episode_steps = 200
[env_kwargs]
practice = true
[learner]
port = 0
weights_port = 0
total_env_steps = 120
checkpoint_every = 100
[finetune]
checkpoint = "{run}"
warm_start = "rlpd"
prior_data = "demos"
demo_episodes = 1
zero_shot_episodes = 1
final_episodes = 1
reality = "hard"
''')
    out = tmp_path / "session"
    p = subprocess.run([sys.executable, "-m", "robolearn.cli", "finetune", str(launch), "--out", str(out),
                        "--quiet"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads((out / "session_report.json").read_text())
    # the reference: pure pursuit on the emulator's true pose laps the hard car
    assert 6.0 < rep["pure_pursuit_lap_time_s"] < 14.0
    assert rep["teleports"] == 0
    assert rep["demos"]["transitions"] > 200 and rep["demos"]["episodes"] == 1
    assert rep["robot_time_s"] > 0 and isinstance(rep["human_prompts"], int)
    for k in ("zero_shot", "final"):
        assert {"best_lap_time_s", "collisions_per_lap", "laps", "resets"} <= set(rep[k])
        assert rep[k]["env_steps"] <= 200
    assert rep["car"]["robot_time_s"] and len(rep["car"]["collisions"]) == rep["episodes"]
    assert rep["learner_summary"]["env_steps"] >= 120
