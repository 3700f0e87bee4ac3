"""Unwritable paths, disk full at a checkpoint, truncated checkpoint files ->
clear errors, results already computed kept, no `.tmp` left behind."""
import errno
import json
import shutil

import pytest

from robolearn.cli import main
from robolearn.errors import DatasetError
from robolearn.compose.training import train
from robolearn.policies import checkpoints
from robolearn.policies.train_config import TrainConfig
from robolearn.policies.trainer import Trainer
from robolearn.policies.checkpoints import find_checkpoint

PEND = dict(env="Pendulum-v1", steps=60, learning_starts=30, eval_every=0, eval_episodes=1,
            max_episode_steps=20, checkpoint_every=20, progress=False, video=False,
            agent={"actor_hidden": [8], "critic_hidden": [8], "batch_size": 8})


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "pend"
    train(TrainConfig(out=str(out), **PEND))
    return out


def _copy(run, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(run, dst)
    return dst


def _no_tmp(folder):
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def test_unwritable_out_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    rc = main(["train", "--env", "Pendulum-v1", "--steps", "10", "--no-video", "--no-progress",
               "--out", str(blocker / "run")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and str(blocker / "run") in err and "--out" in err


def test_disk_full_at_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    out = tmp_path / "run"
    trainer = Trainer(TrainConfig(out=str(out), **PEND))
    real = checkpoints.save_state
    calls = []

    def full_disk(path, tree):
        calls.append(path)
        if len(calls) >= 2:  # the second checkpoint hits a full disk half way
            open(f"{path}.tmp", "wb").write(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, tree)

    monkeypatch.setattr(checkpoints, "save_state", full_disk)
    try:
        with pytest.raises(DatasetError, match="No space left") as exc:
            trainer.run()
    finally:
        trainer.close()
    assert "step_000000020" in str(exc.value) or "previous checkpoint" in str(exc.value)
    _no_tmp(out)
    ckpt = find_checkpoint(out)
    assert ckpt.name == "step_000000020"                      # the earlier checkpoint survives
    assert (out / "metrics.jsonl").read_text().strip()        # and the metrics
    monkeypatch.setattr(checkpoints, "save_state", real)
    assert main(["train", "--resume", str(out), "--no-progress", "--no-video"]) == 0


@pytest.mark.parametrize("name", ["latest.json", "trainer.json", "policy.safetensors", "agent.safetensors"])
def test_truncated_checkpoint_files_are_clear_errors(finished_run, tmp_path, capsys, name):
    run = _copy(finished_run, tmp_path)
    ckpt = find_checkpoint(run)
    f = run / "checkpoints" / name if name == "latest.json" else ckpt / name
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    for argv in (["eval", "--checkpoint", str(run), "--episodes", "1"],
                 ["train", "--resume", str(run), "--steps", "80", "--no-progress", "--no-video"]):
        if (name, argv[0]) in (("agent.safetensors", "eval"), ("policy.safetensors", "train")):
            continue  # eval reads only the policy weights, resume only the full agent state
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert name in err and ("corrupt" in err or "truncated" in err), err


def test_unwritable_eval_video_fails_before_evaluating(finished_run, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert main(["eval", "--checkpoint", str(finished_run), "--episodes", "1",
                 "--video", str(blocker / "v.mp4")]) == 2
    err = capsys.readouterr().err
    assert "--video" in err and "cannot write" in err
