"""The [reality_gap] table of a launch file reaches the env that train and launch build."""
import pytest

from robolearn.errors import ConfigError
from robolearn.policies.train_config import load_launch
from robolearn.policies.env_building import make_env
from robolearn.runtime.config import load_launch as load_async_launch

LAUNCH = "launch/reality_gap_arm.toml"


def test_train_launch_file_applies_the_reality_gap():
    cfg = load_launch(LAUNCH)
    assert cfg.reality_gap["latency"]["steps"] == 1
    env = make_env(cfg.env, cfg.obs, None, cfg.max_episode_steps, cfg.env_kwargs, cfg.reality_gap)
    _, info = env.reset(seed=3)
    first = info["randomization"]
    _, info = env.reset(seed=4)
    assert info["randomization"]["latency_steps"] == 1
    assert list(info["randomization"]["mass_scale"]) != list(first["mass_scale"])
    env.close()


def test_async_launch_config_accepts_the_table(tmp_path):
    path = tmp_path / "rg.toml"
    path.write_text('env = "robolearn/ArmReach-v0"\n[reality_gap.latency]\nsteps = 2\n')
    assert load_async_launch(path).reality_gap == {"latency": {"steps": 2}}


def test_bad_reality_gap_key_names_it():
    with pytest.raises(ConfigError, match="mass_scal"):
        make_env("robolearn/ArmReach-v0", reality_gap={"randomization": {"mass_scal": [0.9, 1.1]}})
