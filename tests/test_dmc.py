"""dm_control suite adapter: IDs, the env contract, determinism, action repeat, errors."""
import io
from contextlib import redirect_stdout

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import robolearn  # noqa: F401  (registers the IDs)
from robolearn.errors import ConfigError, EnvClosedError, InvalidActionError
from robolearn.sim.dmc import DMC_TASKS, DmcEnv, env_id

pytestmark = pytest.mark.filterwarnings("ignore:.*observation space (minimum|maximum) value is")

CHECKED = ["cheetah-run", "walker-walk", "cartpole-swingup", "ball_in_cup-catch", "quadruped-walk",
           "lqr-lqr_2_1"]


def make(name, **kw):
    return gym.make(f"robolearn/dmc-{name}-v0", **kw)


def rollout(env, actions, seed):
    obs, _ = env.reset(seed=seed)
    states, rewards = [obs["state"]], []
    for a in actions:
        obs, r, *_ = env.step(a)
        states.append(obs["state"])
        rewards.append(r)
    return np.array(states), np.array(rewards)


def test_static_list_matches_the_suite():
    from dm_control import suite

    assert sorted(DMC_TASKS) == sorted(suite.ALL_TASKS)
    assert len(set(DMC_TASKS)) == len(DMC_TASKS)


def test_registration_does_not_import_dm_control():
    """`import robolearn` must stay fast: the suite (0.7 s) loads only when an env is made."""
    import subprocess
    import sys

    code = "import sys, robolearn; robolearn.registered_ids(); print('dm_control' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_every_suite_task_is_listed_by_robolearn_envs():
    from robolearn.cli import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["envs"]) == 0
    listed = set(buf.getvalue().split())
    assert "robolearn/dmc-cheetah-run-v0" in listed
    assert "robolearn/dmc-ball_in_cup-catch-v0" in listed
    for domain, task in DMC_TASKS:
        assert env_id(domain, task) in listed


@pytest.mark.parametrize("name", CHECKED)
def test_check_env_state(name):
    env = make(name)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.unwrapped.observation_space["state"].dtype == np.float32
    env.close()


def test_check_env_pixels_and_both():
    env = make("cheetah-run", obs="pixels", image_size=(48, 64))
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"pixels"} and obs["pixels"].shape == (48, 64, 3) and obs["pixels"].dtype == np.uint8
    assert obs["pixels"].std() > 5, "the rendered frame is blank"
    env.close()
    env = make("walker-walk", obs="both", render_mode="rgb_array")
    obs, info = env.reset(seed=0)
    assert set(obs) == {"state", "pixels"} and obs["pixels"].shape == (84, 84, 3)
    frame = env.render()
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
    env.close()


def test_contract_info_and_metadata():
    env = make("walker-walk")
    assert env.metadata["control_hz"] == pytest.approx(40.0)
    obs, info = env.reset(seed=0)
    assert info["success"] is False and info["overrun"] == 0.0 and info["t_obs"] == 0.0
    obs, r, term, trunc, info = env.step(np.zeros(6))
    assert info["success"] is False and info["overrun"] == 0.0
    assert info["t_obs"] == pytest.approx(0.025)
    sim = env.unwrapped.sim
    assert isinstance(sim.model, mujoco.MjModel) and isinstance(sim.data, mujoco.MjData)
    assert sim.n_substeps == 10
    assert sim.render(32, 40).shape == (32, 40, 3)
    env.close()


def test_same_seed_same_actions_identical_and_seeds_differ():
    actions = np.random.default_rng(0).uniform(-1, 1, size=(40, 6))
    a, b = make("cheetah-run"), make("cheetah-run")
    sa, ra = rollout(a, actions, seed=7)
    sb, rb = rollout(b, actions, seed=7)
    np.testing.assert_array_equal(sa, sb)
    np.testing.assert_array_equal(ra, rb)
    sc, _ = rollout(b, actions, seed=8)
    assert not np.array_equal(sa[0], sc[0]), "a different seed must give a different initial state"
    # reseeding the same instance replays the episode
    sd, _ = rollout(a, actions, seed=7)
    np.testing.assert_array_equal(sa, sd)


def test_action_repeat_equals_repeated_steps():
    actions = np.random.default_rng(1).uniform(-1, 1, size=(10, 6))
    one, four = make("walker-walk"), make("walker-walk", action_repeat=4)
    assert four.metadata["control_hz"] == pytest.approx(10.0)
    assert four.spec.max_episode_steps == 250 and one.spec.max_episode_steps == 1000
    assert four.unwrapped.sim.n_substeps == 40
    o1, _ = one.reset(seed=3)
    o4, _ = four.reset(seed=3)
    for a in actions:
        total = 0.0
        for _ in range(4):
            o1, r, *_ = one.step(a)
            total += r
        o4, r4, *_ = four.step(a)
        np.testing.assert_array_equal(o1["state"], o4["state"])
        assert r4 == pytest.approx(total, abs=1e-12)


@pytest.mark.parametrize("repeat,steps", [(1, 1000), (8, 125)])
def test_truncates_at_the_suite_time_limit(repeat, steps):
    env = make("cheetah-run", action_repeat=repeat)
    env.reset(seed=0)
    zero = np.zeros(6)
    for t in range(1, steps + 1):
        _, _, term, trunc, info = env.step(zero)
        assert not term
        assert trunc == (t == steps)
    assert info["t_obs"] == pytest.approx(10.0)
    with pytest.raises(gym.error.ResetNeeded):
        env.unwrapped.step(zero)
    env.close()


def test_success_is_the_goal_indicator():
    env = make("reacher-easy")
    env.reset(seed=0)
    _, r, _, _, info = env.step(np.zeros(2))
    assert info["success"] == (r >= 1.0)
    physics = env.unwrapped.sim.physics
    # move the target onto the finger: the task's goal is reached
    physics.named.model.geom_pos["target", :2] = physics.named.data.geom_xpos["finger", :2]
    _, r, _, _, info = env.step(np.zeros(2))
    assert r == 1.0 and info["success"] is True
    env.close()
    other = make("cheetah-run")  # no goal in this task: never a success
    other.reset(seed=0)
    assert all(other.step(np.ones(6))[4]["success"] is False for _ in range(20))
    other.close()


def test_n_substeps_is_honoured():
    env = make("cheetah-run")
    env.reset(seed=0)
    sim = env.unwrapped.sim
    t0 = sim.data.time
    sim.n_substeps = 3
    env.step(np.zeros(6))
    assert sim.data.time == pytest.approx(t0 + 3 * sim.model.opt.timestep)


def test_bad_actions_raise():
    env = make("cheetah-run")
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match="NaN"):
        env.step(np.full(6, np.nan))
    with pytest.raises(InvalidActionError, match="shape"):
        env.step(np.zeros(5))
    with pytest.raises(InvalidActionError, match="out of range"):
        env.step(np.full(6, 1.5))


@pytest.mark.parametrize("kwargs,match", [
    (dict(domain="cheetah", task="fly"), "cheetah-run"),
    (dict(domain="cheetah", task="run", obs="rgb"), "obs="),
    (dict(domain="cheetah", task="run", action_repeat=0), "action_repeat"),
    (dict(domain="cheetah", task="run", action_repeat=2.5), "action_repeat"),
    (dict(domain="cheetah", task="run", image_size=(84,)), "image_size"),
    (dict(domain="cheetah", task="run", camera_id=9), "camera_id"),
    (dict(domain="cheetah", task="run", render_mode="human"), "render_mode"),
    (dict(domain="cheetah", task="run", time_limit=-1), "time_limit"),
    (dict(domain="cheetah", task="run", action_repeats=2), "unknown option"),
])
def test_bad_kwargs_raise_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        DmcEnv(**kwargs)


def test_closed_env_raises():
    env = make("cartpole-balance")
    env.reset(seed=0)
    env.close()
    with pytest.raises(EnvClosedError):
        env.unwrapped.reset(seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("domain,task", DMC_TASKS)
def test_check_env_every_suite_task(domain, task):
    env = gym.make(env_id(domain, task))
    check_env(env.unwrapped, skip_render_check=True)
    env.close()
