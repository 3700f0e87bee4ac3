"""Interventions: an engaged device overrides the policy and the steps are flagged for the learner."""
import argparse
import os
import time

import numpy as np
import pytest

from robolearn.teleop import make_device
from robolearn.teleop.intervention import InterventionWrapper, add_intervene_argument, maybe_intervene
from robolearn.teleop.keyboard import KeyboardConfig, KeyboardDevice
from robolearn.teleop.session import open_env

ENV_ID = "robolearn/ArmReach-v0"


def test_keyboard_takeover_replaces_policy_action(term):
    master, slave = term
    env = InterventionWrapper(open_env(ENV_ID, "state"),
                              KeyboardDevice(4, KeyboardConfig(fd=slave, absolute_dims=(3,), hold_s=0.3)))
    policy = np.array([0.0, 0.0, -0.4, 1.0], np.float32)
    obs, info = env.reset(seed=1)
    assert info["intervention"] is False
    _, _, _, _, info = env.step(policy)
    assert info["intervention"] is False
    np.testing.assert_array_equal(info["intervention_action"], policy)

    os.write(master, b"w")                                   # human pushes +x
    time.sleep(0.05)
    x0 = env.unwrapped.task.ee_cmd[0]
    _, _, _, _, info = env.step(policy)
    assert info["intervention"] is True
    np.testing.assert_allclose(info["intervention_action"], [0.5, 0, 0, 1])
    assert env.unwrapped.task.ee_cmd[0] == pytest.approx(x0 + 0.5 * 0.025)  # the human's action ran
    time.sleep(0.35)                                         # key released -> policy again
    _, _, _, _, info = env.step(policy)
    assert info["intervention"] is False and env.interventions == 1

    os.write(master, b" ")                                   # latch takeover: hold still
    time.sleep(0.05)
    _, _, _, _, info = env.step(policy)
    assert info["intervention"] is True
    np.testing.assert_allclose(info["intervention_action"], [0, 0, 0, 1])

    os.write(master, b"\r")                                  # human labels success
    time.sleep(0.05)
    _, _, terminated, truncated, info = env.step(policy)
    assert terminated and info["success"] and info["human_label"] == "success"
    assert info["teleop_events"] == ["success"]
    env.reset(seed=2)
    os.write(master, b"\x1b")
    time.sleep(0.05)
    _, _, _, truncated, info = env.step(policy)
    assert truncated and env.quit_requested
    env.close()


def test_scripted_intervener_solves_task_despite_bad_policy():
    env = maybe_intervene(open_env(ENV_ID, "state"), "scripted")
    assert isinstance(env, InterventionWrapper)
    obs, _ = env.reset(seed=3)
    bad = np.array([-1, -1, -1, -1], np.float32)
    for _ in range(50):
        obs, _, terminated, truncated, info = env.step(bad)
        assert info["intervention"] and not np.array_equal(info["intervention_action"], bad)
        if terminated or truncated:
            break
    assert info["success"]
    env.close()


def test_hook_and_runtime_loop_store_intervention_action():
    from robolearn.data.replay import ReplayBuffer
    from robolearn.runtime.loop import ControlLoop

    parser = argparse.ArgumentParser()
    add_intervene_argument(parser)
    assert parser.parse_args([]).intervene is None
    args = parser.parse_args(["--intervene", "scripted"])
    base = open_env(ENV_ID, "state")
    assert maybe_intervene(base, parser.parse_args([])) is base
    env = maybe_intervene(base, args)
    with pytest.raises(SystemExit):
        parser.parse_args(["--intervene", "joystick9"])

    buf = ReplayBuffer(env.observation_space, env.action_space, capacity=200)
    stored = []

    def on_step(tr):
        info = tr["info"]
        stored.append((tr["action"], info["intervention"], info["intervention_action"]))
        buf.add(tr["obs"], tr["action"], tr["reward"], tr["next_obs"], tr["terminated"], tr["truncated"],
                intervention=info["intervention"])

    zero = np.zeros(4, np.float32)
    loop = ControlLoop(env, lambda: (lambda obs: zero), hz=0, on_step=on_step, seed=0)
    loop.run(max_ticks=15)
    env.close()
    assert stored and all(flag for _, flag, _ in stored)
    for action, _, applied in stored:      # the learner gets the action that was applied
        np.testing.assert_array_equal(action, applied)
    assert any(not np.allclose(a, zero) for a, _, _ in stored)
    assert buf.sample(8).intervention.all()


def test_make_device_errors():
    from robolearn.errors import ConfigError
    from robolearn.teleop.base import DeviceNotFoundError

    env = open_env(ENV_ID, "state")
    with pytest.raises(ConfigError, match="unknown device"):
        make_device("joystick9", env)
    with pytest.raises(ConfigError, match="no option"):
        make_device("scripted", env, sped=1)
    with pytest.raises(DeviceNotFoundError, match="serial port"):
        make_device("leader", env)
    env.close()


def test_train_and_eval_take_intervene_option(tmp_path):
    """`robolearn train/eval --intervene scripted`: the device drives, the replay flags every step."""
    import json
    import subprocess
    import sys

    def cli(*argv):
        env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
        r = subprocess.run([sys.executable, "-m", "robolearn.cli", *argv], capture_output=True, text=True,
                           timeout=300, env=env)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        return r.stdout

    run = tmp_path / "run"
    cli("train", "--env", ENV_ID, "--algo", "sac", "--steps", "30", "--learning-starts", "10", "--intervene",
        "scripted", "--out", str(run), "--no-video", "--no-progress", "--eval-episodes", "1")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] >= 4          # the scripted takeover reaches the target in a few steps
    replay = next((run / "checkpoints").glob("step_*")) / "replay"
    valid = np.load(replay / "valid.npy", allow_pickle=False)
    flags = np.load(replay / "intervention.npy", allow_pickle=False)
    assert valid.sum() > 10 and flags[valid].all()

    def success(*extra):
        out = cli("eval", "--checkpoint", str(run), "--episodes", "2", *extra)
        return json.loads(out[out.index("{"):])["success_rate"]

    assert success("--intervene", "scripted") == 1.0
