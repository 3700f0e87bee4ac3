"""Human labels through a real pseudo-terminal keyboard: `g` marks "success now", Enter ends
with success; the reward source turns them into reward 1 + success, and `record` stores the mark."""
import os
import time

import numpy as np

from robolearn.rewards.human import HumanLabelReward
from robolearn.teleop.keyboard import KeyboardConfig, KeyboardDevice


def test_keyboard_marks_become_rewards(term):
    master, slave = term
    kb = KeyboardDevice(4, KeyboardConfig(fd=slave, absolute_dims=(3,)))
    try:
        labels = HumanLabelReward(kb)                 # it reads the device itself
        assert labels({}, {}) == (0.0, False)
        os.write(master, b"g")
        time.sleep(0.05)
        assert labels({}, {}) == (1.0, True)
        assert labels({}, {}) == (0.0, False)         # one mark, one step
        os.write(master, b"x")
        time.sleep(0.05)
        assert labels({}, {}) == (0.0, False) and labels.labels["failure"] == 1
        # shared with an intervention wrapper: the tap forwards reads and copies events
        tapped_labels = HumanLabelReward()
        tap = tapped_labels.tap(kb)
        os.write(master, b"\r")
        time.sleep(0.05)
        assert "success" in tap.read().events
        assert tapped_labels({}, {}) == (1.0, True)
    finally:
        kb.close()


def test_record_stores_success_marks(term, tmp_path):
    """`g` during recording -> `success_mark` on that step in data.npz."""
    import gymnasium as gym

    import robolearn.registry
    from robolearn.data.dataset import Dataset
    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.rewards.labels import frame_labels
    from robolearn.teleop.recorder import record

    robolearn.registry.register_all()
    master, slave = term
    env = gym.make("robolearn/ArmReach-v0", obs="state", max_episode_steps=5)
    kb = KeyboardDevice(4, KeyboardConfig(fd=slave, absolute_dims=(3,)))

    class Typist:  # types 'g' before the 3rd read, like a human watching the robot
        name = "keyboard"

        def __init__(self):
            self.n = 0

        def read(self, obs=None):
            self.n += 1
            if self.n == 3:
                os.write(master, b"g")
                time.sleep(0.05)
            return kb.read(obs)

        def reset(self):
            kb.reset()

        def close(self):
            kb.close()

        def help(self):
            return kb.help()

    try:
        with DatasetWriter(tmp_path / "d", env_id="robolearn/ArmReach-v0", control_hz=10.0,
                           observation_space=env.observation_space, action_space=env.action_space) as w:
            record(env, Typist(), w, episodes=1, seed=0)
        ep = Dataset(tmp_path / "d").episode(0)
        # a human episode starts at the operator's first input (issue 14 #9): the idle reads
        # before the `g` are not recorded, so the mark is on the first recorded step
        assert ep.data["success_mark"].tolist() == [True, False, False, False, False]
        assert frame_labels(ep).tolist() == [False, True, False, False, False, False]
    finally:
        kb.close()
        env.close()
