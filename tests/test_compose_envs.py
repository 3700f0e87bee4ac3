"""The composition layer (robolearn/compose/envs.py) turns options into the objects RobotEnv is
made of; RobotEnv itself takes objects only."""
import inspect

import gymnasium as gym
import numpy as np
import pytest

import robolearn  # noqa: F401 - registers the IDs
from robolearn.compose.envs import build_env, make_reset_supervisor
from robolearn.env import RobotEnv
from robolearn.errors import ConfigError
from robolearn.rewards.base import RewardModelError
from robolearn.resets.supervisor import ResetSupervisor
from robolearn.sim.arm import make_arm_sim_backend
from robolearn.tasks.arm import ArmReach


def test_robot_env_takes_objects_only():
    params = set(inspect.signature(RobotEnv.__init__).parameters) - {"self"}
    assert params == {"task", "obs", "render_mode", "reward_source", "render_size", "privileged_obs",
                      "reset_mode", "resets"}
    backend = make_arm_sim_backend(control_hz=10.0, cameras=(), image_size=(16, 16))
    task = ArmReach(backend)
    try:
        with pytest.raises(ConfigError, match="takes a reward-source object.*gymnasium.make"):
            RobotEnv(task, reward_source="models/x")
        with pytest.raises(ConfigError, match="physical.*needs resets="):
            RobotEnv(task, reset_mode="physical")
    finally:
        backend.close()


def test_registered_ids_are_made_by_the_composition_layer():
    spec = gym.spec("robolearn/ArmLift-v0")
    assert spec.entry_point == "robolearn.compose.envs:make_arm_env"
    assert gym.spec("robolearn/CarLap-v0").entry_point == "robolearn.compose.envs:make_car_env"


def test_gym_make_resolves_reset_options_into_objects():
    env = gym.make("robolearn/ArmPush-v0", reset_mode="physical", reset_on_failure="continue",
                   reset_prompt="operator:sim")
    try:
        base = env.unwrapped
        assert base.reset_mode == "physical" and isinstance(base.resets, ResetSupervisor)
        assert type(base.resets.prompt).__name__ == "OperatorPrompt"        # from the string
        assert type(base.task.reset_controller()).__name__ == "PlaceCube"     # from the factory
        _, info = env.reset(seed=0)
        assert info["reset"]["kind"] == "scripted" and info["reset"]["teleports"] == 0
    finally:
        env.close()


def test_a_task_built_without_the_composition_layer_says_how_to_reset_physically():
    backend = make_arm_sim_backend(control_hz=10.0, cameras=(), image_size=(16, 16))
    try:
        with pytest.raises(NotImplementedError, match="gymnasium.make"):
            ArmReach(backend).reset_controller()
    finally:
        backend.close()


def test_build_env_closes_the_backend_when_an_object_cannot_be_built(tmp_path):
    backend = make_arm_sim_backend(control_hz=10.0, cameras=(), image_size=(16, 16))
    closed = []
    real_close = backend.close
    backend.close = lambda: (closed.append(1), real_close())
    with pytest.raises((ConfigError, RewardModelError)):
        build_env(backend, ArmReach, reward_source=str(tmp_path / "no-such-model"))
    assert closed == [1]


def test_reset_supervisor_options():
    backend = make_arm_sim_backend(control_hz=10.0, cameras=(), image_size=(16, 16))
    try:
        sup = make_reset_supervisor(backend, on_failure="raise", timeout=5)
        assert sup.on_failure == "raise" and sup.timeout_s == 5.0 and sup.prompt is None
        with pytest.raises(ConfigError, match="reset_timeout"):
            make_reset_supervisor(backend, on_failure="raise", timeout="soon")
        with pytest.raises(ConfigError, match="reset_on_failure"):
            make_reset_supervisor(backend, on_failure="shrug")
        assert np.isfinite(sup.wall_timeout_s)
    finally:
        backend.close()
