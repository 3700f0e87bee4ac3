"""`robolearn reward train|eval` end to end on tiny cases (a synthetic dataset, one sim episode)."""
import json

import pytest

from robolearn.cli import main
from reward_fixtures import write_dataset


def test_train_then_eval_against_sim_ground_truth(tmp_path, capsys):
    data = write_dataset(tmp_path / "data", episodes=6, steps=8)
    assert main(["reward", "train", str(data), "--kind", "classifier", "--out", str(tmp_path / "m"),
                 "--epochs", "1"]) == 0
    assert "held-out episodes: precision" in capsys.readouterr().out
    out_json = tmp_path / "eval.json"
    assert main(["reward", "eval", "--env", "robolearn/ArmLift-v0", "--model", str(tmp_path / "m"),
                 "--episodes", "1", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "precision" in text and "latency per frame" in text
    res = json.loads(out_json.read_text())
    assert res["overall"]["frames"] == 101 and res["overall"]["positives"] > 0   # a scripted lift, held
    assert (tmp_path / "m" / "eval_ArmLift-v0.png").is_file()


@pytest.mark.slow  # ~60 s on a loaded 2-core CPU (trains a conv net on pairs)
def test_progress_model_trains_and_ranks_by_time(tmp_path, capsys):
    data = write_dataset(tmp_path / "data", episodes=10, steps=10)
    assert main(["reward", "train", str(data), "--kind", "progress", "--out", str(tmp_path / "p"),
                 "--epochs", "6"]) == 0
    from robolearn.rewards.progress import ProgressReward

    src = ProgressReward(tmp_path / "p")
    rep = json.loads((tmp_path / "p" / "reward.json").read_text())["report"]
    assert rep["held_out_time_spearman"] > 0.8, rep
    src.reset()
    from reward_fixtures import frame
    import numpy as np
    rng = np.random.default_rng(1)
    r0, _ = src({"front": frame(0.1, False, rng)}, {})
    assert abs(r0) < 0.2                             # first step compares the frame with itself


def test_bad_arguments(tmp_path, capsys):
    assert main(["reward", "eval", "--env", "robolearn/ArmLift-v0", "--model", str(tmp_path / "none")]) == 2
    assert "no reward.json" in capsys.readouterr().err
    assert main(["reward", "train", str(tmp_path / "none"), "--kind", "classifier", "--out", str(tmp_path / "o")]) == 2


def test_bench_classifier_part_refuses_another_recording(tmp_path):
    """`bench rewards` reuses OUT/lift-data only if it is the recording it would make (cameras and
    episode kinds): a front-only recording from an older recipe must not be trained on silently."""
    from robolearn.bench.rewards import build_parser, classifier_part
    from robolearn.errors import ConfigError

    write_dataset(tmp_path / "lift-data", episodes=4, steps=4)
    args = build_parser().parse_args(["--parts", "classifier", "--out", str(tmp_path)])
    assert args.cameras == ["front", "wrist"] and args.rl_steps == 8000 and args.rl_seeds == [0, 1]
    with pytest.raises(ConfigError, match="another recording"):
        classifier_part(args, tmp_path)


def test_train_never_overwrites_an_earlier_model_unless_asked(tmp_path, capsys):
    """A second `reward train --out` into a model folder is refused before training (the first
    model's bytes untouched); --overwrite replaces it; no temp file is left behind."""
    data = write_dataset(tmp_path / "data", episodes=6, steps=8)
    args = ["reward", "train", str(data), "--kind", "classifier", "--out", str(tmp_path / "m"), "--epochs", "1"]
    assert main(args) == 0
    before = (tmp_path / "m" / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main(args + ["--seed", "1"]) == 2
    assert "already holds a reward model" in capsys.readouterr().err
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == before
    assert main(args + ["--seed", "1", "--overwrite"]) == 0
    assert (tmp_path / "m" / "model.safetensors").read_bytes() != before
    assert not list((tmp_path / "m").glob("*.tmp"))


def test_save_model_failure_keeps_the_previous_model(tmp_path, monkeypatch):
    """A write that fails half way (disk full) is a RewardModelError; the previous model stays
    loadable and no temp file is left."""
    import torch

    from robolearn.rewards import checkpoint
    from robolearn.rewards.base import RewardModelError

    net = torch.nn.Linear(2, 1)
    checkpoint.save_model(tmp_path, net, {"kind": "classifier"})
    before = (tmp_path / "model.safetensors").read_bytes()
    import safetensors.torch

    def full_disk(tensors, filename, *a, **k):
        with open(filename, "wb") as f:   # part of the file lands, then the disk is full
            f.write(b"\0" * 10)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    with pytest.raises(RewardModelError, match="No space left"):
        checkpoint.save_model(tmp_path, torch.nn.Linear(2, 1), {"kind": "classifier"})
    assert not list(tmp_path.glob("*.tmp"))
    assert checkpoint.read_meta(tmp_path)["kind"] == "classifier"
    assert (tmp_path / "model.safetensors").read_bytes() == before
