"""Domain randomization / reality-gap wrappers, on real simulated envs (dm_control, arm, car)."""
import os

import gymnasium as gym
import mujoco
import numpy as np
import pytest

import robolearn  # noqa: F401  (registers the IDs)
from robolearn.errors import ConfigError, InvalidActionError
from robolearn.sim.latency import ActionLatency, ControlRateJitter
from robolearn.sim.randomization import (DomainRandomization, DomainRandomizationConfig, ObservationNoise,
                                         RealityGapConfig, apply_reality_gap, make_with_reality_gap)

pytestmark = pytest.mark.filterwarnings("ignore:.*observation space (minimum|maximum) value is")
LAUNCH = os.path.join(os.path.dirname(__file__), "..", "launch", "reality_gap_arm.toml")
FULL_DR = DomainRandomizationConfig(
    mass_scale=(0.7, 1.3), friction_scale=(0.5, 1.5), actuator_gain_scale=(0.8, 1.2),
    joint_damping_scale=(0.5, 2.0), joint_damping_add=(0.0, 0.05), camera_pos_add=(-0.02, 0.02),
    camera_rot_deg=(-5.0, 5.0), light_pos_add=(-0.2, 0.2), light_diffuse_scale=(0.6, 1.4),
    surface_rgb_scale=(0.6, 1.4), texture_repeat_scale=(0.5, 2.0))
MODEL_FIELDS = ("body_mass", "body_inertia", "geom_friction", "actuator_gainprm", "actuator_biasprm",
                "dof_damping", "cam_pos", "cam_quat", "light_pos", "light_diffuse", "geom_rgba", "mat_rgba",
                "mat_texrepeat",
                # derived by mj_setConst: must follow the restored values too
                "body_subtreemass", "dof_invweight0", "body_invweight0")


def make(name="walker-walk", **kw):
    return gym.make(f"robolearn/dmc-{name}-v0", **kw)


def states_for(env, actions, seed):
    obs, _ = env.reset(seed=seed)
    out = [obs["state"]]
    infos = []
    for a in actions:
        obs, _, _, _, info = env.step(a)
        out.append(obs["state"])
        infos.append(info)
    return np.array(out), infos


# ------------------------------------------------------------------------ domain randomization
def test_parameters_differ_across_episodes_and_replay_from_the_seed():
    env = DomainRandomization(make(), FULL_DR)
    _, i1 = env.reset(seed=3)
    _, i2 = env.reset()
    _, i3 = env.reset(seed=3)
    v1, v2, v3 = i1["randomization"], i2["randomization"], i3["randomization"]
    assert set(v1) >= {"mass_scale", "friction_scale", "actuator_gain_scale", "joint_damping_scale",
                       "joint_damping_add", "camera_pos_add", "camera_rot_deg", "light_pos_add",
                       "light_diffuse_scale", "geom_rgb_scale", "material_rgb_scale",
                       "texture_repeat_scale"}
    for key in v1:
        np.testing.assert_array_equal(v1[key], v3[key])
        assert not np.array_equal(v1[key], v2[key]), key
    lo, hi = FULL_DR.mass_scale
    assert np.all((v1["mass_scale"] >= lo) & (v1["mass_scale"] <= hi))
    # the values are what the model holds, and also reported on every step
    m = env.unwrapped.sim.model
    np.testing.assert_allclose(m.body_mass, env.nominal["body_mass"] * v3["mass_scale"])
    np.testing.assert_allclose(m.geom_friction[:, 0], env.nominal["geom_friction"][:, 0] * v3["friction_scale"])
    assert m.body_subtreemass[0] == pytest.approx(m.body_mass.sum())  # derived constants follow
    _, _, _, _, info = env.step(np.zeros(6))
    np.testing.assert_array_equal(info["randomization"]["mass_scale"], v3["mass_scale"])


def test_randomization_changes_the_dynamics():
    actions = np.random.default_rng(0).uniform(-1, 1, size=(30, 6))
    plain, _ = states_for(make(), actions, seed=1)
    heavy = DomainRandomization(make(), DomainRandomizationConfig(mass_scale=(2.0, 2.5)))
    randomized, _ = states_for(heavy, actions, seed=1)
    assert np.abs(plain[-1] - randomized[-1]).max() > 1e-2


def test_shared_factor_when_not_per_element():
    env = DomainRandomization(make(), DomainRandomizationConfig(mass_scale=(0.5, 1.5), per_element=False))
    _, info = env.reset(seed=0)
    s = info["randomization"]["mass_scale"]
    assert np.all(s == s[0])


def test_nominal_values_are_restored_without_drift():
    env = DomainRandomization(make(obs="both", image_size=(24, 24)), FULL_DR)
    fresh = make().unwrapped.sim.model  # an untouched copy of the same model
    for seed in range(5):
        env.reset(seed=seed)
        env.step(np.zeros(6))
    m, d = env.unwrapped.sim.model, env.unwrapped.sim.data
    assert not np.allclose(m.body_mass, fresh.body_mass)
    state = (d.qpos.copy(), d.qvel.copy(), d.time)
    env.restore_nominal()
    # the simulation state is untouched by restoring (mj_setConst works on a copy)
    np.testing.assert_array_equal(d.qpos, state[0])
    np.testing.assert_array_equal(d.qvel, state[1])
    assert d.time == state[2]
    for name in MODEL_FIELDS:
        np.testing.assert_allclose(getattr(m, name), getattr(fresh, name), rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(m.vis.headlight.diffuse, fresh.vis.headlight.diffuse)
    # after many episodes, an episode's model is nominal x its own sample (no compounding)
    _, info = env.reset(seed=11)
    np.testing.assert_allclose(m.body_mass, fresh.body_mass * info["randomization"]["mass_scale"], rtol=1e-12)


def test_camera_and_light_jitter_change_the_image():
    cfg = DomainRandomizationConfig(camera_pos_add=(0.05, 0.1), camera_rot_deg=(4.0, 6.0),
                                    light_diffuse_scale=(0.3, 0.5))
    env = DomainRandomization(make(obs="pixels", image_size=(48, 48)), cfg)
    plain = make(obs="pixels", image_size=(48, 48))
    o_r, _ = env.reset(seed=0)
    o_p, _ = plain.reset(seed=0)
    assert np.abs(o_r["pixels"].astype(int) - o_p["pixels"].astype(int)).mean() > 3
    assert o_r["pixels"].mean() < o_p["pixels"].mean()  # dimmer lights
    env.close()
    plain.close()


def test_surface_colours_and_patterns_change_per_surface_and_restore():
    """The car's track: every strip of asphalt shares one colour before and after (one surface),
    walls and ground get their own draws, the ground's checker is resized, and the rendered
    frame changes; restoring gives the nominal colours back exactly."""
    from robolearn.sim.randomization import CAR_CAMERA_RANDOMIZATION, load_reality_gap
    env = gym.make("robolearn/CarLap-v0", obs="state", camera="front")
    m = env.unwrapped.sim.model
    nominal = m.geom_rgba.copy(), m.mat_rgba.copy(), m.mat_texrepeat.copy()
    cam = env.unwrapped.backend.cameras["front"]
    env.reset(seed=0)
    plain = cam.read().image.astype(int)
    dr = DomainRandomization(env, load_reality_gap(CAR_CAMERA_RANDOMIZATION).randomization)
    _, info = dr.reset(seed=0)
    v = info["randomization"]
    groups = np.unique(nominal[0], axis=0, return_inverse=True)[1].reshape(-1)
    asphalt = np.flatnonzero(np.all(np.isclose(nominal[0], [0.22, 0.22, 0.24, 1]), axis=1))
    assert len(asphalt) > 10 and np.unique(m.geom_rgba[asphalt], axis=0).shape[0] == 1
    assert np.unique(m.geom_rgba, axis=0).shape[0] == np.unique(groups).size  # one colour per surface
    lo, hi = CAR_CAMERA_RANDOMIZATION["randomization"]["surface_rgb_scale"]
    assert np.all((v["geom_rgb_scale"] >= lo) & (v["geom_rgb_scale"] <= hi))
    np.testing.assert_allclose(m.geom_rgba[:, :3], np.clip(nominal[0][:, :3] * v["geom_rgb_scale"], 0, 1))
    np.testing.assert_allclose(m.mat_texrepeat, nominal[2] * v["texture_repeat_scale"][:, None])
    assert not np.allclose(m.mat_rgba[:, :3], nominal[1][:, :3])
    assert np.abs(cam.read().image.astype(int) - plain).mean() > 3
    _, info2 = dr.reset(seed=1)
    assert not np.allclose(info2["randomization"]["geom_rgb_scale"], v["geom_rgb_scale"])
    dr.restore_nominal()
    for now, was in zip((m.geom_rgba, m.mat_rgba, m.mat_texrepeat), nominal):
        np.testing.assert_array_equal(now, was)
    dr.close()


def test_shared_surface_tint_when_not_per_element():
    env = DomainRandomization(make(), DomainRandomizationConfig(surface_rgb_scale=(0.5, 1.5), per_element=False))
    _, info = env.reset(seed=0)
    s = info["randomization"]["geom_rgb_scale"]
    assert np.all(s == s[0]) and not np.all(s[0] == s[0][0])  # one tint, its channels differ
    env.close()


def test_perception_renders_randomise_the_car_track_not_the_arm():
    from robolearn.sim.randomization import CAMERA_RANDOMIZATION, CAR_CAMERA_RANDOMIZATION, camera_randomization
    assert camera_randomization("robolearn/CarLap-v0") is CAR_CAMERA_RANDOMIZATION
    assert camera_randomization("robolearn/ArmLift-v0") is CAMERA_RANDOMIZATION
    assert camera_randomization("robolearn/ArmPush-v0") is CAMERA_RANDOMIZATION
    assert camera_randomization("my/Carton-v0") is CAMERA_RANDOMIZATION  # by ID, not by name
    assert "surface_rgb_scale" not in CAMERA_RANDOMIZATION["randomization"]


# ------------------------------------------------------------------------------ action latency
@pytest.mark.parametrize("k", [0, 1, 3])
def test_latency_k_an_action_takes_effect_exactly_k_steps_later(k):
    """Two runs differ only in the action given at step j: observations stay identical up to
    the observation returned by step j+k-1 and differ from the one returned by step j+k."""
    rng = np.random.default_rng(5)
    actions = rng.uniform(-1, 1, size=(12, 6))
    changed = actions.copy()
    j = 4
    changed[j] = -actions[j]
    a, ia = states_for(ActionLatency(make(), steps=k), actions, seed=2)
    b, ib = states_for(ActionLatency(make(), steps=k), changed, seed=2)
    # a[t + 1] is the observation returned by step t
    np.testing.assert_array_equal(a[: j + k + 1], b[: j + k + 1])
    assert np.abs(a[j + k + 1] - b[j + k + 1]).max() > 1e-4
    # the applied action is the one given k steps earlier (zeros before the first arrives)
    for t, info in enumerate(ia):
        expect = actions[t - k] if t >= k else np.zeros(6)
        np.testing.assert_array_equal(info["applied_action"], expect)
    assert ia[0]["randomization"]["latency_steps"] == k


def test_latency_ms_of_whole_periods_equals_step_latency():
    actions = np.random.default_rng(6).uniform(-1, 1, size=(10, 6))
    by_steps, _ = states_for(ActionLatency(make(), steps=2), actions, seed=0)
    by_ms, infos = states_for(ActionLatency(make(), ms=50.0), actions, seed=0)  # 2 x 25 ms
    np.testing.assert_array_equal(by_steps, by_ms)
    assert infos[0]["randomization"]["latency_steps"] == 2
    assert infos[0]["randomization"]["latency_substeps"] == 0


def test_latency_ms_applies_the_previous_action_for_part_of_the_period():
    """15 ms on walker (10 physics steps of 2.5 ms per period): the previous command drives
    the first 6 physics steps, the new one the last 4. Reference: the plain env stepped with
    n_substeps set by hand."""
    actions = np.random.default_rng(7).uniform(-1, 1, size=(15, 6))
    lat = ActionLatency(make(), ms=15.0)
    ref = make()
    o_l, info = lat.reset(seed=1)
    o_r, _ = ref.reset(seed=1)
    assert info["randomization"]["latency_substeps"] == 6
    assert info["randomization"]["latency_ms"] == pytest.approx(15.0)
    sim = ref.unwrapped.sim
    prev = np.zeros(6)
    for a in actions:
        o_l, *_ = lat.step(a)
        sim.n_substeps = 6
        ref.step(prev)
        sim.n_substeps = 4
        o_r, *_ = ref.step(a)
        sim.n_substeps = 10
        prev = a
        np.testing.assert_allclose(o_l["state"], o_r["state"], rtol=0, atol=1e-9)
    # and it is not the same as no latency
    plain, _ = states_for(make(), actions, seed=1)
    assert np.abs(plain[-1] - o_l["state"]).max() > 1e-3


def test_latency_rejects_bad_actions_when_given():
    env = ActionLatency(make(), steps=2)
    env.reset(seed=0)
    with pytest.raises(InvalidActionError):
        env.step(np.full(6, np.nan))


# -------------------------------------------------------------------------- control-rate jitter
def test_rate_jitter_varies_n_substeps_within_range_and_replays():
    env = ControlRateJitter(make(), period_scale=(0.8, 1.2))
    sim = env.unwrapped.sim
    assert env.substep_range == (8, 12)
    env.reset(seed=4)
    ns, t = [], sim.data.time
    for _ in range(60):
        *_, info = env.step(np.zeros(6))
        ns.append(info["n_substeps"])
        assert info["control_dt"] == pytest.approx(info["n_substeps"] * sim.model.opt.timestep)
    assert min(ns) >= 8 and max(ns) <= 12 and len(set(ns)) >= 4
    assert sim.data.time - t == pytest.approx(sum(ns) * sim.model.opt.timestep)
    assert sim.n_substeps == 10  # restored after every step
    env.reset(seed=4)
    again = [env.step(np.zeros(6))[4]["n_substeps"] for _ in range(60)]
    assert again == ns


# ---------------------------------------------------------------------------- observation noise
def test_observation_noise_on_state():
    actions = np.zeros((200, 6))
    clean, _ = states_for(make(), actions, seed=0)
    noisy_env = ObservationNoise(make(), state_std=0.05)
    noisy, _ = states_for(noisy_env, actions, seed=0)
    diff = (noisy - clean).ravel()
    assert diff.std() == pytest.approx(0.05, rel=0.1)
    assert abs(diff.mean()) < 0.01
    assert noisy.dtype == np.float32
    again, _ = states_for(noisy_env, actions, seed=0)
    np.testing.assert_array_equal(noisy, again)
    with pytest.raises(ConfigError, match="no state"):
        ObservationNoise(make(obs="pixels", image_size=(16, 16)), state_std=0.1)


# --------------------------------------------------------------------------- config and TOML
def test_toml_round_trip(tmp_path):
    cfg = RealityGapConfig.from_dict({
        "randomization": {"mass_scale": [0.8, 1.2], "camera_rot_deg": [-2, 2], "per_element": False},
        "observation_noise": {"state_std": 0.01},
        "latency": {"ms": 12.5},
        "rate_jitter": {"period_scale": [0.9, 1.1]},
    })
    path = tmp_path / "gap.toml"
    path.write_text(cfg.to_toml())
    back = RealityGapConfig.from_toml(path)
    assert back == cfg
    assert back.randomization.mass_scale == (0.8, 1.2) and back.latency.ms == 12.5
    assert RealityGapConfig.from_toml(LAUNCH).enabled


@pytest.mark.parametrize("table,match", [
    ({"randomisation": {}}, "unknown key"),
    ({"randomization": {"mass": [0.8, 1.2]}}, "mass"),
    ({"randomization": {"mass_scale": [1.2, 0.8]}}, "swap"),
    ({"randomization": {"mass_scale": [0.0, 1.2]}}, "> 0"),
    ({"randomization": {"friction_scale": 1.2}}, r"\[low, high\]"),
    ({"randomization": {"joint_damping_add": [-0.1, 0.1]}}, ">= 0"),
    ({"randomization": {"camera_rot_deg": [-200, 0]}}, "180"),
    ({"randomization": {"surface_rgb_scale": [-0.1, 1.2]}}, ">= 0"),
    ({"randomization": {"texture_repeat_scale": [0.0, 2.0]}}, "> 0"),
    ({"latency": {"steps": 1, "ms": 10}}, "not both"),
    ({"latency": {"steps": -1}}, "latency.steps"),
    ({"latency": {"steps": 1.5}}, "latency.steps"),
    ({"observation_noise": {"state_std": -0.1}}, "state_std"),
    ({"rate_jitter": {"period_scale": [0.9, float("inf")]}}, "finite"),
    ({"latency": 3}, "table"),
])
def test_bad_config_raises(table, match):
    with pytest.raises(ConfigError, match=match):
        RealityGapConfig.from_dict(table)


def test_bad_files_raise(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        RealityGapConfig.from_toml(tmp_path / "missing.toml")
    p = tmp_path / "no_section.toml"
    p.write_text("[train]\nsteps = 3\n")
    with pytest.raises(ConfigError, match=r"no \[reality_gap\]"):
        RealityGapConfig.from_toml(p)
    p.write_text("[reality_gap\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        RealityGapConfig.from_toml(p)


def test_apply_reality_gap_from_a_toml_file():
    env = apply_reality_gap(make(), LAUNCH, seed=0)
    _, info = env.reset(seed=1)
    r = info["randomization"]
    assert "mass_scale" in r and "obs_noise_std" in r and "latency_steps" in r
    *_, info = env.step(np.zeros(6))
    assert "applied_action" in info
    env = apply_reality_gap(make(), {"rate_jitter": {"period_scale": [0.5, 0.6]}}, seed=0)
    env.reset(seed=0)
    assert env.step(np.zeros(6))[4]["n_substeps"] in (5, 6)
    assert apply_reality_gap(make(), RealityGapConfig()).__class__.__name__ != "DomainRandomization"
    env = make_with_reality_gap("robolearn/dmc-walker-walk-v0", LAUNCH, seed=0, action_repeat=2)
    assert env.unwrapped.action_repeat == 2 and "mass_scale" in env.reset(seed=0)[1]["randomization"]
    with pytest.raises(ConfigError, match="unknown key"):
        make_with_reality_gap("robolearn/dmc-walker-walk-v0", {"latncy": {"steps": 1}})


# --------------------------------------------------------------------- envs without the contract
class _NoSim(gym.Env):
    observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-1, 1, (1,))})
    action_space = gym.spaces.Box(-1, 1, (1,))


class _IgnoresSubsteps(gym.Env):
    """A real MuJoCo sim whose step always runs 5 physics steps, whatever sim.n_substeps says."""

    observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (1,))})
    action_space = gym.spaces.Box(-1, 1, (1,))

    def __init__(self):
        xml = """<mujoco><worldbody><body><joint name="j" type="slide"/><geom size=".1"/></body>
                 </worldbody><actuator><motor joint="j"/></actuator></mujoco>"""
        model = mujoco.MjModel.from_xml_string(xml)
        self.sim = type("Sim", (), {})()
        self.sim.model, self.sim.data, self.sim.n_substeps = model, mujoco.MjData(model), 5

    def reset(self, *, seed=None, options=None):
        mujoco.mj_resetData(self.sim.model, self.sim.data)
        return {"state": np.zeros(1, np.float32)}, {}

    def step(self, action):
        self.sim.data.ctrl[:] = action
        mujoco.mj_step(self.sim.model, self.sim.data, nstep=5)
        return {"state": self.sim.data.qpos.astype(np.float32)}, 0.0, False, False, {}


def test_wrappers_need_a_sim_and_check_that_n_substeps_is_honoured():
    with pytest.raises(ConfigError, match="simulated env"):
        DomainRandomization(_NoSim(), FULL_DR)
    with pytest.raises(ConfigError, match="simulated env"):
        ControlRateJitter(_NoSim(), (0.9, 1.1))
    ActionLatency(_NoSim(), steps=1)  # whole-step latency works on any env (hardware too)
    env = ControlRateJitter(_IgnoresSubsteps(), (0.5, 0.6))
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="ignores sim.n_substeps"):
        env.step(np.zeros(1))


# ------------------------------------------------------------- the robot tasks (arm, RC car)
ROBOT_IDS = ["robolearn/ArmReach-v0", "robolearn/CarLap-v0"]


def _robot(env_id):
    if env_id not in gym.registry:
        pytest.fail(f"{env_id} is not registered (robolearn envs): the wrappers must be shown on it")
    return gym.make(env_id)


@pytest.mark.parametrize("env_id", ROBOT_IDS)
def test_domain_randomization_on_robot_tasks(env_id):
    env = DomainRandomization(_robot(env_id), FULL_DR)
    fresh = gym.make(env_id).unwrapped.sim.model
    n = env.action_space.shape[0]
    _, i1 = env.reset(seed=5)
    for _ in range(3):
        *_, info = env.step(np.zeros(n))
    np.testing.assert_array_equal(info["randomization"]["mass_scale"], i1["randomization"]["mass_scale"])
    _, i2 = env.reset()
    _, i3 = env.reset(seed=5)
    for key in ("mass_scale", "friction_scale", "actuator_gain_scale", "camera_rot_deg"):
        np.testing.assert_array_equal(i1["randomization"][key], i3["randomization"][key])
        assert not np.array_equal(i1["randomization"][key], i2["randomization"][key])
    m = env.unwrapped.sim.model
    np.testing.assert_allclose(m.body_mass, fresh.body_mass * i3["randomization"]["mass_scale"], rtol=1e-12)
    env.restore_nominal()
    for name in MODEL_FIELDS:
        np.testing.assert_allclose(getattr(m, name), getattr(fresh, name), rtol=1e-12, atol=1e-12, err_msg=name)
    env.close()


@pytest.mark.parametrize("env_id", ROBOT_IDS)
def test_latency_k_on_robot_tasks(env_id):
    k, j = 2, 3
    probe = _robot(env_id)
    n = probe.action_space.shape[0]
    probe.close()
    actions = np.random.default_rng(9).uniform(-1, 1, size=(10, n))
    changed = actions.copy()
    changed[j] = -actions[j]
    a, ia = states_for(ActionLatency(gym.make(env_id), steps=k), actions, seed=4)
    b, _ = states_for(ActionLatency(gym.make(env_id), steps=k), changed, seed=4)
    np.testing.assert_array_equal(a[: j + k + 1], b[: j + k + 1])
    assert np.abs(a[j + k + 1] - b[j + k + 1]).max() > 1e-5
    np.testing.assert_array_equal(ia[j + k]["applied_action"], actions[j])


@pytest.mark.parametrize("env_id", ROBOT_IDS)
def test_observation_noise_on_robot_tasks(env_id):
    env = ObservationNoise(_robot(env_id), state_std=0.02)
    clean = gym.make(env_id)
    n = env.action_space.shape[0]
    zeros = np.zeros((30, n))
    noisy, _ = states_for(env, zeros, seed=0)
    plain, _ = states_for(clean, zeros, seed=0)
    d = (noisy - plain).ravel()
    assert 0.015 < d.std() < 0.025


def test_rate_jitter_and_ms_latency_on_the_car():
    env = apply_reality_gap(_robot("robolearn/CarLap-v0"),
                            {"latency": {"ms": 30.0}, "rate_jitter": {"period_scale": [0.8, 1.2]}})
    sim = env.unwrapped.sim
    _, info = env.reset(seed=0)
    assert info["randomization"]["latency_steps"] == 0 and info["randomization"]["latency_substeps"] == 15
    t0, ns = sim.data.time, []
    for _ in range(20):
        *_, info = env.step(np.array([0.0, 0.5]))
        ns.append(info["n_substeps"])
    assert min(ns) >= 20 and max(ns) <= 30 and len(set(ns)) > 2
    assert sim.data.time - t0 == pytest.approx(sum(ns) * sim.model.opt.timestep)


def test_rate_jitter_on_the_arm():
    env = ControlRateJitter(_robot("robolearn/ArmReach-v0"), (0.8, 1.2))
    sim = env.unwrapped.sim
    env.reset(seed=0)
    t0, ns = sim.data.time, []
    for _ in range(10):
        *_, info = env.step(np.zeros(env.action_space.shape))
        ns.append(info["n_substeps"])
    assert sim.data.time - t0 == pytest.approx(sum(ns) * sim.model.opt.timestep)


def test_example_launch_file_runs_on_the_arm():
    env = apply_reality_gap(_robot("robolearn/ArmReach-v0"), LAUNCH, seed=0)
    obs, info = env.reset(seed=1)
    r = info["randomization"]
    assert {"mass_scale", "actuator_gain_scale", "obs_noise_std", "latency_steps"} <= set(r)
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs) and np.isfinite(reward)
    env.close()
