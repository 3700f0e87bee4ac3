"""Training CLI smoke tests: run folder contents, eval, algos, and the user-facing errors."""
import dataclasses
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from robolearn.cli import main
from robolearn.errors import ConfigError, DatasetError, TrainingError
from robolearn.policies.train_config import TrainConfig, load_launch
from robolearn.policies.trainer import Trainer
from robolearn.compose.training import train

REACH = "robolearn/ArmReach-v0"
# small nets and batches keep the smoke runs to seconds on a 2-core machine
SMALL = ["--set", "actor_hidden=[64, 64]", "--set", "critic_hidden=[64, 64]", "--set", "batch_size=64"]
SMALL_AGENT = {"actor_hidden": [64, 64], "critic_hidden": [64, 64], "batch_size": 64}
REQUIRED = {"env", "algo", "env_steps", "updates", "wall_s", "eval_return", "eval_success_rate"}


def test_train_cli_writes_run_folder_and_eval_reloads_it(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "--env", REACH, "--algo", "sac", "--steps", "300", "--learning-starts", "100",
               "--eval-every", "150", "--eval-episodes", "2", "--checkpoint-every", "100",
               "--out", str(out), "--no-progress", *SMALL])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert REQUIRED <= set(summary)
    assert summary["env"] == REACH and summary["algo"] == "sac"
    assert summary["env_steps"] == 300
    assert summary["updates"] == 201  # one per env step from step 100 (learning_starts) on
    assert 0.0 <= summary["eval_success_rate"] <= 1.0 and np.isfinite(summary["eval_return"])
    # the summary printed on stdout is the same JSON
    printed = json.loads(capsys.readouterr().out)
    assert printed["updates"] == 201

    recs = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in recs if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [150, 300]
    assert all(r["episodes"] == 2 for r in evals)
    train = [r for r in recs if r["kind"] == "train" and r["updates"] > 0]
    assert train and all(np.isfinite(r["critic_loss"]) for r in train)
    episodes = [r for r in recs if r["kind"] == "episode"]
    assert episodes and all(r["length"] <= 50 for r in episodes)

    assert list((out / "tb").glob("events.out.tfevents.*"))
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    video = out / summary["video"]
    assert video.stat().st_size > 1000
    ptr = json.loads((out / "checkpoints" / "latest.json").read_text())
    ckpt = out / "checkpoints" / ptr["checkpoint"]
    assert ptr["env_steps"] == 300
    for name in ("agent.safetensors", "policy.safetensors", "trainer.json", "replay/meta.json"):
        assert (ckpt / name).is_file(), name
    assert len(list((out / "checkpoints").glob("step_*"))) == 1  # older checkpoints removed

    # `robolearn eval` rebuilds the policy from the checkpoint: same fixed eval episodes,
    # deterministic policy -> the same return as the final evaluation of training
    rc = main(["eval", "--checkpoint", str(out), "--episodes", "2"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert res["episodes"] == 2
    assert res["return"] == pytest.approx(summary["eval_return"], rel=1e-5)
    assert res["success_rate"] == summary["eval_success_rate"]


def test_algos_lists_registered_names_one_per_line(capsys):
    from robolearn.policies.registry import ALGOS

    assert main(["algos"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == list(ALGOS)
    assert {"sac", "redq", "droq", "crossq", "rlpd", "drq"} <= set(lines)


def test_unknown_algo_and_env_are_clear_errors(tmp_path, capsys):
    rc = main(["train", "--env", REACH, "--algo", "sacc", "--steps", "10", "--out", str(tmp_path / "a")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "unknown algo 'sacc'" in err and "redq" in err
    rc = main(["train", "--env", "robolearn/ArmReech-v0", "--algo", "sac", "--steps", "10",
               "--out", str(tmp_path / "b")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "unknown env 'robolearn/ArmReech-v0'" in err and "robolearn/ArmReach-v0" in err


def test_demo_file_of_wrong_shape_is_a_dataset_error(tmp_path, capsys):
    n = 20
    bad = tmp_path / "demos.npz"
    np.savez(bad, obs_state=np.zeros((n, 7), np.float32), next_obs_state=np.zeros((n, 7), np.float32),
             action=np.zeros((n, 4), np.float32), reward=np.zeros(n, np.float32),
             terminated=np.zeros(n, bool), truncated=np.zeros(n, bool))
    cfg = TrainConfig(env=REACH, algo="rlpd", steps=50, demos=str(bad), out=str(tmp_path / "r"),
                      progress=False, video=False, agent=SMALL_AGENT)
    with pytest.raises(DatasetError, match=r"obs\['state'\] has shape \(20, 7\), expected \(20, 20\)"):
        Trainer(cfg)
    # through the CLI: exit code 2 and the message, no traceback
    rc = main(["train", "--env", REACH, "--algo", "rlpd", "--steps", "50", "--demos", str(bad),
               "--out", str(tmp_path / "r2"), "--no-progress"])
    assert rc == 2
    assert "has shape (20, 7)" in capsys.readouterr().err
    with pytest.raises(DatasetError, match="not found"):
        Trainer(TrainConfig(env=REACH, demos=str(tmp_path / "missing.npz"), out=str(tmp_path / "r3")))


class ExplodingReward(gym.Wrapper):
    """A broken reward model: finite but absurd rewards from env step `at` on (1e30 squared
    overflows float32, so the critic loss becomes inf)."""

    def __init__(self, env, at: int):
        super().__init__(env)
        self.at, self.t = at, 0

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.t += 1
        return obs, (1e30 if self.t >= self.at else r), term, trunc, info


def _exploding_env(**kwargs):
    return ExplodingReward(gym.make(REACH, **kwargs), at=130)


def test_nan_loss_stops_training_and_names_the_step(tmp_path):
    if "RobolearnTest/ExplodingReach-v0" not in gym.registry:
        gym.register("RobolearnTest/ExplodingReach-v0", entry_point=_exploding_env)
    cfg = TrainConfig(env="RobolearnTest/ExplodingReach-v0", algo="sac", steps=400, learning_starts=100,
                      eval_every=0, checkpoint_every=100, out=str(tmp_path / "nan"), progress=False,
                      video=False, agent=SMALL_AGENT)
    trainer = Trainer(cfg)
    with pytest.raises(TrainingError, match=r"at env step (\d+) \(update (\d+)\)") as info:
        trainer.run()
    trainer.close()
    # stopped the moment the bad transition reached a batch, not trained through to the end
    assert 130 <= trainer.env_steps < 140
    assert f"env step {trainer.env_steps}" in str(info.value)
    assert not (tmp_path / "nan" / "summary.json").exists()
    # the last good checkpoint (before the explosion) is intact and finite
    ptr = json.loads((tmp_path / "nan" / "checkpoints" / "latest.json").read_text())
    assert ptr["env_steps"] < 130


def test_launch_toml_is_read_into_train_config(tmp_path):
    cfg = load_launch(Path(__file__).resolve().parents[1] / "launch" / "demo_arm_reach.toml")
    # `make demo` runs the plain preset, as the slow learning test and docs/bench/default/ do
    assert (cfg.env, cfg.algo, cfg.obs, cfg.agent) == (REACH, "sac", "state", {})
    assert cfg.steps <= 10_000 and cfg.learning_starts is None and cfg.utd is None
    bad = tmp_path / "bad.toml"
    bad.write_text('env = "robolearn/ArmReach-v0"\nsteps = 100\nevla_every = 10\n')
    with pytest.raises(ConfigError, match="'evla_every' \\(did you mean 'eval_every'\\?\\)"):
        load_launch(bad)
    bad.write_text('env = "robolearn/ArmReach-v0"\nsteps = -5\n')
    with pytest.raises(ConfigError, match="steps=-5"):
        load_launch(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_launch(tmp_path / "nope.toml")


class HumanTakesOver(gym.Wrapper):
    """Intervention wrapper as teleop provides it: on every 3rd step a 'human' applies its own
    action and reports it in info."""

    def __init__(self, env):
        super().__init__(env)
        self.t = 0

    def step(self, action):
        self.t += 1
        if self.t % 3:
            return self.env.step(action)
        human = np.array([0.5, -0.5, 0.25, 1.0], np.float32)
        obs, r, term, trunc, info = self.env.step(human)
        return obs, r, term, trunc, {**info, "intervention": True, "intervention_action": human}


def _human_env(**kwargs):
    return HumanTakesOver(gym.make(REACH, **kwargs))


def test_interventions_store_the_human_action_and_feed_rlpd_prior(tmp_path):
    if "RobolearnTest/HumanReach-v0" not in gym.registry:
        gym.register("RobolearnTest/HumanReach-v0", entry_point=_human_env)
    cfg = TrainConfig(env="RobolearnTest/HumanReach-v0", algo="rlpd", steps=60, learning_starts=60,
                      demos="scripted:1", eval_every=0, eval_episodes=1, checkpoint_every=0,
                      buffer_size=100, out=str(tmp_path / "h"), progress=False, video=False, agent=SMALL_AGENT)
    trainer = Trainer(cfg)
    n_demo = len(trainer.prior)
    trainer.run(stop_at=60)
    trainer.close()
    assert len(trainer.replay) == 60
    batch = trainer.replay.gather(np.flatnonzero(trainer.replay._valid))  # every stored transition
    flagged = batch.intervention
    assert flagged.sum() == 20
    np.testing.assert_array_equal(batch.action[flagged], np.tile([0.5, -0.5, 0.25, 1.0], (20, 1)))
    assert not np.any(np.all(batch.action[~flagged] == [0.5, -0.5, 0.25, 1.0], axis=1))
    assert len(trainer.prior) == n_demo + 20  # RLPD adds human steps to the prior data


def test_a_new_run_refuses_an_earlier_run_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    trainer = Trainer(TrainConfig(env=REACH, steps=10, out=str(out), progress=False, video=False))
    with pytest.raises(ConfigError, match="--resume"):
        trainer.run()
    trainer.close()
    # a finished run (summary.json present) is refused too, and replaced only with overwrite=True
    (out / "summary.json").write_text("{}")
    (out / "metrics.jsonl").write_text('{"kind": "eval", "step": 999}\n')
    cfg = TrainConfig(env=REACH, steps=60, learning_starts=60, eval_every=0, eval_episodes=1, out=str(out),
                      progress=False, video=False)
    with pytest.raises(ConfigError, match="--overwrite"):
        train(cfg)
    assert "999" in (out / "metrics.jsonl").read_text()
    summary = train(dataclasses.replace(cfg, overwrite=True))
    assert summary["env_steps"] == 60
    assert "999" not in (out / "metrics.jsonl").read_text()
    assert "--overwrite: deleting the earlier run" in capsys.readouterr().out


def test_prior_data_counts_are_checked():
    """`scripted:N` (--demos) and `sim:N` (finetune.prior_data) share one parser and its errors."""
    from robolearn.policies.demos import episode_count

    assert episode_count("scripted:20") == 20 and episode_count("sim:3", "finetune.prior_data") == 3
    with pytest.raises(ConfigError, match=r"finetune.prior_data 'sim:x': write sim:N"):
        episode_count("sim:x", "finetune.prior_data")
    with pytest.raises(ConfigError, match="N must be >= 1"):
        episode_count("scripted:0")


def test_trainer_honours_the_presets_replay_capacity():
    """The replay holds the run's steps, at most the agent's `replay_capacity` (drq: 100k);
    an explicit buffer_size wins."""
    from robolearn.compose.training import build_trainer

    base = dict(env="Pendulum-v1", steps=60, progress=False, video=False,
                agent={"actor_hidden": [8], "critic_hidden": [8], "batch_size": 8})
    for kw, want in (({}, 60), ({"agent": {**base["agent"], "replay_capacity": 25}}, 25),
                     ({"agent": {**base["agent"], "replay_capacity": 25}, "buffer_size": 40}, 40)):
        t = build_trainer(TrainConfig(**{**base, **kw}))
        try:
            assert t.replay_capacity == want and t.replay.capacity == want
        finally:
            t.close()
