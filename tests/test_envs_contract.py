"""Every env ID that `robolearn envs` prints passes Gymnasium's `check_env` (state obs, the
default), so env families added later are covered without touching this file."""
import os
import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env


def _listed_ids() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "robolearn")  # the console script
    cmd = [script, "envs"] if os.path.exists(script) else [sys.executable, "-m", "robolearn.cli", "envs"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"`robolearn envs` failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout.split()


LISTED = _listed_ids()


def test_envs_lists_ids_one_per_line():
    assert LISTED == sorted(set(LISTED)), "IDs must be unique and sorted"
    assert all(i.startswith("robolearn/") for i in LISTED)
    for required in ("robolearn/ArmReach-v0", "robolearn/ArmPush-v0", "robolearn/ArmLift-v0"):
        assert required in LISTED


@pytest.mark.parametrize("env_id", LISTED)
def test_check_env(env_id):
    import robolearn  # noqa: F401  (registers the IDs in this process)

    env = gym.make(env_id)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        assert "control_hz" in env.unwrapped.metadata
        obs, info = env.reset(seed=0)
        assert isinstance(obs, dict) and obs, "observations are dicts"
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        assert isinstance(info.get("success"), bool), "every step's info carries success (bool)"
    finally:
        env.close()


def test_env_control_hz_reads_the_contract_then_a_foreign_envs_render_rate():
    import robolearn  # noqa: F401
    from robolearn.env import env_control_hz

    env = gym.make("robolearn/ArmReach-v0")
    try:
        hz = env.unwrapped.metadata["control_hz"]
        assert env_control_hz(env) == env_control_hz(env, 99.0) == float(hz) > 0
    finally:
        env.close()
    pendulum = gym.make("Pendulum-v1")            # Gymnasium's own: render_fps 30, no control_hz
    assert env_control_hz(pendulum, 10.0) == 30.0
    pendulum.unwrapped.metadata = {"render_modes": []}
    assert env_control_hz(pendulum, 10.0) == 10.0 and env_control_hz(pendulum) is None
    pendulum.close()
