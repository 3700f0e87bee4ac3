"""`--profile cpu`: a named, visible lightening of the high-UTD presets (never a silent change)."""
import pytest

from robolearn.errors import ConfigError
from robolearn.policies.registry import PROFILES, profile_overrides
from robolearn.policies.train_config import TrainConfig
from robolearn.policies.trainer import Trainer


def _trainer(tmp_path, **kw):
    cfg = TrainConfig(env="robolearn/ArmReach-v0", steps=10, out=str(tmp_path / "r"), eval_every=0,
                      eval_episodes=1, checkpoint_every=0, video=False, progress=False, **kw)
    return Trainer(cfg)


def test_cpu_profile_lightens_rlpd_and_says_so(tmp_path, capsys):
    tr = _trainer(tmp_path, algo="rlpd", profile="cpu")
    try:
        assert (tr.agent.config.num_critics, tr.agent.config.utd) == (2, 5)
        assert "profile cpu: rlpd runs with {'num_critics': 2, 'utd': 5}" in capsys.readouterr().out
        summary = tr.run()
    finally:
        tr.close()
    assert summary["profile"] == "cpu" and summary["profile_options"] == {"num_critics": 2, "utd": 5}


def test_user_options_win_over_the_profile_and_unknown_profiles_are_refused(tmp_path):
    tr = _trainer(tmp_path, algo="rlpd", profile="cpu", utd=3, agent={"num_critics": 4})
    try:
        assert (tr.agent.config.num_critics, tr.agent.config.utd) == (4, 3)
    finally:
        tr.close()
    assert profile_overrides("cpu", "sac") == {} and profile_overrides(None, "rlpd") == {}
    assert set(PROFILES) == {"cpu"}
    with pytest.raises(ConfigError, match="unknown profile 'gpu'"):
        profile_overrides("gpu", "rlpd")
