"""Success classifier: labels, training, threshold for precision, safetensors+JSON round trip, errors."""
import json

import numpy as np
import pytest

from robolearn.data.dataset import Dataset
from robolearn.rewards.base import MISSING, RewardModelError
from robolearn.rewards.classifier import ClassifierConfig, ClassifierReward, train_classifier
from robolearn.rewards.labels import frame_labels
from robolearn.rewards.metrics import binary_metrics, spearman, threshold_for_precision
from reward_fixtures import SIZE, frame, write_dataset

TINY = dict(epochs=8, filters=8, layers=2, feature_dim=16, hidden=32, batch_size=64, augment_pad=1)


def test_metrics_by_hand():
    scores = np.array([0.1, 0.4, 0.6, 0.8, 0.9])
    truth = np.array([False, False, True, False, True])
    m = binary_metrics(scores, truth, 0.5)
    assert (m["tp"], m["fp"], m["fn"], m["tn"]) == (2, 1, 0, 2)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == 1.0
    assert threshold_for_precision(scores, truth, 0.99) == 0.9        # only 0.9 is FP-free
    assert threshold_for_precision(scores, truth, 0.6) == 0.6         # 2/3 >= 0.6 keeps all recall
    assert spearman([1, 2, 3, 4], [10, 20, 25, 100]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_labels_from_env_success_and_human_marks(tmp_path):
    ds = Dataset(write_dataset(tmp_path / "a", episodes=2, steps=6))
    lab = frame_labels(ds.episode(0))
    assert lab.tolist() == [False, False, False, True, True, True, True]
    assert not frame_labels(ds.episode(1)).any()
    ds2 = Dataset(write_dataset(tmp_path / "b", episodes=2, steps=6, mark_instead=True))
    ep = ds2.episode(0)
    assert not ep.data["success"].any() and ep.data["success_mark"].any()
    assert frame_labels(ep).tolist() == lab.tolist()


def test_train_save_load_and_serve(tmp_path):
    data = write_dataset(tmp_path / "data", episodes=12, steps=12)
    src, report = train_classifier(data, ClassifierConfig(**TINY), out=tmp_path / "model", log=lambda s: None)
    h = report["held_out"]
    assert h["positives"] > 0 and h["precision"] >= 0.99 and h["recall"] >= 0.8, h
    meta = json.loads((tmp_path / "model" / "reward.json").read_text())
    assert meta["kind"] == "classifier" and meta["cameras"] == ["front"] and meta["threshold"] == src.threshold
    assert (tmp_path / "model" / "model.safetensors").is_file()
    loaded = ClassifierReward(tmp_path / "model")
    rng = np.random.default_rng(5)
    imgs = {"front": np.stack([frame(0.9, True, rng), frame(0.3, False, rng)])}
    np.testing.assert_allclose(loaded.score(imgs), src.score(imgs), rtol=1e-5)
    r_up, ok_up = loaded({"front": imgs["front"][0]}, {})
    r_down, ok_down = loaded({"front": imgs["front"][1]}, {})
    assert (r_up, ok_up, r_down, ok_down) == (1.0, True, 0.0, False), (loaded.score(imgs), loaded.threshold)
    assert len(loaded.latencies) == 2


def _noisy_frames(seed=0, episodes=24, steps=10, size=16) -> dict:
    """`fit_classifier`'s in-memory layout: noise frames a faint brightness step marks as lifted,
    so the held-out F1 moves from epoch to epoch."""
    rng = np.random.default_rng(seed)
    ep = np.repeat(np.arange(episodes), steps)
    labels = (ep % 2 == 0) & (np.tile(np.arange(steps), episodes) >= steps // 2)
    imgs = rng.integers(0, 200, (len(ep), size, size, 3)) + 12 * labels[:, None, None, None]
    return {"frames": {"front": imgs.astype(np.uint8)}, "labels": labels, "episode": ep,
            "episodes": list(range(episodes)), "episode_has_success": [e % 2 == 0 for e in range(episodes)],
            "cameras": ["front"], "image_shape": (size, size, 3), "env_id": "test"}


def test_select_from_epoch_keeps_the_epoch_with_the_best_held_out_f1(tmp_path):
    """The saved model is the best held-out epoch's, not the last one's (ties: the later)."""
    from robolearn.rewards.classifier import fit_classifier

    cfg = ClassifierConfig(**{**TINY, "epochs": 6, "augment_pad": 0}, select_from_epoch=2)
    src, report = fit_classifier(_noisy_frames(), cfg, out=tmp_path / "model", log=lambda s: None)
    f1s = report["held_out_f1_by_epoch"]
    assert sorted(f1s) == [2, 3, 4, 5, 6] and len(set(f1s.values())) > 1, f1s  # a choice to make
    best = max(f1s.values())
    assert report["epoch"] == max(e for e, f in f1s.items() if f == best)
    assert report["held_out"]["f1"] == pytest.approx(best, abs=1e-3)
    assert ClassifierReward(tmp_path / "model").threshold == src.threshold  # the kept epoch's, saved
    _, last = fit_classifier(_noisy_frames(), ClassifierConfig(**{**TINY, "epochs": 6, "augment_pad": 0}),
                             log=lambda s: None)
    assert last["epoch"] == 6 and last["held_out_f1_by_epoch"] == {}


def test_bad_inputs_give_clear_errors(tmp_path):
    with pytest.raises(RewardModelError, match="no reward.json"):
        ClassifierReward(tmp_path / "nothing")
    data = write_dataset(tmp_path / "data", episodes=4, steps=6)
    src, _ = train_classifier(data, ClassifierConfig(**{**TINY, "epochs": 1}), out=tmp_path / "m", log=lambda s: None)
    rng = np.random.default_rng(0)
    with pytest.raises(RewardModelError, match="image_size"):
        src({"front": np.zeros((SIZE * 2, SIZE, 3), np.uint8)}, {})
    with pytest.raises(RewardModelError, match="needs camera 'front'"):
        src({"wrist": frame(0, False, rng)}, {})
    meta_path = tmp_path / "m" / "reward.json"
    meta = json.loads(meta_path.read_text())
    meta["arch"]["hidden"] = 64  # wrong architecture for the stored weights
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(RewardModelError, match="wrong architecture"):
        ClassifierReward(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(RewardModelError, match="missing"):
        ClassifierReward(tmp_path / "m")
    with pytest.raises(RewardModelError, match="is a 'classifier' model"):
        from robolearn.rewards.progress import ProgressReward
        ProgressReward(tmp_path / "m")


def test_env_camera_mismatch_is_named_at_the_step(tmp_path):
    """A state-observing env reads the classifier's camera itself (bind): a camera the env does
    not render, or frames of another size, is a RewardModelError (not a MISSING reward that a
    run would silently drop forever)."""
    import gymnasium as gym

    import robolearn.registry

    robolearn.registry.register_all()
    data = write_dataset(tmp_path / "data", episodes=4, steps=6)
    train_classifier(data, ClassifierConfig(**{**TINY, "epochs": 1}), out=tmp_path / "m", log=lambda s: None)
    a = np.zeros(4, np.float32)
    for kw, match in (({"camera": "wrist", "image_size": [SIZE, SIZE]}, "needs camera 'front'.*camera='front'"),
                      ({"camera": "front", "image_size": [2 * SIZE, 2 * SIZE]}, r"image_size=\[16, 16\]")):
        env = gym.make("robolearn/ArmReach-v0", reward_source=str(tmp_path / "m"), **kw)
        try:
            env.reset(seed=0)
            with pytest.raises(RewardModelError, match=match):
                env.step(a)
        finally:
            env.close()


def test_nan_score_is_missing_not_zero(tmp_path):
    data = write_dataset(tmp_path / "data", episodes=4, steps=6)
    src, _ = train_classifier(data, ClassifierConfig(**{**TINY, "epochs": 1}), log=lambda s: None)
    import torch
    with torch.no_grad():
        src.model.head[-1].bias.fill_(float("nan"))
    r, ok = src({"front": frame(0.5, True, np.random.default_rng(0))}, {})
    assert np.isnan(r) and np.isnan(MISSING)     # MISSING is NaN: "no answer", never 0
    assert not ok


def test_progress_model_nan_is_missing_and_bad_inputs_are_named(tmp_path):
    """The progress model shares the classifier's refusals: NaN -> MISSING, wrong image size or
    camera -> RewardModelError, edited architecture -> RewardModelError naming the mismatch."""
    import torch

    from robolearn.rewards.progress import ProgressConfig, ProgressReward, train_progress

    data = write_dataset(tmp_path / "data", episodes=4, steps=6)
    cfg = ProgressConfig(epochs=1, pairs_per_epoch=64, batch_size=32, filters=8, layers=2, feature_dim=16,
                         hidden=32, augment_pad=1)
    src, _ = train_progress(data, cfg, out=tmp_path / "p", log=lambda s: None)
    rng = np.random.default_rng(0)
    with pytest.raises(RewardModelError, match="image_size"):
        src({"front": np.zeros((SIZE * 2, SIZE, 3), np.uint8)}, {})
    with pytest.raises(RewardModelError, match="needs camera 'front'"):
        src({"wrist": frame(0, False, rng)}, {})
    loaded = ProgressReward(tmp_path / "p")
    with torch.no_grad():
        loaded.model.delta.bias.fill_(float("nan"))
    loaded.reset()
    r, ok = loaded({"front": frame(0.5, True, rng)}, {})
    assert np.isnan(r) and not ok
    meta_path = tmp_path / "p" / "reward.json"
    meta = json.loads(meta_path.read_text())
    meta["arch"]["filters"] = 16
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(RewardModelError, match="wrong architecture"):
        ProgressReward(tmp_path / "p")


def test_dataset_without_both_classes_is_refused(tmp_path):
    from robolearn.errors import DatasetError

    data = write_dataset(tmp_path / "d", episodes=2, steps=4)
    import shutil
    shutil.rmtree(tmp_path / "d" / "episode_000000")  # only the failed episode remains
    with pytest.raises(DatasetError, match="needs both"):
        train_classifier(data, ClassifierConfig(**TINY), log=lambda s: None)


def test_colour_jitter_changes_each_image_within_range():
    """Domain randomisation of colours (the hard reality's tint and light broke an un-jittered
    classifier): each image gets its own gains, values stay valid pixels, shapes unchanged."""
    import torch

    from robolearn.policies.encoders import colour_jitter

    x = torch.full((4, 8, 8, 3), 128.0)
    y = colour_jitter(x, torch.Generator().manual_seed(0))
    assert y.shape == x.shape and float(y.min()) >= 0 and float(y.max()) <= 255
    per_image = y.mean(dim=(1, 2))               # (4, 3): one tint per image
    assert len({tuple(v.round().tolist()) for v in per_image}) == 4
    assert not torch.allclose(per_image[:, 0], per_image[:, 1])   # channels differ: a tint
    assert torch.equal(colour_jitter(x, torch.Generator().manual_seed(0)), y)   # seeded


def test_held_out_split_covers_every_kind_of_episode():
    """The threshold is chosen on held-out frames: each way the episodes were recorded (kind or
    device) must be there, or the threshold is blind to that kind of hard negative."""
    from robolearn.rewards.classifier import split_episodes

    kinds = ["scripted"] * 8 + ["random"] * 4 + ["low_lift"] * 4 + ["hover"] * 4
    eps = list(range(len(kinds)))
    positive = [k == "scripted" for k in kinds]
    for seed in range(20):
        train, val = split_episodes(eps, positive, 0.25, np.random.default_rng(seed), kinds)
        assert train | val == set(eps) and not train & val
        assert {kinds[e] for e in val} == {"scripted", "random", "low_lift", "hover"}
        assert {kinds[e] for e in train} == {"scripted", "random", "low_lift", "hover"}
    # without sources: by outcome only (one held-out of each at least)
    train, val = split_episodes(eps, positive, 0.25, np.random.default_rng(0))
    assert any(positive[e] for e in val) and any(not positive[e] for e in val)


def test_hover_episodes_never_succeed_and_stay_near_the_cube():
    from robolearn.policies.env_building import make_env
    from robolearn.rewards.sim_episodes import run_episode

    env = make_env("robolearn/ArmLift-v0", "state")
    try:
        ep = run_episode(env, "hover", seed=1, steps=60)
        task = env.unwrapped.task
        rel = task.ee_pos - task.cube_pose()[0]
    finally:
        env.close()
    assert not ep["success"].any() and len(ep["action"]) == 60
    assert np.abs(rel[:2]).max() < 0.12 and 0.03 < task.ee_pos[2] < 0.16, rel   # in the air, near the cube
