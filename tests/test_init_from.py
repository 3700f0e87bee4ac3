"""`init_from`: a new run starts from another run's last checkpoint (agent and replay), with its own
options and counters: continuing a finished training under a changed config (e.g. a [reality_gap])."""
import pytest
import torch

from robolearn.compose.training import build_trainer
from robolearn.errors import ConfigError
from robolearn.policies.checkpoints import find_checkpoint
from robolearn.policies.serialize import flatten_state, load_state
from robolearn.policies.train_config import TrainConfig

SMALL = {"actor_hidden": [32, 32], "critic_hidden": [32, 32], "batch_size": 32}


def _run(tmp_path, name, **kw):
    cfg = TrainConfig(env="robolearn/ArmReach-v0", algo="sac", steps=120, learning_starts=40,
                      eval_every=0, eval_episodes=1, checkpoint_every=0, video=False, progress=False,
                      out=str(tmp_path / name), agent=dict(SMALL), **kw)
    return build_trainer(cfg)


def test_the_new_run_starts_with_the_old_agent_and_replay(tmp_path):
    first = _run(tmp_path, "first")
    try:
        first.run()
    finally:
        first.close()
    ckpt = find_checkpoint(tmp_path / "first")
    gap = {"observation_noise": {"state_std": 0.01}}
    second = _run(tmp_path, "second", init_from=str(tmp_path / "first"), reality_gap=gap, buffer_size=None)
    try:
        saved_t, _ = flatten_state(load_state(ckpt / "agent.safetensors"))
        now_t, _ = flatten_state(second.agent.state_dict())
        assert saved_t.keys() == now_t.keys() and len(saved_t) > 10
        for k in saved_t:     # weights, targets, optimiser moments, temperature, RNG
            assert torch.equal(saved_t[k], now_t[k]), f"{k} was not carried over"
        assert len(second.replay) == len(first.replay) > 0          # the data carried over
        assert second.env_steps == 0 and second.updates == 0         # the counters are its own
        assert second.cfg.reality_gap == gap                         # and so are its options
        summary = second.run()
        assert summary["env_steps"] == 120 and second.updates > 0
    finally:
        second.close()


def test_a_missing_run_or_bad_value_is_a_clear_error(tmp_path):
    with pytest.raises(Exception, match="checkpoint|not found|no run"):
        _run(tmp_path, "x", init_from=str(tmp_path / "nothing-here"))
    with pytest.raises(ConfigError, match="init_from"):
        TrainConfig(init_from="").validate()


def test_load_agent_can_leave_out_the_runs_reality_gap(tmp_path):
    """A script that applies its own reality to the sim (scripts/push_camera_estimates.py --reality)
    loads a randomised run without its wrappers, which would reset that reality every episode."""
    from robolearn.policies.checkpoints import load_agent
    from robolearn.sim.randomization import ObservationNoise

    run = _run(tmp_path, "noisy", reality_gap={"observation_noise": {"state_std": 0.01}})
    try:
        run.run()
    finally:
        run.close()

    def wrapped(env):
        while env is not env.unwrapped:
            if isinstance(env, ObservationNoise):
                return True
            env = env.env
        return False

    _, env, _ = load_agent(tmp_path / "noisy")
    _, bare, _ = load_agent(tmp_path / "noisy", reality_gap=False)
    try:
        assert wrapped(env) and not wrapped(bare)
    finally:
        env.close()
        bare.close()
