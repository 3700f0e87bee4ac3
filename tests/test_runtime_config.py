"""Launch TOMLs for the runtime: shipped files load, typos and unsafe settings are refused."""
from pathlib import Path

import pytest

from robolearn.cli import main
from robolearn.errors import ConfigError
from robolearn.runtime.config import config_from_dict, load_launch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["sim_arm_reach_async.toml", "sim_arm_reach_two_actors.toml"])
def test_shipped_launch_files_load(name):
    cfg = load_launch(ROOT / "launch" / name)
    assert cfg.env == "robolearn/ArmReach-v0"
    assert cfg.actors == (2 if "two" in name else 1)


def test_unknown_keys_named():
    with pytest.raises(ConfigError, match=r"'publish_evry' \(did you mean 'publish_every'\?\)"):
        config_from_dict({"learner": {"publish_evry": 3}})
    with pytest.raises(ConfigError, match="'colour'"):
        config_from_dict({"colour": "red"})
    with pytest.raises(ConfigError, match="on_learner_lost"):
        config_from_dict({"actor": {"on_learner_lost": "panic"}})


def test_exposed_learner_needs_keys():
    with pytest.raises(ConfigError, match="keygen"):
        config_from_dict({"learner": {"host": "0.0.0.0"}})
    assert config_from_dict({"learner": {"host": "0.0.0.0"}, "keys": "k"}).keys == "k"


def test_cli_reports_missing_launch_file(tmp_path, capsys):
    assert main(["launch", str(tmp_path / "nope.toml")]) == 2
    assert "not found" in capsys.readouterr().err
