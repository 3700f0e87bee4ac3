"""Tiny synthetic image datasets for reward-model tests (no simulator, a few seconds to train)."""
import gymnasium as gym
import numpy as np

from robolearn.data.dataset_writer import DatasetWriter

SIZE = 16


def frame(progress: float, lifted: bool, rng) -> np.ndarray:
    """A 16x16 frame: a bar whose length is the progress; a bright block on top when 'lifted'."""
    img = (rng.integers(0, 30, (SIZE, SIZE, 3))).astype(np.uint8)
    n = int(round(progress * (SIZE - 2)))
    img[SIZE - 4:SIZE - 2, 1:1 + n] = (0, 200, 0)
    if lifted:
        img[2:7, 5:11] = (230, 40, 40)
    else:
        img[9:13, 5:11] = (230, 40, 40)
    return img


def write_dataset(path, episodes=12, steps=12, seed=0, mark_instead=False, camera="front"):
    """Half the episodes succeed (block lifted from step steps//2 on), half never do. With
    `mark_instead`, successes are given only as per-step human marks (env success stays False)."""
    rng = np.random.default_rng(seed)
    obs_space = gym.spaces.Dict({"state": gym.spaces.Box(-1, 1, (2,), np.float32),
                                 camera: gym.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)})
    act_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    with DatasetWriter(path, env_id="test/Synthetic-v0", control_hz=10.0, observation_space=obs_space,
                       action_space=act_space, obs_mode="both") as w:
        for e in range(episodes):
            good = e % 2 == 0
            with w.start_episode(seed=e, device="test") as ep:
                ep.add_reset({"state": np.zeros(2, np.float32), camera: frame(0.0, False, rng)}, {})
                for t in range(1, steps + 1):
                    lifted = good and t >= steps // 2
                    p = t / steps if good else 0.3 * t / steps
                    obs = {"state": np.zeros(2, np.float32), camera: frame(p, lifted, rng)}
                    info = {"success": lifted and not mark_instead}
                    if mark_instead and lifted:
                        info["success_mark"] = True
                    ep.add_step(np.zeros(2, np.float32), obs, float(lifted), False, False, info)
                ep.finish(success=good, label_source="env")
    return path
