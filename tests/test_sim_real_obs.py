"""One observation per task on every backend (issue 10, item 1).

`state` and the camera keys are the same on `backend="sim"` and on the emulated hardware (the
servo-bus and car-controller emulators over real ptys); simulator truth is the opt-in
`privileged` key; an asymmetric critic reads it during sim training, the actor never does, so
the checkpoint acts on the hardware backend unchanged.
"""
import math

import cv2
import gymnasium as gym
import numpy as np
import pytest
import torch

from robolearn.data.dataset import load_transitions
from robolearn.data.dataset_writer import DatasetWriter
from robolearn.drivers.emulator_arm import ArmEmulator, ArmSimPlant
from robolearn.drivers.emulator_car import CarEmulator
from robolearn.registry import register_all
from robolearn.errors import ConfigError, DatasetError
from robolearn.policies.registry import make_agent
from robolearn.policies.train_config import TrainConfig
from robolearn.policies.trainer import Trainer
from robolearn.policies.checkpoints import load_policy

register_all()
HZ = 20.0                       # real-time episodes on the emulators: keep them short
ARM = {"reach": "robolearn/ArmReach-v0", "push": "robolearn/ArmPush-v0", "lift": "robolearn/ArmLift-v0"}
CAR = "robolearn/CarLap-v0"


class NoReward:
    """Reward source for push/lift/car on 'hardware' (no cube or track pose there)."""

    def reset(self):
        pass

    def __call__(self, obs, info):
        return 0.0, False


@pytest.fixture
def arm_emu(tmp_path):
    emu = ArmEmulator(plant=ArmSimPlant(control_hz=200.0), mounting="scrambled", seed=3).start()
    emu.cal_path = str(emu.calibration.save(tmp_path / "arm_calibration.json"))
    yield emu
    emu.close()


@pytest.fixture
def car_emu():
    emu = CarEmulator(timeout_ms=500).start()
    yield emu
    emu.close()


@pytest.fixture
def video(tmp_path):
    """A video file as the real camera source (OpenCVCamera reads it like a device)."""
    path = str(tmp_path / "front.avi")
    vw = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 30.0, (64, 48))
    for k in range(30):
        vw.write(np.full((48, 64, 3), 5 * k, np.uint8))
    vw.release()
    return path


def real_arm_kwargs(task, emu, **kw):
    kw = dict(backend="real", port=emu.path, calibration=emu.cal_path, control_hz=HZ, **kw)
    if task != "reach":
        kw["reward_source"] = NoReward()
    return kw


def real_car_kwargs(emu, **kw):
    return dict(backend="real", port=emu.path, reward_source=NoReward(), control_hz=HZ, **kw)


# -------------------------------------------------------------------- same spaces
@pytest.mark.parametrize("task", list(ARM))
def test_arm_spaces_equal_on_sim_and_emulated_real(task, arm_emu, video):
    for kw in ({}, {"obs": "both", "camera": "front", "image_size": (32, 40)}):
        sim = gym.make(ARM[task], **{k: v for k, v in kw.items()})
        real_kw = dict(kw, camera=video) if "camera" in kw else kw
        real = gym.make(ARM[task], **real_arm_kwargs(task, arm_emu, **real_kw))
        try:
            assert sim.observation_space == real.observation_space, (task, kw)
            assert sim.action_space == real.action_space
            assert "privileged" not in sim.observation_space.spaces
            if kw:
                assert sim.observation_space["front"].shape == (32, 40, 3)
        finally:
            sim.close()
            real.close()
    want = {"reach": 20, "push": 17, "lift": 14}[task]
    assert real.observation_space["state"].shape == (want,)


def test_car_spaces_equal_on_sim_and_emulated_real(car_emu, video):
    for kw in ({}, {"obs": "both", "image_size": (32, 40)}):
        sim = gym.make(CAR, control_hz=HZ, **kw)
        real = gym.make(CAR, **real_car_kwargs(car_emu, **kw, **({"camera": video} if kw else {})))
        try:
            assert sim.observation_space == real.observation_space, kw
            assert sim.observation_space["state"].shape == (10,)
        finally:
            sim.close()
            real.close()


def test_real_camera_names_must_be_the_sims(arm_emu, car_emu, video):
    with pytest.raises(ConfigError, match="camera name"):
        gym.make(ARM["reach"], **real_arm_kwargs("reach", arm_emu, obs="pixels", camera={"top": video}))
    with pytest.raises(ConfigError, match="one camera, 'front'"):
        gym.make(CAR, **real_car_kwargs(car_emu, obs="pixels", camera={"top": video}))


# ------------------------------------------------------------------ privileged key
@pytest.mark.parametrize("env_id,dim", [(ARM["reach"], 3), (ARM["push"], 16), (ARM["lift"], 13), (CAR, 6)])
def test_privileged_only_when_asked_in_sim(env_id, dim):
    env = gym.make(env_id)
    assert "privileged" not in env.observation_space.spaces
    obs, _ = env.reset(seed=0)
    assert "privileged" not in obs
    env.close()
    env = gym.make(env_id, privileged_obs=True)
    try:
        assert env.observation_space["privileged"].shape == (dim,)
        assert env.observation_space["privileged"].dtype == np.float32
        obs, _ = env.reset(seed=0)
        obs, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
        assert env.observation_space.contains(obs) and np.all(np.isfinite(obs["privileged"]))
    finally:
        env.close()


def test_privileged_obs_on_real_is_a_config_error(arm_emu, car_emu):
    for task in ARM:
        with pytest.raises(ConfigError, match="privileged_obs=True needs backend='sim'"):
            gym.make(ARM[task], **real_arm_kwargs(task, arm_emu, privileged_obs=True))
    with pytest.raises(ConfigError, match="privileged_obs=True needs backend='sim'"):
        gym.make(CAR, **real_car_kwargs(car_emu, privileged_obs=True))


# ------------------------------------------------------------ asymmetric learners
def _space(env_id):
    env = gym.make(env_id, privileged_obs=True)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def test_asymmetric_critic_reads_privileged_and_actor_does_not():
    obs_space, act_space = _space(ARM["lift"])
    s, p, a = 14, 13, 4
    small = dict(actor_hidden=(32,), critic_hidden=(32,))
    sym = make_agent("sac", obs_space, act_space, **small)       # default: privileged ignored
    asym = make_agent("sac", obs_space, act_space, privileged="critic", normalize_obs=True, **small)
    both = make_agent("sac", obs_space, act_space, privileged="actor_and_critic", **small)
    first = lambda net: next(m for m in net.modules() if hasattr(m, "weight") and m.weight.dim() >= 2)
    assert first(sym.critic.mlp).in_features == s + a and first(sym.actor.net).in_features == s
    assert first(asym.critic.mlp).in_features == s + p + a and first(asym.actor.net).in_features == s
    assert first(both.critic.mlp).in_features == s + p + a and first(both.actor.net).in_features == s + p

    # the critic's value depends on the privileged input; the actor acts from state alone
    rng = np.random.default_rng(0)
    o = {"state": torch.as_tensor(rng.normal(size=(8, s)), dtype=torch.float32),
         "privileged": torch.as_tensor(rng.normal(size=(8, p)), dtype=torch.float32)}
    act = torch.zeros(8, a)
    q1 = asym.critic(asym._with_privileged(asym._features(o), o), act)
    o2 = dict(o, privileged=o["privileged"] + 1.0)
    q2 = asym.critic(asym._with_privileged(asym._features(o2), o2), act)
    assert not torch.allclose(q1, q2)
    state_only = {"state": rng.normal(size=s).astype(np.float32)}
    assert asym.act(state_only, deterministic=True).shape == (a,)
    with pytest.raises(ConfigError, match="actor_and_critic"):
        both.act(state_only)
    # weights an actor receives hold no critic-side privileged statistics
    assert not any(k.startswith("priv_norm.") for k in asym.policy_state())


def test_asymmetric_update_uses_privileged_batch_and_resumes():
    from robolearn.data.replay import ReplayBuffer

    obs_space, act_space = _space(ARM["push"])
    agent = make_agent("sac", obs_space, act_space, privileged="critic", normalize_obs=True,
                       batch_size=16, actor_hidden=(32,), critic_hidden=(32,))
    buf = ReplayBuffer(obs_space, act_space, 100, n_step=3, gamma=0.9, seed=0)
    rng = np.random.default_rng(1)
    ob = lambda: {k: rng.normal(size=sp.shape).astype(np.float32) for k, sp in obs_space.spaces.items()}
    o = ob()
    for t in range(40):
        nxt = ob()
        buf.add(o, rng.uniform(-1, 1, 4).astype(np.float32), float(rng.normal()), nxt, False, t % 10 == 9)
        o = nxt
    batch = buf.sample(16)
    assert batch.obs["privileged"].shape == (16, 16) and batch.next_obs["privileged"].shape == (16, 16)
    for _ in range(3):
        m = agent.update(buf.sample(16))
    assert math.isfinite(m["critic_loss"])
    assert float(agent.priv_norm.count) == 48                   # privileged stats were learned
    twin = make_agent("sac", obs_space, act_space, privileged="critic", normalize_obs=True,
                      batch_size=16, actor_hidden=(32,), critic_hidden=(32,), )
    twin.load_state_dict(agent.state_dict())
    b = buf.sample(16)
    torch.testing.assert_close(twin.update(b)["critic_loss"], agent.update(b)["critic_loss"])
    # the full training state rebuilds an act-only agent for a space without `privileged`
    from robolearn.policies.registry import agent_from_state

    robot_space = gym.spaces.Dict({"state": obs_space["state"]})
    robot = agent_from_state(agent.state_dict(), robot_space, act_space)
    assert not robot.can_learn
    o = {"state": rng.normal(size=17).astype(np.float32)}
    np.testing.assert_array_equal(robot.act(o, deterministic=True), agent.act(o, deterministic=True))


def test_critic_mode_without_privileged_can_act_but_not_train():
    env = gym.make(ARM["push"])
    try:
        agent = make_agent("sac", env.observation_space, env.action_space, privileged="critic")
        assert agent.act(env.reset(seed=0)[0]).shape == (4,)
        with pytest.raises(ConfigError, match="privileged_obs=True"):
            agent.require_learning()
    finally:
        env.close()
    with pytest.raises(ConfigError, match="privileged_obs"):
        Trainer(TrainConfig(env=ARM["push"], algo="sac", steps=10, agent={"privileged": "critic"},
                            progress=False, video=False, out=None))
    with pytest.raises(ConfigError, match="privileged="):
        make_agent("sac", env.observation_space, env.action_space, privileged="yes")


# ----------------------------------------------------- sim checkpoint on real
def _train(tmp_path, env_id, privileged, **env_kwargs):
    cfg = TrainConfig(env=env_id, algo="sac", steps=150, learning_starts=50, eval_every=0,
                      eval_episodes=1, checkpoint_every=0, video=False, progress=False,
                      max_episode_steps=40, out=str(tmp_path / "run"),
                      env_kwargs={"control_hz": HZ, **env_kwargs},
                      agent={"privileged": privileged, "batch_size": 32, "actor_hidden": [32, 32],
                             "critic_hidden": [32, 32], "normalize_obs": True})
    trainer = Trainer(cfg)
    try:
        trainer.run()
    finally:
        trainer.close()
    return cfg.out


def _full_episode(policy, env):
    obs, _ = env.reset(seed=0)
    steps = 0
    while True:
        obs, r, term, trunc, info = env.step(policy(obs))
        steps += 1
        assert env.observation_space.contains(obs)
        if term or trunc:
            return steps


@pytest.mark.parametrize("task,privileged", [pytest.param("reach", "none", marks=pytest.mark.slow),
                                             ("push", "critic"),
                                             pytest.param("lift", "critic", marks=pytest.mark.slow)])
def test_sim_checkpoint_acts_on_emulated_real_arm(task, privileged, tmp_path, arm_emu):
    run = _train(tmp_path, ARM[task], privileged, privileged_obs=privileged != "none")
    policy, env, _ = load_policy(run, env_kwargs=real_arm_kwargs(task, arm_emu))
    try:
        assert env.unwrapped.backend.kind == "real" and "privileged" not in env.observation_space.spaces
        assert _full_episode(policy, env) == 40
    finally:
        env.close()


def test_sim_checkpoint_acts_on_emulated_real_car(tmp_path, car_emu):
    run = _train(tmp_path, CAR, "critic", privileged_obs=True)
    policy, env, _ = load_policy(run, env_kwargs=real_car_kwargs(car_emu))
    try:
        assert env.unwrapped.backend.kind == "real"
        assert _full_episode(policy, env) == 40
    finally:
        env.close()


def test_actor_and_critic_checkpoint_refuses_env_without_privileged(tmp_path, arm_emu):
    run = _train(tmp_path, ARM["reach"], "actor_and_critic", privileged_obs=True)
    policy, env, _ = load_policy(run)                             # sim with privileged: fine
    try:
        assert "privileged" in env.observation_space.spaces
        policy(env.reset(seed=0)[0])
    finally:
        env.close()
    with pytest.raises(ConfigError, match="actor_and_critic"):
        load_policy(run, env_kwargs={"privileged_obs": False})
    with pytest.raises(ConfigError, match="privileged_obs=True needs backend='sim'"):
        load_policy(run, env_kwargs=real_arm_kwargs("reach", arm_emu))


# ------------------------------------------------------------------- datasets
def test_sim_dataset_state_matches_real_and_privileged_is_optional(tmp_path):
    def record(root, **kw):
        env = gym.make(ARM["push"], **kw)
        with DatasetWriter(root, env_id=ARM["push"], control_hz=10.0, observation_space=env.observation_space,
                           action_space=env.action_space) as ds:
            ep = ds.start_episode(seed=0)
            obs, _ = env.reset(seed=0)
            ep.add_reset(obs)
            for _ in range(3):
                a = np.zeros(4, np.float32)
                obs, r, te, tr, info = env.step(a)
                ep.add_step(a, obs, r, te, tr, info)
            ep.finish()
        env.close()

    record(tmp_path / "plain")
    record(tmp_path / "priv", privileged_obs=True)
    plain = load_transitions(tmp_path / "plain")
    assert set(plain["obs"]) == {"state"} and plain["obs"]["state"].shape == (3, 17)
    full = load_transitions(tmp_path / "priv")
    assert set(full["obs"]) == {"state", "privileged"} and full["obs"]["privileged"].shape == (3, 16)
    np.testing.assert_array_equal(load_transitions(tmp_path / "priv", keys=["state"])["obs"]["state"],
                                  full["obs"]["state"])
    with pytest.raises(DatasetError, match="privileged_obs=True"):
        load_transitions(tmp_path / "plain", keys=["state", "privileged"])


# ------------------------------------------------------------- actor/learner runtime
def test_runtime_carries_privileged_to_learner_and_actor_never_needs_it(tmp_path):
    """Sim actors ship `privileged` in their transitions (checked against the env-spec
    fingerprint); the weights the learner publishes hold the actor only, and load into an
    agent built for an env without `privileged` (the robot's)."""
    from robolearn.runtime import messages as M
    from robolearn.runtime.config import config_from_dict
    from robolearn.runtime.learner import Learner

    env = gym.make(ARM["push"], privileged_obs=True)
    fp = M.env_fingerprint(ARM["push"], env.observation_space, env.action_space)
    assert fp["obs"]["dict"]["privileged"] == {"shape": [16], "dtype": "<f4"}
    obs, _ = env.reset(seed=0)
    items = []
    for i in range(4):
        a = np.zeros(4, np.float32)
        nxt, r, te, tr, info = env.step(a)
        items.append({"obs": obs, "next_obs": nxt, "action": a, "reward": r, "terminated": te,
                      "truncated": tr, "success": info["success"], "step": i})
        obs = nxt
    batch = M.decode(M.encode(M.TRANSITIONS, batch=M.stack_transitions(items), actor_id="a"))["batch"]
    assert M.check_transitions(batch, fp) == 4
    np.testing.assert_array_equal(batch["next_obs"]["privileged"][-1], obs["privileged"])

    learner_agent = make_agent("sac", env.observation_space, env.action_space, privileged="critic",
                               normalize_obs=True, actor_hidden=(16,), critic_hidden=(16,))
    env.close()
    weights = M.decode_weights(M.decode(M.encode_weights(learner_agent.policy_state(), 1, fp["hash"])))
    robot = gym.make(ARM["push"])                                   # no privileged key, like hardware
    try:
        actor_agent = make_agent("sac", robot.observation_space, robot.action_space, privileged="critic",
                                 normalize_obs=True, actor_hidden=(16,), critic_hidden=(16,))
        actor_agent.load_policy_state(weights)
        o = robot.reset(seed=1)[0]
        np.testing.assert_array_equal(actor_agent.act(o, deterministic=True),
                                      learner_agent.act(o, deterministic=True))
    finally:
        robot.close()
    # a learner whose env has no privileged key refuses the asymmetric critic up front
    cfg = config_from_dict({"env": ARM["push"], "out": str(tmp_path / "run"),
                            "learner": {"agent": {"privileged": "critic"}}})
    with pytest.raises(ConfigError, match="privileged_obs=True"):
        Learner(cfg)


def test_lift_rlpd_launch_file_is_a_declared_sim_only_study():
    """launch/sim_arm_lift_rlpd.toml learns lift from state, which needs the cube pose: it asks
    for the privileged observation in actor and critic, and says so."""
    from pathlib import Path

    from robolearn.policies.train_config import load_launch
    from robolearn.policies.env_building import make_env

    path = Path(__file__).resolve().parents[1] / "launch" / "sim_arm_lift_rlpd.toml"
    cfg = load_launch(path)
    assert cfg.env_kwargs == {"privileged_obs": True} and cfg.agent["privileged"] == "actor_and_critic"
    assert "SIM-ONLY" in path.read_text()
    env = make_env(cfg.env, cfg.obs, env_kwargs=cfg.env_kwargs)
    try:
        agent = make_agent(cfg.algo, env.observation_space, env.action_space, **cfg.agent)
        assert agent.actor.net[0].in_features == 14 + 13             # state + cube pose
    finally:
        env.close()


def test_asymmetric_run_resumes_with_privileged_replay(tmp_path):
    run = _train(tmp_path, ARM["lift"], "critic", privileged_obs=True)
    trainer = Trainer.resume(run, steps=180, progress=False, video=False)
    try:
        assert trainer.replay.spec["privileged"][0] == (13,)          # replay kept the key
        assert trainer.agent.priv_norm is not None and float(trainer.agent.priv_norm.count) > 0
        summary = trainer.run()
    finally:
        trainer.close()
    assert summary["env_steps"] == 180
