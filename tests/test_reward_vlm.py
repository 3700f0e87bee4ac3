"""VLM-RM: the reward formula by hand, and a tiny CLIP built locally, saved, and loaded back
through the same code path as real weights (no download)."""
import json

import numpy as np
import pytest
import torch

from robolearn.rewards.base import RewardModelError
from robolearn.rewards.vlm import goal_baseline_projection, vlm_rm_reward


def test_formula_matches_hand_computation():
    g = np.array([1.0, 0.0, 0.0])
    b = np.array([0.0, 1.0, 0.0])
    x = np.array([0.6, 0.0, 0.8])          # unit vector
    alpha = 0.5
    d = (g - b)[None]
    P = alpha * (d.T @ d) / (d @ d.T) + (1 - alpha) * np.eye(3)
    by_hand = 1 - 0.5 * np.sum(((x - g) @ P) ** 2)
    t = lambda a: torch.tensor(a, dtype=torch.float64)
    proj = goal_baseline_projection(t(g), t(b), alpha)
    np.testing.assert_allclose(proj.numpy(), P, atol=1e-12)
    # x is normalised inside (scaling the embedding changes nothing)
    got = vlm_rm_reward(t(3.0 * x)[None], t(g), proj)
    assert float(got[0]) == pytest.approx(by_hand, abs=1e-12)
    # numbers: d = (1,-1,0); x-g = (-0.4,0,0.8); P(x-g) = (-0.3,0.1,0.4) -> 1 - 0.5*0.26 = 0.87
    assert by_hand == pytest.approx(0.87)
    # alpha = 0: plain CLIP, r = cos(x, g); alpha = 1: only the baseline->goal component counts
    r0 = vlm_rm_reward(t(x)[None], t(g), goal_baseline_projection(t(g), t(b), 0.0))
    assert float(r0[0]) == pytest.approx(float(x @ g))
    r1 = vlm_rm_reward(t(x)[None], t(g), goal_baseline_projection(t(g), t(b), 1.0))
    assert float(r1[0]) == pytest.approx(1 - 0.5 * 0.4 ** 2 / 2)


def _tiny_clip(path):
    transformers = pytest.importorskip("transformers", reason="the [vlm] extra (transformers) is not installed")
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizer

    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in letters:
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    (path).mkdir()
    (path / "vocab.json").write_text(json.dumps(vocab))
    (path / "merges.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizer(str(path / "vocab.json"), str(path / "merges.txt"), pad_token="<|endoftext|>")
    cfg = CLIPConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=1,
                         pad_token_id=1),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=8)
    torch.manual_seed(0)
    CLIPModel(cfg).save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


def test_tiny_clip_loads_from_a_local_folder_and_scores_batches(tmp_path):
    path = _tiny_clip(tmp_path / "clip")
    from robolearn.rewards.vlm import CLIPReward

    src = CLIPReward(path, goal="a red cube lifted", baseline="a red cube on a table", alpha=0.5, threshold=0.0)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (5, 48, 40, 3)).astype(np.uint8)   # any size: resized to the model's
    batched = src.score(frames)
    assert batched.shape == (5,) and np.all(np.isfinite(batched))
    one = np.array([src.score(f)[0] for f in frames])
    np.testing.assert_allclose(batched, one, atol=1e-5)
    # the served value is the formula on the model's own embeddings
    x = src.embed_images(frames[:1])
    np.testing.assert_allclose(batched[:1], vlm_rm_reward(x, src.goal, src.projection).numpy(), atol=1e-6)
    r, ok = src({"front": frames[0]}, {})
    assert r == pytest.approx(float(batched[0]), abs=1e-5) and ok == (r >= 0.0)
    with pytest.raises(RewardModelError, match=r"\(B, H, W, 3\)"):
        src.score(np.zeros((2, 8, 8), np.uint8))


def test_missing_clip_folder_says_how_to_fetch(tmp_path):
    from robolearn.rewards.vlm import CLIPReward

    with pytest.raises(RewardModelError, match="huggingface-cli download openai/clip-vit-base-patch32"):
        CLIPReward(tmp_path / "none", goal="x")
