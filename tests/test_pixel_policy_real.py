"""A pixel policy trained in sim acts on the emulated hardware with no change.

The checkpoint is trained briefly (tiny budget: this checks the plumbing, not learning) with
`obs="pixels"` on the sim; the same run folder is then loaded with `load_policy` and drives
`backend="real"` against the arm emulator (a *reality* that differs from the sim), reading
its camera as MJPEG over HTTP through `OpenCVCamera`, for a full episode.
"""
import gymnasium as gym
import numpy as np
import pytest

from robolearn.drivers.emulation import start_emulator
from robolearn.registry import register_all
from robolearn.policies.train_config import TrainConfig
from robolearn.policies.trainer import Trainer
from robolearn.policies.checkpoints import load_policy

register_all()
REACH = "robolearn/ArmReach-v0"
ENV_KW = {"image_size": [32, 32], "camera": "front", "control_hz": 20}


@pytest.mark.timeout(120)
def test_pixel_checkpoint_from_sim_runs_a_full_episode_on_emulated_hardware(tmp_path):
    cfg = TrainConfig(env=REACH, algo="sac", obs="pixels", steps=24, learning_starts=12, seed=0,
                      max_episode_steps=12, eval_every=0, eval_episodes=1, checkpoint_every=0,
                      progress=False, video=False, env_kwargs=dict(ENV_KW),
                      agent={"batch_size": 8}, out=str(tmp_path / "run"))
    trainer = Trainer(cfg)
    try:
        trainer.run()
    finally:
        trainer.close()
    act, sim_env, _ = load_policy(tmp_path / "run")
    sim_space = sim_env.observation_space
    sim_env.close()

    with start_emulator("arm", reality="mild") as robot:
        env = gym.make(REACH, backend="real", port=robot.port, obs="pixels", max_episode_steps=12,
                       camera={"front": robot.camera_urls["front"]}, image_size=(32, 32), control_hz=20)
        try:
            assert env.observation_space == sim_space
            obs, _ = env.reset(seed=0)
            steps = 0
            while True:
                a = act(obs)
                assert env.action_space.contains(np.asarray(a, np.float32))
                obs, reward, term, trunc, info = env.step(a)
                assert env.observation_space.contains(obs) and np.isfinite(reward)
                steps += 1
                if term or trunc:
                    break
            assert trunc or term
            assert steps == 12 or (term and info["success"])
        finally:
            env.close()
