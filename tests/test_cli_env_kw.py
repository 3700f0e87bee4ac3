"""One env-keyword flag on the command line: every verb that makes an env takes
`--env-kw KEY=VALUE` (robolearn/commands/env_kwargs.py), parsed the same way, and the values
reach the env (over a launch file's `[env_kwargs]`, or a run's saved env options)."""
import json

import pytest

from robolearn.cli import build_verb_parser, main
from robolearn.commands.env_kwargs import parse_env_kwargs
from robolearn.errors import ConfigError

REACH = "robolearn/ArmReach-v0"
# the positional arguments each verb needs before its options
ENV_VERBS = {
    "train": [],
    "play": [REACH],
    "eval": ["--checkpoint", "runs/x"],
    "teleop": [REACH],
    "record": [REACH, "--out", "demos/x"],
    "finetune": ["launch/finetune_arm_reach_real.toml"],
    "actor": ["launch/sim_arm_reach_async.toml"],
    "calibrate-sim": ["demos/x", "--out", "sim_params.toml"],
}
FLAGS = ["--env-kw", "image_size=[64,64]", "--env-kw", "backend=sim"]
EXPECTED = {"image_size": [64, 64], "backend": "sim"}
SMALL = ["--set", "actor_hidden=[32, 32]", "--set", "critic_hidden=[32, 32]", "--set", "batch_size=32"]


@pytest.mark.parametrize("verb", sorted(ENV_VERBS))
def test_every_env_verb_takes_the_same_env_kw_flag(verb):
    parser, _ = build_verb_parser(verb)
    args = parser.parse_args(ENV_VERBS[verb] + FLAGS)
    assert parse_env_kwargs(args.env_kw) == EXPECTED
    assert parse_env_kwargs(parser.parse_args(ENV_VERBS[verb]).env_kw) == {}
    assert "--env-kw KEY=VALUE" in parser.format_help()


def test_eval_keeps_env_option_as_an_alias():
    parser, _ = build_verb_parser("eval")
    args = parser.parse_args(["--checkpoint", "r", "--env-option", "image_size=[64,64]", "--env-kw", "backend=sim"])
    assert parse_env_kwargs(args.env_kw) == EXPECTED


def test_parse_env_kwargs_values():
    assert parse_env_kwargs(None) == {}
    assert parse_env_kwargs(["a=1", "b=2.5", "c=true", "d=[1, 2]", 'e="front"', "f=real",
                             "port=/dev/ttyACM0", "g=", "h=x=y", "a=3"]) == {
        "a": 3, "b": 2.5, "c": True, "d": [1, 2], "e": "front", "f": "real",
        "port": "/dev/ttyACM0", "g": "", "h": "x=y"}
    for bad in ("image_size", "=3"):
        with pytest.raises(ConfigError, match="--env-kw.*KEY=VALUE"):
            parse_env_kwargs([bad])


def test_env_kw_without_equals_is_a_clear_cli_error(capsys):
    assert main(["play", REACH, "--steps", "1", "--env-kw", "max_episode_steps"]) == 2
    assert "--env-kw 'max_episode_steps': write KEY=VALUE" in capsys.readouterr().err


def test_play_env_kw_reaches_the_env(capsys):
    assert main(["play", REACH, "--driver", "zero", "--env-kw", "max_episode_steps=5"]) == 0
    assert "length 5" in capsys.readouterr().out  # the env's time limit, not the registered 50
    assert main(["play", REACH, "--steps", "1", "--env-kw", "action_mode=bogus"]) == 2
    assert "action_mode='bogus'" in capsys.readouterr().err


def test_train_and_eval_env_kw_reach_the_env(tmp_path, capsys):
    launch = tmp_path / "reach.toml"
    launch.write_text(f'env = "{REACH}"\nalgo = "sac"\nsteps = 21\nlearning_starts = 100\n'
                      f'eval_every = 0\neval_episodes = 1\ncheckpoint_every = 0\n'
                      f'[env_kwargs]\nmax_episode_steps = 20\ncontrol_hz = 20.0\n')
    out = tmp_path / "run"
    rc = main(["train", str(launch), "--env-kw", "max_episode_steps=7", "--out", str(out),
               "--no-video", "--no-progress", *SMALL])
    assert rc == 0
    capsys.readouterr()
    ptr = json.loads((out / "checkpoints" / "latest.json").read_text())
    saved = json.loads((out / "checkpoints" / ptr["checkpoint"] / "trainer.json").read_text())
    assert saved["train"]["env_kwargs"] == {"max_episode_steps": 7, "control_hz": 20.0}  # CLI wins
    episodes = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    episodes = [r for r in episodes if r["kind"] == "episode"]
    assert [r["length"] for r in episodes][:3] == [7, 7, 7]

    # eval: over the run's saved options, in both spellings
    assert main(["eval", "--checkpoint", str(out), "--episodes", "1", "--env-kw", "max_episode_steps=3"]) == 0
    assert json.loads(capsys.readouterr().out)["mean_length"] == 3
    assert main(["eval", "--checkpoint", str(out), "--episodes", "1", "--env-option", "max_episode_steps=4"]) == 0
    assert json.loads(capsys.readouterr().out)["mean_length"] == 4
    assert main(["eval", "--checkpoint", str(out), "--episodes", "1", "--env-kw", "action_mode=bogus"]) == 2
    assert "action_mode='bogus'" in capsys.readouterr().err

    # --resume keeps the saved config: a new env option is refused, not silently dropped
    assert main(["train", "--resume", str(out), "--env-kw", "control_hz=10"]) == 2
    assert "--env-kw" in capsys.readouterr().err


def test_actor_and_finetune_merge_env_kw_over_the_launch_file(tmp_path, monkeypatch):
    """Both read the launch file's [env_kwargs] into the runtime config; the CLI values win."""
    import robolearn.runtime.actor as runtime_actor
    import robolearn.runtime.finetune as F

    seen = {}

    def fake_run_actor(cfg, *a, **k):
        seen["actor"] = dict(cfg.env_kwargs)
        return {"exit_reason": "done"}

    def fake_resolve_agent(cfg):
        seen["finetune"] = dict(cfg.env_kwargs)
        raise ConfigError("stop here")

    monkeypatch.setattr(runtime_actor, "run_actor", fake_run_actor)
    monkeypatch.setattr(F, "resolve_agent", fake_resolve_agent)
    launch = tmp_path / "l.toml"
    launch.write_text(f'env = "{REACH}"\nout = "{tmp_path / "run"}"\n'
                      '[env_kwargs]\ncontrol_hz = 20.0\ntimestep = 0.002\n')
    assert main(["actor", str(launch), "--env-kw", "control_hz=5", "--env-kw", "image_size=[64,64]"]) == 0
    assert seen["actor"] == {"control_hz": 5, "timestep": 0.002, "image_size": [64, 64]}
    launch.write_text(launch.read_text() + f'[finetune]\ncheckpoint = "{tmp_path / "pre"}"\n')
    assert main(["finetune", str(launch), "--env-kw", "control_hz=5", "--env-kw", "port=/dev/ttyX"]) == 2
    assert seen["finetune"] == {"control_hz": 5, "timestep": 0.002, "port": "/dev/ttyX"}
