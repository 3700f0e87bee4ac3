"""Replay across Experiments: `[replay] prior_runs` / `--prior-runs` (policies/prior_runs.py).

Earlier runs' replay and recorded datasets become one prior buffer sampled at `prior_fraction`;
a stored reward is kept only when it means this run's reward, else it is relabelled by this
run's reward model or the run refuses with the fix; mismatching spaces name the field; a run
with prior data resumes bit-identically."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from robolearn.cli import main
from robolearn.compose.training import build_trainer, resume_trainer, train
from robolearn.data.replay import ReplayBuffer
from robolearn.errors import ConfigError, DatasetError
from robolearn.policies.checkpoints import find_checkpoint
from robolearn.policies.train_config import RAE_PRIOR_FRACTION, TrainConfig, config_from_dict
from test_resume import assert_same_agent

TINY = {"actor_hidden": [8], "critic_hidden": [8], "batch_size": 8}
PEND = dict(env="Pendulum-v1", steps=60, learning_starts=30, eval_every=0, eval_episodes=1,
            max_episode_steps=20, checkpoint_every=20, progress=False, video=False, agent=TINY)
REACH = "robolearn/ArmReach-v0"


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("rae") / "earlier"
    train(TrainConfig(out=str(out), seed=7, **PEND))
    return out


def _stored_transitions(run):
    """The earlier run's online replay, read back from its checkpoint."""
    import gymnasium as gym

    ckpt = find_checkpoint(run)
    meta = json.loads((ckpt / "replay" / "meta.json").read_text())
    space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)})
    buf = ReplayBuffer(space, gym.spaces.Box(-1, 1, (1,), np.float32), meta["capacity"])
    return buf.load(ckpt / "replay").transitions()


def test_replay_table_is_checked():
    with pytest.raises(ConfigError, match=r"\[replay\].*'prior_run'.*did you mean 'prior_runs'"):
        TrainConfig(replay={"prior_run": ["a"]}).validate()
    with pytest.raises(ConfigError, match=r"prior_fraction=1.5.*\(0, 1\)"):
        TrainConfig(replay={"prior_runs": ["a"], "prior_fraction": 1.5}).validate()
    with pytest.raises(ConfigError, match="prior_runs='runs/a'.*list"):
        TrainConfig(replay={"prior_runs": "runs/a"}).validate()
    with pytest.raises(ConfigError, match="unknown key"):
        config_from_dict({"replay": {"ratio": 0.5}})


def test_prior_run_is_loaded_and_sampled_at_the_ratio(earlier_run, tmp_path):
    trainer = build_trainer(TrainConfig(out=str(tmp_path / "new"), replay={
        "prior_runs": [str(earlier_run)], "prior_fraction": 0.25}, **PEND))
    try:
        stored = _stored_transitions(earlier_run)
        got = trainer.prior.transitions()
        n = len(stored["reward"])
        assert len(trainer.prior) == n > 50
        for k in ("action", "reward", "terminated", "truncated"):
            assert np.array_equal(got[k], stored[k]), k
        assert np.array_equal(got["obs"]["state"], stored["obs"]["state"])
        assert np.array_equal(got["next_obs"]["state"], stored["next_obs"]["state"])
        assert trainer.sampler.prior_fraction == 0.25
        assert trainer.prior_runs_report[0]["transitions"] == n
        assert trainer.prior_runs_report[0]["relabelled"] is False
        summary = trainer.run()
        # every batch: 2 of 8 rows from the prior buffer (they come last), 6 online
        batch = trainer.sampler.sample(8)
        prior_rows = {tuple(r) for r in stored["obs"]["state"]}
        assert all(tuple(r) in prior_rows for r in batch.obs["state"][6:])
    finally:
        trainer.close()
    assert summary["prior_runs"][0]["path"] == str(earlier_run)
    assert summary["prior_runs"][0]["transitions"] == n
    assert summary["prior_fraction"] == 0.25
    saved = json.loads((tmp_path / "new" / "summary.json").read_text())
    assert saved["prior_runs"] == summary["prior_runs"]


def test_cli_flag_and_default_ratio(earlier_run, tmp_path, capsys):
    out = tmp_path / "cli"
    rc = main(["train", "--env", "Pendulum-v1", "--steps", "40", "--learning-starts", "30",
               "--max-episode-steps", "20", "--eval-every", "0", "--eval-episodes", "1",
               "--no-video", "--no-progress", "--set", "actor_hidden=[8]", "--set", "critic_hidden=[8]",
               "--set", "batch_size=8", "--out", str(out), "--prior-runs", str(earlier_run)])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["prior_fraction"] == RAE_PRIOR_FRACTION == 0.5
    assert summary["prior_runs"][0]["transitions"] > 50
    cfg = json.loads((out / "config.json").read_text())["train"]
    assert cfg["replay"] == {"prior_runs": [str(earlier_run)]}
    # --resume keeps the saved prior data: a new --prior-runs there is refused
    rc = main(["train", "--resume", str(out), "--prior-runs", str(earlier_run)])
    assert rc == 2 and "--prior-runs" in capsys.readouterr().err


def test_missing_path_and_run_without_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match=r"prior_runs: .*nowhere does not exist"):
        build_trainer(TrainConfig(out=str(tmp_path / "x"), replay={"prior_runs": [str(tmp_path / "nowhere")]},
                                  **PEND))
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    (crashed / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"crashed is a run folder without a checkpoint"):
        build_trainer(TrainConfig(out=str(tmp_path / "y"), replay={"prior_runs": [str(crashed)]}, **PEND))


def test_other_observation_space_names_the_field(earlier_run, tmp_path):
    cfg = TrainConfig(out=str(tmp_path / "car"), **{**PEND, "env": "MountainCarContinuous-v0"},
                      replay={"prior_runs": [str(earlier_run)]})
    with pytest.raises(ConfigError) as err:
        build_trainer(cfg)
    msg = str(err.value)
    assert str(earlier_run) in msg and "Pendulum-v1" in msg
    assert "observation 'state' has shape (3,) there, (2,) here" in msg


def test_other_action_space_and_keys_name_the_field():
    import gymnasium as gym

    from robolearn.policies.prior_runs import _space_problems

    class Env:
        observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-1, 1, (3,), np.float32)})
        action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    problems = _space_problems({"state": [[3], "<f4"], "front": [[32, 32, 3], "|u1"]}, 4, Env())
    assert "observation keys are ['front', 'state'] there, ['state'] here" in problems
    assert "action has 4 dimensions there, 2 here" in problems


def test_reward_that_differs_needs_a_model_or_is_relabelled(earlier_run, tmp_path):
    other = tmp_path / "other_reward"
    shutil.copytree(earlier_run, other)
    ckpt = find_checkpoint(other)
    state = json.loads((ckpt / "trainer.json").read_text())
    state["train"]["reward"] = {"kind": "classifier", "model": "models/cube"}
    (ckpt / "trainer.json").write_text(json.dumps(state))
    cfg = TrainConfig(out=str(tmp_path / "new"), replay={"prior_runs": [str(other)]}, **PEND)
    with pytest.raises(ConfigError) as err:
        build_trainer(cfg)
    msg = str(err.value)
    assert str(other) in msg and "models/cube" in msg and "the task's own reward" in msg
    assert "add a [reward] model" in msg and "drop this path" in msg

    calls = []

    def fake_reward_model(transitions, path):  # test double of compose.prior_relabeler
        calls.append(path)
        r = np.full(len(transitions["reward"]), -2.0, np.float32)
        r[:3] = np.nan  # no answer: dropped and counted
        return r

    trainer = build_trainer(cfg, relabel_prior=fake_reward_model)
    try:
        rep = trainer.prior_runs_report[0]
        assert calls == [str(other)] and rep["relabelled"] is True and rep["dropped_missing_reward"] == 3
        assert len(trainer.prior) == rep["transitions"]
        assert np.all(trainer.prior.transitions()["reward"] == -2.0)
    finally:
        trainer.close()


def test_compose_relabeler_is_only_built_for_a_reward_model():
    from robolearn.compose.training import prior_relabeler

    assert prior_relabeler(TrainConfig(replay={"prior_runs": ["a"]})) is None
    assert prior_relabeler(TrainConfig(reward={"kind": "human"}, replay={"prior_runs": ["a"]})) is None
    assert callable(prior_relabeler(TrainConfig(reward={"kind": "classifier", "model": "m"},
                                                replay={"prior_runs": ["a"]})))


@pytest.fixture(scope="module")
def reach_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("rae_ds") / "reach"
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    r = subprocess.run([sys.executable, "-m", "robolearn.cli", "record", REACH, "--device", "scripted",
                        "--episodes", "2", "--out", str(out), "--obs", "state", "--seed", "3"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    return out


def test_prior_dataset_joins_the_prior_buffer(reach_dataset, tmp_path):
    from robolearn.data.dataset import load_transitions

    cfg = TrainConfig(env=REACH, steps=30, learning_starts=20, eval_every=0, eval_episodes=1,
                      checkpoint_every=0, progress=False, video=False, agent=TINY,
                      out=str(tmp_path / "reach"), replay={"prior_runs": [str(reach_dataset)]})
    trainer = build_trainer(cfg)
    try:
        want = load_transitions(reach_dataset, keys=["state"])
        rep = trainer.prior_runs_report[0]
        assert rep["kind"] == "dataset" and rep["transitions"] == len(want["reward"]) > 5
        assert rep["relabelled"] is False
        got = trainer.prior.transitions()
        assert np.array_equal(got["action"], want["action"])
        assert np.allclose(got["reward"], want["reward"])
        trainer.run(stop_at=25)
    finally:
        trainer.close()


def test_dataset_of_another_env_names_the_field(reach_dataset, tmp_path):
    cfg = TrainConfig(out=str(tmp_path / "p"), replay={"prior_runs": [str(reach_dataset)]}, **PEND)
    with pytest.raises(DatasetError) as err:
        build_trainer(cfg)
    msg = str(err.value)
    assert "[replay] prior_runs" in msg and str(reach_dataset) in msg and REACH in msg
    assert "observation 'state' is" in msg and "action is (4,) there, (1,) here" in msg


def test_resume_with_prior_runs_is_bit_identical(earlier_run, tmp_path):
    base = dict(PEND, steps=100, seed=2)
    copy = tmp_path / "earlier"
    shutil.copytree(earlier_run, copy)
    cfg = lambda out: TrainConfig(out=str(tmp_path / out), replay={"prior_runs": [str(copy)]}, **base)  # noqa: E731
    straight = build_trainer(cfg("straight"))
    straight.run()
    first = build_trainer(cfg("stopped"))
    first.run(stop_at=40)  # checkpoints at 20 and 40 (episode ends), then stops
    first.close()
    shutil.rmtree(copy)  # gone: the resumed run's prior data must come from its checkpoint
    resumed = resume_trainer(tmp_path / "stopped")  # the prior data comes from the checkpoint
    try:
        assert resumed.env_steps == 40 and resumed.prior.capacity == straight.prior.capacity
        assert resumed.prior_runs_report == straight.prior_runs_report
        resumed.run()
        assert resumed.prior.state_equal(straight.prior)
        assert resumed.replay.state_equal(straight.replay)
        assert_same_agent(straight, resumed)
    finally:
        resumed.close()
        straight.close()
    a = json.loads((tmp_path / "straight" / "summary.json").read_text())
    b = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    assert a["prior_runs"] == b["prior_runs"] and a["eval_return"] == b["eval_return"]


def test_launch_file_replay_table(tmp_path, earlier_run):
    from robolearn.policies.train_config import load_launch

    f = tmp_path / "rae.toml"
    f.write_text(f'env = "Pendulum-v1"\nsteps = 100\n[replay]\nprior_runs = ["{earlier_run}"]\n'
                 'prior_fraction = 0.3\n')
    cfg = load_launch(f)
    assert cfg.replay == {"prior_runs": [str(earlier_run)], "prior_fraction": 0.3}
    f.write_text('env = "Pendulum-v1"\n[replay]\nprior_runs = ["a"]\nmix = 0.3\n')
    with pytest.raises(ConfigError, match=r"\[replay\]: unknown key\(s\) 'mix'"):
        load_launch(f)


def _demos_file(earlier_run, tmp_path, n=20):
    stored = _stored_transitions(earlier_run)
    demos = tmp_path / "demos.npz"
    np.savez(demos, obs_state=stored["obs"]["state"][:n], next_obs_state=stored["next_obs"]["state"][:n],
             action=stored["action"][:n], reward=stored["reward"][:n],
             terminated=stored["terminated"][:n], truncated=stored["truncated"][:n])
    return demos, stored


def test_rlpd_demos_keep_their_share_beside_earlier_runs(earlier_run, tmp_path):
    """Under rlpd the demos are half of every batch; earlier runs get a buffer and a share of
    their own (default: RaE's 1:1 with online data, i.e. 0.25), so their thousands of
    transitions do not dilute the demos. Their rows are not BC targets (`prior` False)."""
    demos, stored = _demos_file(earlier_run, tmp_path)
    cfg = TrainConfig(out=str(tmp_path / "rlpd"), algo="rlpd", demos=str(demos),
                      replay={"prior_runs": [str(earlier_run)]}, **{**PEND, "agent": {**TINY, "utd": 1}})
    trainer = build_trainer(cfg)
    try:
        assert len(trainer.prior) == 20 and len(trainer.earlier) == len(stored["reward"])
        assert trainer.prior.capacity >= 20 + cfg.steps  # room for interventions
        assert trainer.sampler.prior_fraction == 0.5 and trainer.sampler.earlier_fraction == 0.25
        # no online data yet: the demos keep their half, the earlier runs take the rest
        assert trainer.sampler.rows(64) == (0, 32, 32)
        for _ in range(3):
            trainer.replay.add({"state": np.zeros(3, np.float32)}, np.zeros(1, np.float32), 0.0,
                               {"state": np.ones(3, np.float32)}, False, False)
        assert trainer.sampler.rows(64) == (16, 32, 16)
        b = trainer.sampler.sample(64)
        demo_rows = {tuple(r) for r in stored["obs"]["state"][:20]}
        assert b.prior.tolist() == [False] * 16 + [True] * 32 + [False] * 16
        assert all(tuple(r) in demo_rows for r in b.obs["state"][16:48])
        assert np.all(b.obs["state"][:16] == 0)  # the online rows
    finally:
        trainer.close()
    cfg = TrainConfig(out=str(tmp_path / "share"), algo="rlpd", demos=str(demos),
                      replay={"prior_runs": [str(earlier_run)], "prior_fraction": 0.4},
                      **{**PEND, "agent": {**TINY, "utd": 1}})
    trainer = build_trainer(cfg)
    try:
        assert trainer.sampler.earlier_fraction == 0.4 and trainer.sampler.rows(100)[1] == 50
    finally:
        trainer.close()
    bad = TrainConfig(out=str(tmp_path / "bad"), algo="rlpd", demos=str(demos),
                      replay={"prior_runs": [str(earlier_run)], "prior_fraction": 0.6},
                      **{**PEND, "agent": {**TINY, "utd": 1}})
    with pytest.raises(ConfigError, match=r"prior_fraction=0.6.*demos already take 0.5.*below 0.5"):
        build_trainer(bad)


def test_rlpd_with_earlier_runs_resumes_bit_identically(earlier_run, tmp_path):
    demos, _ = _demos_file(earlier_run, tmp_path)
    copy = tmp_path / "earlier"
    shutil.copytree(earlier_run, copy)
    cfg = lambda out: TrainConfig(out=str(tmp_path / out), algo="rlpd", demos=str(demos), seed=3,  # noqa: E731
                                  replay={"prior_runs": [str(copy)]},
                                  **{**PEND, "steps": 100, "agent": {**TINY, "utd": 1}})
    straight = build_trainer(cfg("straight"))
    straight.run()
    first = build_trainer(cfg("stopped"))
    first.run(stop_at=40)
    first.close()
    shutil.rmtree(copy)  # the earlier runs' buffer must come back from the checkpoint
    resumed = resume_trainer(tmp_path / "stopped")
    try:
        assert resumed.earlier is not None and resumed.earlier.capacity == straight.earlier.capacity
        assert resumed.sampler.earlier_fraction == 0.25
        resumed.run()
        assert resumed.earlier.state_equal(straight.earlier)
        assert resumed.prior.state_equal(straight.prior)
        assert resumed.replay.state_equal(straight.replay)
        assert_same_agent(straight, resumed)
    finally:
        resumed.close()
        straight.close()
    summary = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    assert summary["earlier_runs_fraction"] == 0.25 and summary["prior_fraction"] == 0.5


def test_async_learner_reads_the_launch_files_replay_table(earlier_run, tmp_path):
    """`robolearn learner` / `launch` honour `[replay] prior_runs` as `train` does: the earlier
    run's transitions fill the prior buffer, sampled at RaE's ratio (or the table's)."""
    from robolearn.runtime.config import config_from_dict
    from robolearn.runtime.learner import Learner

    stored = _stored_transitions(earlier_run)
    base = {"env": "Pendulum-v1", "max_episode_steps": 20,
            "learner": {"total_env_steps": 100, "eval_episodes": 0, "agent": TINY}}
    lrn = Learner(config_from_dict({**base, "out": str(tmp_path / "a"),
                                    "replay": {"prior_runs": [str(earlier_run)]}}))
    try:
        assert len(lrn.prior) == len(stored["reward"]) and len(lrn.replay) == 0
        assert lrn.sampler.prior_fraction == RAE_PRIOR_FRACTION
        assert lrn.prior_runs_report[0]["transitions"] == len(stored["reward"])
    finally:
        lrn.close()
    lrn = Learner(config_from_dict({**base, "out": str(tmp_path / "b"),
                                    "replay": {"prior_runs": [str(earlier_run)], "prior_fraction": 0.25}}))
    try:
        assert lrn.sampler.prior_fraction == 0.25
    finally:
        lrn.close()
    demos, stored = _demos_file(earlier_run, tmp_path)  # rlpd + demos: the earlier runs' own share
    lrn = Learner(config_from_dict({**base, "algo": "rlpd", "out": str(tmp_path / "d"),
                                    "learner": {**base["learner"], "demos": str(demos)},
                                    "replay": {"prior_runs": [str(earlier_run)]}}))
    try:
        assert len(lrn.prior) == 20 and len(lrn.earlier) == len(stored["reward"])
        assert lrn.sampler.prior_fraction == 0.5 and lrn.sampler.earlier_fraction == 0.25
    finally:
        lrn.close()
    with pytest.raises(ConfigError, match=r"\[replay\]: unknown key\(s\) 'mix'"):
        config_from_dict({**base, "replay": {"prior_runs": [str(earlier_run)], "mix": 0.3}})
    with pytest.raises(ConfigError, match="does not exist"):
        Learner(config_from_dict({**base, "out": str(tmp_path / "c"), "replay": {"prior_runs": ["nope"]}}))
