"""Replay: ring semantics, frames stored once, n-step returns, boundaries, disk, mixing."""
import json

import gymnasium as gym
import numpy as np
import pytest

from robolearn.data.replay import MixedSampler, ReplayBuffer, transitions_to_buffer
from robolearn.errors import DatasetError

ACT = gym.spaces.Box(-1, 1, (2,), np.float32)


def state_space(dim=3):
    return gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)})


def image_space(h=84, w=84):
    return gym.spaces.Dict({
        "state": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
        "front": gym.spaces.Box(0, 255, (h, w, 3), np.uint8),
    })


def ob(t, images=False, h=84, w=84):
    """Observation number t: state encodes t so tests can check which frame came back."""
    o = {"state": np.array([t, -t, 0.5 * t], np.float32)}
    if images:
        o["front"] = np.full((h, w, 3), t % 256, np.uint8)
    return o


def add_episode(buf, start, length, rewards=None, end="terminated", images=False, **img):
    """Add `length` transitions t=start..start+length-1 ending with `end`."""
    for k in range(length):
        t = start + k
        last = k == length - 1
        r = rewards[k] if rewards is not None else float(t)
        buf.add(ob(t, images, **img), np.array([0.1 * t, 0.0], np.float32) % 1, r, ob(t + 1, images, **img),
                terminated=last and end == "terminated", truncated=last and end == "truncated")


def test_single_step_transitions_and_next_obs():
    buf = ReplayBuffer(state_space(), ACT, 100, seed=0)
    add_episode(buf, 0, 10, end="truncated")
    add_episode(buf, 100, 5, end="terminated")
    assert len(buf) == 15
    b = buf.sample(500)
    t = b.obs["state"][:, 0]
    np.testing.assert_array_equal(b.next_obs["state"][:, 0], t + 1)
    np.testing.assert_allclose(b.reward, t)
    # only the terminal step of episode 2 has zero discount; the truncated one bootstraps
    np.testing.assert_allclose(b.discount, np.where(t == 104, 0.0, 0.99).astype(np.float32))
    assert set(t.astype(int)) == set(range(10)) | set(range(100, 105))


def test_ring_overwrites_oldest_and_stays_consistent():
    buf = ReplayBuffer(state_space(), ACT, 16, seed=1)
    for ep in range(10):  # 10 episodes of 5 steps, each takes 6 slots (5 + final frame)
        add_episode(buf, 1000 * ep, 5, end="truncated" if ep % 2 else "terminated")
    assert len(buf) <= 16
    b = buf.sample(1000)
    t = b.obs["state"][:, 0].astype(int)
    np.testing.assert_array_equal(b.next_obs["state"][:, 0], t + 1)
    assert t.min() >= 7000  # episodes 0..6 are gone
    assert 9004 in set(t) and 9000 in set(t)
    # a broken episode prefix: only whole transitions, never a frame of another episode
    assert set(np.unique(t // 1000)) <= {7, 8, 9}


def test_images_stored_once():
    cap = 500
    buf = ReplayBuffer(image_space(), ACT, cap, seed=0)
    frame = 84 * 84 * 3
    assert buf.nbytes < cap * frame * 1.05  # one frame per slot, not obs + next_obs
    add_episode(buf, 0, 50, images=True, end="truncated")
    b = buf.sample(64)
    t = b.obs["state"][:, 0].astype(int)
    assert b.obs["front"].dtype == np.uint8 and b.obs["front"].shape == (64, 84, 84, 3)
    np.testing.assert_array_equal(b.obs["front"][:, 0, 0, 0], t % 256)
    np.testing.assert_array_equal(b.next_obs["front"][:, 0, 0, 0], (t + 1) % 256)


def test_n_step_returns_hand_computed():
    buf = ReplayBuffer(state_space(), ACT, 50, n_step=3, gamma=0.5, seed=0)
    add_episode(buf, 0, 4, rewards=[1.0, 2.0, 3.0, 4.0], end="terminated")
    add_episode(buf, 10, 4, rewards=[1.0, 2.0, 3.0, 4.0], end="truncated")
    b = buf.gather(np.arange(4))
    # t0: 1 + .5*2 + .25*3 = 2.75, bootstrap from obs 3 with .5**3
    # t1: 2 + .5*3 + .25*4 = 4.5, episode terminated inside the window: discount 0
    # t2: 3 + .5*4 = 5.0 (terminated); t3: 4 (terminated)
    np.testing.assert_allclose(b.reward, [2.75, 4.5, 5.0, 4.0])
    np.testing.assert_allclose(b.discount, [0.125, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(b.next_obs["state"][:, 0], [3, 4, 4, 4])
    # truncated episode (slots 5..8 after the pad at slot 4): bootstrap from the final frame
    b = buf.gather(np.arange(5, 9))
    np.testing.assert_array_equal(b.obs["state"][:, 0], [10, 11, 12, 13])
    np.testing.assert_allclose(b.reward, [2.75, 4.5, 5.0, 4.0])
    np.testing.assert_allclose(b.discount, [0.125, 0.125, 0.25, 0.5])
    np.testing.assert_array_equal(b.next_obs["state"][:, 0], [13, 14, 14, 14])


def test_n_step_stops_at_write_head():
    buf = ReplayBuffer(state_space(), ACT, 50, n_step=3, gamma=0.5, seed=0)
    add_episode(buf, 0, 2, rewards=[1.0, 2.0], end="none")  # episode still running
    b = buf.gather(np.arange(2))
    np.testing.assert_allclose(b.reward, [2.0, 2.0])  # 1 + .5*2 ; 2
    np.testing.assert_allclose(b.discount, [0.25, 0.5])
    np.testing.assert_array_equal(b.next_obs["state"][:, 0], [2, 2])
    buf.add(ob(2), [0, 0], 4.0, ob(3), False, False)  # the chain now reaches 3 steps
    np.testing.assert_allclose(buf.gather(np.arange(1)).reward, [1 + 1 + 1.0])


def test_stream_break_without_done_keeps_next_obs():
    buf = ReplayBuffer(state_space(), ACT, 50, seed=0)
    buf.add(ob(0), [0, 0], 0.0, ob(1), False, False)
    buf.add(ob(50), [0, 0], 0.0, ob(51), False, False)  # obs != previous next_obs
    b = buf.gather(np.array([0, 2]))
    np.testing.assert_array_equal(b.next_obs["state"][:, 0], [1, 51])
    assert len(buf) == 2


def test_add_rejects_bad_input():
    buf = ReplayBuffer(state_space(), ACT, 10)
    with pytest.raises(DatasetError, match="state"):
        buf.add({"state": np.zeros(4, np.float32)}, [0, 0], 0.0, ob(1), False, False)
    with pytest.raises(DatasetError, match="action"):
        buf.add(ob(0), [0, 0, 0], 0.0, ob(1), False, False)
    with pytest.raises(DatasetError, match="non-finite"):
        buf.add(ob(0), [np.nan, 0], 0.0, ob(1), False, False)


def test_save_load_round_trip_including_rng(tmp_path):
    buf = ReplayBuffer(image_space(8, 8), ACT, 40, n_step=2, seed=3)
    for ep in range(6):
        add_episode(buf, 100 * ep, 7, images=True, h=8, w=8, end="truncated" if ep % 2 else "terminated")
    buf.sample(5)  # advance the RNG
    buf.save(tmp_path / "replay")
    meta = json.loads((tmp_path / "replay" / "meta.json").read_text())
    assert meta["count"] == len(buf)
    other = ReplayBuffer(image_space(8, 8), ACT, 40, n_step=2, seed=99)
    other.load(tmp_path / "replay")
    assert other.state_equal(buf) and len(other) == len(buf)
    a, b = buf.sample(32), other.sample(32)
    for k in ("state", "front"):
        np.testing.assert_array_equal(a.obs[k], b.obs[k])
        np.testing.assert_array_equal(a.next_obs[k], b.next_obs[k])
    np.testing.assert_array_equal(a.reward, b.reward)
    np.testing.assert_array_equal(a.discount, b.discount)
    add_episode(buf, 900, 3, images=True, h=8, w=8)
    add_episode(other, 900, 3, images=True, h=8, w=8)
    assert other.state_equal(buf)


def test_load_errors(tmp_path):
    buf = ReplayBuffer(state_space(), ACT, 10)
    with pytest.raises(DatasetError, match="meta.json"):
        buf.load(tmp_path / "nothing")
    buf.add(ob(0), [0, 0], 0.0, ob(1), False, False)
    buf.save(tmp_path / "r")
    with pytest.raises(DatasetError, match="obs_spec"):
        ReplayBuffer(state_space(4), ACT, 10).load(tmp_path / "r")
    (tmp_path / "r" / "reward.npy").write_bytes(b"garbage")
    target, same = ReplayBuffer(state_space(), ACT, 10), ReplayBuffer(state_space(), ACT, 10)
    for b in (target, same):
        add_episode(b, 7, 3)
    with pytest.raises(DatasetError, match="reward.npy"):
        target.load(tmp_path / "r")
    assert target.state_equal(same)  # a failed load leaves the buffer as it was


def test_sample_empty_raises():
    from robolearn.errors import TrainingError

    with pytest.raises(TrainingError, match="empty"):
        ReplayBuffer(state_space(), ACT, 10).sample(4)


def test_mixed_sampler_proportions():
    online = ReplayBuffer(state_space(), ACT, 100, seed=0)
    prior = ReplayBuffer(state_space(), ACT, 100, seed=1)
    add_episode(online, 0, 20)  # t in [0, 20)
    add_episode(prior, 500, 20)  # t in [500, 520)
    for frac, expect in ((0.5, 128), (0.25, 64), (0.0, 0), (1.0, 256)):
        b = MixedSampler(online, prior, frac).sample(256)
        assert len(b) == 256
        assert int((b.obs["state"][:, 0] >= 500).sum()) == expect
    empty = ReplayBuffer(state_space(), ACT, 100)
    b = MixedSampler(empty, prior, 0.5).sample(10)  # no online data yet: all prior
    assert (b.obs["state"][:, 0] >= 500).all()
    with pytest.raises(DatasetError, match="do not match"):
        MixedSampler(online, ReplayBuffer(state_space(4), ACT, 10))


def demo_dict(n=6, dim=3, images=False):
    t = np.arange(n)
    d = {
        "obs": {"state": np.stack([ob(i)["state"] for i in t])},
        "next_obs": {"state": np.stack([ob(i + 1)["state"] for i in t])},
        "action": np.zeros((n, 2), np.float32),
        "reward": t.astype(np.float32),
        "terminated": t == n - 1,
        "truncated": np.zeros(n, bool),
    }
    return d


def test_transitions_to_buffer_loads_and_checks_shapes():
    buf = ReplayBuffer(state_space(), ACT, 50)
    transitions_to_buffer(demo_dict(), buf)
    assert len(buf) == 6
    b = buf.gather(np.arange(6))
    np.testing.assert_array_equal(b.next_obs["state"][:, 0], np.arange(1, 7))
    bad = demo_dict()
    bad["obs"]["state"] = np.zeros((6, 5), np.float32)
    with pytest.raises(DatasetError, match=r"obs\['state'\] has shape \(6, 5\), expected \(6, 3\)"):
        transitions_to_buffer(bad, ReplayBuffer(state_space(), ACT, 50))
    bad = demo_dict()
    bad["action"] = np.zeros((6, 4), np.float32)
    with pytest.raises(DatasetError, match="'action' has shape"):
        transitions_to_buffer(bad, ReplayBuffer(state_space(), ACT, 50))
    bad = demo_dict()
    del bad["reward"]
    with pytest.raises(DatasetError, match="reward"):
        transitions_to_buffer(bad, ReplayBuffer(state_space(), ACT, 50))
    imgbuf = ReplayBuffer(image_space(8, 8), ACT, 50)
    with pytest.raises(DatasetError, match="keys"):
        transitions_to_buffer(demo_dict(), imgbuf)
