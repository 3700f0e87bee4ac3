"""CarLap-v0, the simulated RC car and its track: contract, physics sanity, info, errors."""
import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from robolearn.registry import register_all
from robolearn.errors import ConfigError, InvalidActionError
from robolearn.robot import Car
from robolearn.sim.car import MAX_STEER, CarSim
from robolearn.sim.track import Piece, Track, rounded_rectangle
from robolearn.compose.envs import make_car_env
from robolearn.tasks.car import ENV_ID

INFO_KEYS = ("lap_time", "best_lap_time", "laps", "collisions", "checkpoint", "off_track",
             "progress", "success", "t_obs", "overrun")


@pytest.fixture(scope="module", autouse=True)
def _registered():
    register_all()


def _make(**kw):
    return gym.make(ENV_ID, **kw)


# ---------------------------------------------------------------------------- contract
def test_listed_and_passes_check_env_state():
    assert ENV_ID in gym.registry
    env = _make()
    try:
        assert env.spec.max_episode_steps >= 1000
        assert env.unwrapped.metadata["control_hz"] == 20.0
        # state: what the car measures (odometry, steer, IMU, last action); no track position
        assert env.observation_space["state"].shape == (10,)
        assert set(env.observation_space.spaces) == {"state"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_track_entries_are_privileged():
    env = _make(privileged_obs=True)
    try:
        assert env.observation_space["privileged"].shape == (6,)
        obs, _ = env.reset(seed=0)
        lateral, s_h, c_h = obs["privileged"][:3]
        assert abs(lateral) < 0.5 and s_h ** 2 + c_h ** 2 == pytest.approx(1.0, abs=1e-5)
        assert env.observation_space.contains(obs)
    finally:
        env.close()
    with pytest.raises(ConfigError, match="privileged_obs=True"):
        _make(privileged_state=True)


def test_check_env_pixels_and_both():
    env = _make(obs="pixels", image_size=(32, 32))
    try:
        assert set(env.observation_space.spaces) == {"front"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_env(env.unwrapped, skip_render_check=True)
        obs, _ = env.reset(seed=1)
        img = obs["front"]
        assert img.shape == (32, 32, 3) and img.dtype == np.uint8
        assert img.std() > 5, "the first-person camera should see track, walls and sky"
    finally:
        env.close()
    env = _make(obs="both", image_size=(16, 16))
    try:
        obs, _ = env.reset(seed=0)
        # pixels/both policies must transfer to hardware: proprioception only in `state`
        assert obs["state"].shape == (10,) and obs["front"].shape == (16, 16, 3)
    finally:
        env.close()


def test_car_sim_implements_protocol_and_handle():
    sim = CarSim()
    try:
        assert isinstance(sim, Car)
        assert sim.n_substeps == 25 and sim.model.opt.timestep == 0.002
        assert 3.5 <= sim.spec.mass <= 4.5 and abs(sim.spec.wheelbase - 0.26) < 1e-9
        img = sim.render(48, 64)
        assert img.shape == (48, 64, 3) and img.dtype == np.uint8 and img.std() > 5
    finally:
        sim.close()


def test_render_rgb_array_chase_view():
    env = _make(render_mode="rgb_array")
    try:
        env.reset(seed=0)
        frame = env.render()
        assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
        # the car (blue body) is in the middle-lower part of the chase view
        mid = frame[100:220, 110:210].astype(int)
        blue = (mid[..., 2] > 150) & (mid[..., 0] < 80)
        assert blue.sum() > 200
    finally:
        env.close()


# ------------------------------------------------------------------------- determinism
def _rollout(seed, n=60):
    env = _make(privileged_obs=True)
    try:
        obs, _ = env.reset(seed=seed)
        out = [obs["state"].copy(), obs["privileged"]]
        rng = np.random.default_rng(123)
        for _ in range(n):
            a = np.array([rng.uniform(-0.3, 0.3), rng.uniform(0.2, 0.8)], dtype=np.float32)
            obs, r, *_ = env.step(a)
            out.append(np.concatenate((obs["state"], obs["privileged"], [r])))
        return np.concatenate(out)
    finally:
        env.close()


def test_deterministic_given_seed_and_seeds_differ():
    a, b, c = _rollout(3), _rollout(3), _rollout(4)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c), "seeded start poses must differ between seeds"


# -------------------------------------------------------------------- info, reward, laps
def test_info_keys_and_progress_reward():
    env = _make()
    try:
        _, info = env.reset(seed=0)
        p0 = info["progress"]
        for k in INFO_KEYS:
            assert k in info, k
        assert info["lap_time"] is None and info["laps"] == 0 and info["checkpoint"] == -1
        assert info["progress"] < 0  # behind the start line
        total = 0.0
        for _ in range(40):
            _, r, term, trunc, info = env.step(np.array([0.0, 0.6], dtype=np.float32))
            total += r
        for k in INFO_KEYS:
            assert k in info, k
        assert not term and not trunc
        assert isinstance(info["collisions"], int) and isinstance(info["off_track"], bool)
        assert info["checkpoint"] >= 0, "driving forward crosses the start line"
        assert total > 2.0, "progress reward should add up to the metres driven"
        assert abs(total - (info["progress"] - p0)) < 1e-9
        speed = env.unwrapped.sim.read().speed
        assert speed > 1.0
    finally:
        env.close()


def test_reverse_gives_negative_reward():
    env = _make()
    try:
        env.reset(seed=0)
        total = sum(env.step(np.array([0.0, -0.5], dtype=np.float32))[1] for _ in range(20))
        assert total < -0.3
    finally:
        env.close()


def _drive_into_wall(env, n=80):
    hits, terms = [], []
    for _ in range(n):
        _, _, term, trunc, info = env.step(np.array([1.0, 0.7], dtype=np.float32))
        hits.append(info["collisions"])
        terms.append(term)
        if term:
            break
    return hits, terms, info


def test_collisions_counted_without_ending_episode():
    env = _make()
    try:
        env.reset(seed=0)
        hits, terms, info = _drive_into_wall(env)
        assert hits[0] == 0 and not any(terms)
        # pinned against the wall for seconds: one collision, not one per step
        assert hits[-1] == 1 and env.unwrapped.sim.wall_contact
        # back off and drive into the other wall: a new collision is counted
        for _ in range(25):
            env.step(np.array([0.0, -0.6], dtype=np.float32))
        for _ in range(60):
            info = env.step(np.array([-1.0, 0.8], dtype=np.float32))[4]
        assert info["collisions"] >= 2
    finally:
        env.close()


def test_end_on_collision_terminates():
    env = _make(end_on_collision=True)
    try:
        env.reset(seed=0)
        hits, terms, info = _drive_into_wall(env)
        assert terms[-1] and info["collisions"] == 1
    finally:
        env.close()


def test_collision_penalty_applies_on_new_contact():
    env = _make(collision_penalty=5.0, end_on_collision=True)
    try:
        env.reset(seed=0)
        r = None
        for _ in range(80):
            _, r, term, _, _ = env.step(np.array([1.0, 0.7], dtype=np.float32))
            if term:
                break
        assert term and r < -4.0
    finally:
        env.close()


# ------------------------------------------------------------------------------ physics
def test_imu_and_odometry_consistent():
    sim = CarSim()
    try:
        x0, y0, _ = sim.pose()
        st = sim.read()
        assert abs(st.accel[2] - 9.81) < 0.3 and np.allclose(st.gyro, 0, atol=1e-3)
        for _ in range(30):        # gentle throttle: rolling without wheel spin
            sim.command(0.0, 0.3)
            sim.advance(0.05)
        x1, y1, _ = sim.pose()
        st = sim.read()
        dist = math.hypot(x1 - x0, y1 - y0)
        assert dist > 0.5 and abs(st.odometer - dist) < 0.05 * dist
        assert st.speed > 0.5
        # turning left: positive yaw rate about body z, matching the pose's yaw change
        yaws = []
        for _ in range(6):
            sim.command(0.3, 0.3)
            sim.advance(0.05)
            yaws.append(sim.pose()[2])
        rate = (yaws[-1] - yaws[-3]) / 0.1
        assert sim.read().gyro[2] > 0.3 and abs(sim.read().gyro[2] - rate) < 0.25 * abs(rate)
    finally:
        sim.close()


def test_ackermann_inner_wheel_steers_more_and_servo_is_rate_limited():
    sim = CarSim()
    try:
        sim.command(0.4, 0.0)
        sim.advance(0.01)
        fl, fr = sim.data.joint("steer_fl").qpos[0], sim.data.joint("steer_fr").qpos[0]
        assert 0 < fl < 0.4, "a servo cannot reach the target within 10 ms"
        sim.advance(0.4)
        fl, fr = sim.data.joint("steer_fl").qpos[0], sim.data.joint("steer_fr").qpos[0]
        assert fl > fr > 0.3, "turning left, the left (inner) wheel steers more"
        assert abs(sim.read().steer - 0.4) < 0.06
    finally:
        sim.close()


def test_top_speed_and_sliding():
    track = Track(rounded_rectangle(long=30.0, short=6.0, radius=2.5), width=4.0)
    sim = CarSim(track=track)
    try:
        sim.reset_pose(-14.0, 0.0, 0.0)
        sim.command(0.0, 1.0)
        sim.advance(3.0)
        v = sim.read().speed
        assert 3.5 < v < 5.0, f"top speed {v:.2f} m/s"
        # full lock at speed: the tyres slide, yaw rate far below the kinematic v tan(d) / L
        sim.command(MAX_STEER, 1.0)
        sim.advance(0.25)
        st = sim.read()
        kinematic = st.speed * math.tan(st.steer) / sim.spec.wheelbase
        assert 0.2 < st.gyro[2] < 0.6 * kinematic
    finally:
        sim.close()


def test_wheel_spin_on_low_friction():
    track = Track(rounded_rectangle(long=30.0, short=6.0, radius=2.5), width=4.0)
    sim = CarSim(track=track, friction=0.3)
    try:
        sim.reset_pose(-14.0, 0.0, 0.0)
        sim.command(0.0, 1.0)
        sim.advance(0.05)
        moved = sim.pose()[0] + 14.0
        assert sim.read().odometer > 3 * moved > 0
    finally:
        sim.close()


# ------------------------------------------------------------------------------- track
CLOCKWISE = tuple(Piece(p.length, p.radius, -p.angle) for p in rounded_rectangle())


@pytest.mark.parametrize("pieces", [None, CLOCKWISE], ids=["ccw", "cw"])
def test_track_projection_round_trip(pieces):
    tr = Track(pieces)
    assert abs(tr.length - (8.0 + 3.0 + 2 * math.pi)) < 1e-9
    rng = np.random.default_rng(0)
    for s in rng.uniform(0, tr.length, 200):
        lat = rng.uniform(-0.5, 0.5)
        x, y, th = tr.point_at(s)
        px, py = x - lat * math.sin(th), y + lat * math.cos(th)
        s2, lat2, piece, head = tr.project(px, py)
        ds = (s2 - s + tr.length / 2) % tr.length - tr.length / 2
        assert abs(ds) < 1e-9 and abs(lat2 - lat) < 1e-9
        assert abs(tr.heading_error(th + 0.2, head) - 0.2) < 1e-9
        # local search from a neighbouring piece's hint finds the same point
        for hint in (piece - 1, piece, piece + 1):
            s3, lat3, _, _ = tr.project(px, py, hint=hint)
            assert abs((s3 - s2 + tr.length / 2) % tr.length - tr.length / 2) < 1e-9
            assert abs(lat3 - lat2) < 1e-9
    # the dense polyline agrees with the exact geometry
    i = 123
    assert tr.project(*tr.points[i])[0] == pytest.approx(tr.s[i], abs=1e-9)
    assert list(tr.checkpoints_s[:2]) == [0.0, tr.length / tr.n_checkpoints]
    assert tr.max_curvature(0.0, 1.0) == 0.0 and tr.max_curvature(0.0, 2.5) == 1.0
    assert tr.curvature_at(2.5) == (1.0 if pieces is None else -1.0)


def test_clockwise_track_lap():
    env = _make(track=Track(CLOCKWISE))
    try:
        obs, _ = env.reset(seed=0)
        driver = env.unwrapped.scripted_controller()
        for _ in range(260):
            obs, _, _, _, info = env.step(driver.act(obs))
        assert info["laps"] == 1 and info["collisions"] == 0
    finally:
        env.close()


def test_track_must_close_and_be_wide_enough():
    with pytest.raises(ConfigError, match="do not close"):
        Track((Piece(2.0), Piece(radius=1.0, angle=math.pi)))
    with pytest.raises(ConfigError, match="radius"):
        Track(rounded_rectangle(radius=0.3), width=1.0)
    with pytest.raises(ConfigError, match="width"):
        Track(width=0.1)


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("kwargs, match", [
    ({"obs": "rgb"}, "obs"),
    ({"control_hz": 0}, "control_hz"),
    ({"control_hz": "fast"}, "control_hz"),
    ({"backend": "mars"}, "backend"),
    ({"bogus": 1}, "bogus"),
    ({"port": "/dev/ttyUSB0"}, "port"),
    ({"camera": "rear"}, "camera"),
    ({"image_size": (0, 84)}, "image_size"),
    ({"image_size": "big"}, "image_size"),
    ({"end_on_collision": "yes"}, "end_on_collision"),
    ({"collision_penalty": -1}, "collision_penalty"),
    ({"friction": 100.0}, "friction"),
    ({"timestep": 1.0}, "timestep"),
    ({"backend": "real", "port": "/dev/null"}, "reward_source"),
    ({"backend": "real", "reward_source": object()}, "port"),
])
def test_bad_kwargs_raise_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make_car_env(**kwargs)


def test_bad_actions_raise():
    env = _make()
    try:
        env.reset(seed=0)
        for bad in ([np.nan, 0.0], [0.0, 1.5], [0.0]):
            with pytest.raises(InvalidActionError):
                env.step(np.array(bad, dtype=np.float32))
        sim = env.unwrapped.sim
        with pytest.raises(InvalidActionError, match="steer"):
            sim.command(MAX_STEER + 0.1, 0.0)
        with pytest.raises(InvalidActionError, match="finite"):
            sim.command(0.0, math.inf)
    finally:
        env.close()


# ------------------------------------------------------------------------ real backend
def test_real_backend_against_emulator():
    import robolearn.drivers.emulator_car as emu_mod

    class Progress:
        """Reward source stand-in that a real run would replace (e.g. a classifier)."""

        def __init__(self):
            self.calls = 0

        def reset(self):
            self.calls = 0

        def __call__(self, obs, info):
            self.calls += 1
            return float(obs["state"][0]), self.calls >= 3

    with emu_mod.CarEmulator(plant=emu_mod.BicyclePlant()) as emu:
        env = make_car_env(backend="real", port=emu.path, reward_source=Progress())
        try:
            obs, info = env.reset(seed=0)
            assert obs["state"].shape == (10,)
            with pytest.raises(ConfigError, match="pure-pursuit"):
                env.scripted_controller()
            for _ in range(3):
                obs, r, term, trunc, info = env.step(np.array([0.0, 0.5], dtype=np.float32))
            assert info["success"] and info["laps"] == 0 and info["collisions"] == 0
            assert r == pytest.approx(float(obs["state"][0]))
        finally:
            env.close()
