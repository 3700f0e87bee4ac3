"""Arm tasks: the env contract, determinism, bad input, workspace bounds, kinematics, servo limits."""
import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import robolearn  # noqa: F401  (registers the env IDs)
from robolearn.errors import ConfigError, EnvClosedError, InvalidActionError, SafetyError
from robolearn.sim.arm_workspace import DISTANCE_REWARD_SCALE, HOME_EE, WORKSPACE_HIGH, WORKSPACE_LOW
from robolearn.compose.envs import make_arm_env
from robolearn.tasks.cube_orientation import canonical_cube_quat

ARM_IDS = ["robolearn/ArmReach-v0", "robolearn/ArmPush-v0", "robolearn/ArmLift-v0"]


@pytest.mark.parametrize("env_id", ARM_IDS)
def test_check_env_state(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.unwrapped.metadata["control_hz"] == 10.0
    assert env.spec.max_episode_steps >= 50
    env.close()


@pytest.mark.parametrize("env_id,obs", [("robolearn/ArmReach-v0", "pixels"), ("robolearn/ArmLift-v0", "both")])
def test_check_env_pixels(env_id, obs):
    env = gym.make(env_id, obs=obs, image_size=(32, 40), render_mode="rgb_array")
    check_env(env.unwrapped, skip_render_check=False)
    o, _ = env.reset(seed=0)
    for cam in ("wrist", "front"):
        assert o[cam].shape == (32, 40, 3) and o[cam].dtype == np.uint8
        assert o[cam].std() > 5  # a real picture, not a blank buffer
    assert ("state" in o) == (obs == "both")
    frame = env.render()
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
    env.close()


def test_pixels_see_the_arm_move():
    env = gym.make("robolearn/ArmReach-v0", obs="pixels", image_size=(48, 48), camera="front")
    o0, _ = env.reset(seed=0)
    assert set(o0) == {"front"}
    for _ in range(4):
        o1, *_ = env.step(np.array([1.0, 1.0, -1.0, 1.0], dtype=np.float32))
    assert np.abs(o1["front"].astype(int) - o0["front"].astype(int)).mean() > 1.0
    env.close()


@pytest.mark.parametrize("env_id", ARM_IDS)
def test_determinism(env_id):
    def rollout(seed):  # the seed places the cube, seen only in `privileged` (not in state)
        env = gym.make(env_id, privileged_obs=True)
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(123)
        out = [obs["state"], obs["privileged"]]
        for _ in range(15):
            obs, r, term, trunc, info = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
            out += [obs["state"], obs["privileged"]]
            out.append(np.array([r]))
        env.close()
        return np.concatenate(out)

    a, b, c = rollout(7), rollout(7), rollout(8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_reset_samples_goals_from_seed():
    env = gym.make("robolearn/ArmReach-v0")
    goals = []
    for seed in range(5):
        _, info = env.reset(seed=seed)
        goals.append(info["goal"])
        assert np.all(info["goal"] >= WORKSPACE_LOW) and np.all(info["goal"] <= WORKSPACE_HIGH)
        np.testing.assert_allclose(info["ee_pos"], HOME_EE, atol=2e-3)
    assert len({tuple(g) for g in goals}) == 5
    env.close()


def test_info_keys_and_reach_reward():
    env = gym.make("robolearn/ArmReach-v0")
    obs, _ = env.reset(seed=3)
    obs, r, term, trunc, info = env.step(np.zeros(4, dtype=np.float32))
    for key in ("success", "t_obs", "overrun", "workspace_clipped", "ee_pos", "distance"):
        assert key in info
    goal = env.unwrapped.task.goal
    assert math.isclose(info["distance"], float(np.linalg.norm(goal - info["ee_pos"])), rel_tol=1e-9)
    assert r == pytest.approx(-DISTANCE_REWARD_SCALE * info["distance"])  # decimetres
    assert DISTANCE_REWARD_SCALE == 10.0
    state = obs["state"]
    np.testing.assert_allclose(state[11:14], info["ee_pos"], atol=1e-6)
    np.testing.assert_allclose(state[14:17], goal, atol=1e-6)
    env.close()


def test_zero_action_holds_still():
    env = gym.make("robolearn/ArmLift-v0")
    obs, info = env.reset(seed=0)
    ee0 = info["ee_pos"]
    for _ in range(10):
        obs, r, term, trunc, info = env.step(np.array([0, 0, 0, 1], dtype=np.float32))
    assert np.linalg.norm(info["ee_pos"] - ee0) < 3e-3
    env.close()


def test_workspace_bounds_enforced_and_reported():
    env = gym.make("robolearn/ArmReach-v0")
    env.reset(seed=0)
    clipped = []
    for _ in range(25):  # push down and out far past the box
        _, _, term, _, info = env.step(np.array([1.0, 1.0, -1.0, 0.0], dtype=np.float32))
        clipped.append(info["workspace_clipped"])
    assert not clipped[0] and clipped[-1]
    ee = info["ee_pos"]
    assert np.all(ee >= WORKSPACE_LOW - 5e-3) and np.all(ee <= WORKSPACE_HIGH + 5e-3)
    # the commanded target sits exactly on the box corner
    np.testing.assert_allclose(env.unwrapped.task.ee_cmd, [WORKSPACE_HIGH[0], WORKSPACE_HIGH[1], WORKSPACE_LOW[2]])
    env.close()


def test_joint_mode_limits_and_workspace():
    env = gym.make("robolearn/ArmReach-v0", action_mode="joint")
    assert env.action_space.shape == (6,)
    env.reset(seed=0)
    infos = []
    for _ in range(30):  # elbow and shoulder down: the gripper would go through the table
        _, _, _, _, info = env.step(np.array([0, 1, 1, 0, 0, 0], dtype=np.float32))
        infos.append(info)
    assert any(i["workspace_clipped"] for i in infos)
    assert infos[-1]["ee_pos"][2] > WORKSPACE_LOW[2] - 5e-3
    env.reset(seed=0)
    for _ in range(20):  # pan far beyond its range
        _, _, _, _, info = env.step(np.array([1, 0, 0, 0, 0, 0], dtype=np.float32))
    assert info["joint_limit_clipped"] or info["workspace_clipped"]
    env.close()


def test_servo_speed_limit():
    env = make_arm_env("reach", action_mode="joint", control_hz=50.0)
    env.reset(seed=0)
    sim = env.unwrapped.sim
    arm = sim
    q0 = arm.read().q.copy()
    target = q0.copy()
    target[0] = q0[0] + 1.5  # a 1.5 rad jump of the pan servo
    arm.command(target, arm.spec.gripper_open)
    arm.advance(0.1)
    moved = arm.read().q[0] - q0[0]
    vmax = arm.spec.max_velocity[0]
    assert 0.3 * vmax * 0.1 < moved <= vmax * 0.1 + 1e-3  # moving, but no faster than the servo
    for _ in range(10):
        arm.advance(0.1)
    assert abs(arm.read().q[0] - target[0]) < 0.02  # and it gets there
    env.close()


def test_arm_command_refuses_bad_targets():
    env = make_arm_env("reach")
    env.reset(seed=0)
    arm = env.unwrapped.sim
    q = arm.read().q.copy()
    with pytest.raises(SafetyError, match="shoulder_pan"):
        arm.command(np.array([5.0, *q[1:]]), 0.5)
    with pytest.raises(InvalidActionError, match="NaN"):
        arm.command(np.array([np.nan, *q[1:]]), 0.5)
    with pytest.raises(InvalidActionError, match="shape"):
        arm.command(q[:3], 0.5)
    with pytest.raises(SafetyError, match="gripper"):
        arm.command(q, 9.0)
    env.close()


@pytest.mark.parametrize("bad", [
    np.array([np.nan, 0, 0, 0]), np.array([0, np.inf, 0, 0]), np.array([0, 0, 1.5, 0]),
    np.zeros(3), np.zeros((1, 4)), "left", None,
])
def test_bad_actions_raise(bad):
    env = gym.make("robolearn/ArmReach-v0")
    env.reset(seed=0)
    with pytest.raises(InvalidActionError):
        env.step(bad)
    env.close()


def test_step_after_close_raises():
    env = gym.make("robolearn/ArmReach-v0")
    env.reset(seed=0)
    env.close()
    with pytest.raises(EnvClosedError):
        env.step(np.zeros(4, dtype=np.float32))
    with pytest.raises(EnvClosedError):
        env.reset()


@pytest.mark.parametrize("kwargs,match", [
    ({"obs": "foo"}, "obs"),
    ({"control_hz": -1}, "control_hz"),
    ({"control_hz": "fast"}, "control_hz"),
    ({"action_mode": "torque"}, "action_mode"),
    ({"backend": "gazebo"}, "backend"),
    ({"bogus": 1}, "bogus"),
    ({"image_size": (0, 84)}, "image_size"),
    ({"camera": "top"}, "camera"),
    ({"port": "/dev/ttyUSB0"}, "port"),
])
def test_bad_kwargs_raise_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        gym.make("robolearn/ArmReach-v0", **kwargs)


@pytest.mark.parametrize("task", ["push", "lift"])
def test_real_push_lift_need_reward_source(task):
    with pytest.raises(ConfigError, match="reward_source"):
        make_arm_env(task, backend="real", port="/dev/null")


def test_control_hz_sets_substeps():
    env = make_arm_env("reach", control_hz=25.0)
    sim = env.unwrapped.sim
    assert env.unwrapped.metadata["control_hz"] == 25.0
    assert sim.n_substeps * sim.model.opt.timestep == pytest.approx(1 / 25.0)
    env.reset(seed=0)
    env.step(np.zeros(4, dtype=np.float32))
    assert sim.data.time == pytest.approx(1 / 25.0)
    env.close()


def test_kinematics_matches_sim_and_ik_solves():
    from robolearn.sim.kinematics import ArmKinematics

    env = make_arm_env("reach")
    env.reset(seed=0)
    sim = env.unwrapped.sim
    kin = ArmKinematics()
    rng = np.random.default_rng(0)
    for _ in range(5):  # FK from the kinematics model == site position in the simulator
        q = rng.uniform(sim.spec.lower, sim.spec.upper)
        sim.set_state(q, 0.5)
        np.testing.assert_allclose(kin.fk(q), sim.data.site("ee").xpos, atol=1e-9)
    q = env.unwrapped.task.home_q
    for _ in range(50):  # IK reaches random workspace points, gripper pointing down
        target = rng.uniform(WORKSPACE_LOW, WORKSPACE_HIGH)
        q_sol, err = kin.ik(target, q, max_iters=100)
        assert err < 1e-3
        pos, rot = kin.fk_pose(q_sol)
        np.testing.assert_allclose(pos, target, atol=1e-3)
        assert rot[2, 2] > 0.999  # site z up == approach axis down
        assert np.all(q_sol >= kin.lower) and np.all(q_sol <= kin.upper)
    env.close()


def test_move_to_joints_reset_controller():
    from robolearn.resets.scripted import MoveToJoints

    env = make_arm_env("reach")
    env.reset(seed=0)
    arm = env.unwrapped.sim
    goal = arm.read().q + np.array([0.4, -0.2, 0.3, 0.2, 0.5])
    t = MoveToJoints(goal, arm.spec.gripper_closed).run(arm)
    assert t > 0.2  # ramped, not teleported
    assert np.max(np.abs(arm.read().q - goal)) < 0.03
    # an unreachable pose (blocked arm) fails loudly instead of starting an episode anywhere
    blocked = MoveToJoints(goal, 0.0, timeout=0.3)
    arm.model.actuator_forcerange[1] = (-0.01, 0.01)  # a shoulder servo with no torque
    with pytest.raises(SafetyError, match="home pose"):
        blocked.q = goal + np.array([0, 0.6, 0, 0, 0])
        blocked.run(arm)
    env.close()


def test_push_and_lift_cube_pose_is_privileged_not_state():
    env = gym.make("robolearn/ArmLift-v0", privileged_obs=True)
    obs, _ = env.reset(seed=2)
    pos, quat = env.unwrapped.task.cube_pose()
    assert obs["state"].shape == (14,) and obs["privileged"].shape == (13,)
    np.testing.assert_allclose(obs["privileged"][3:6], pos, atol=1e-6)
    np.testing.assert_allclose(obs["privileged"][6:10], canonical_cube_quat(quat), atol=1e-6)
    # the simulator's grasp point agrees with kinematics of the measured joints (state[11:14])
    np.testing.assert_allclose(obs["privileged"][:3], obs["state"][11:14], atol=2e-3)
    assert pos[2] == pytest.approx(0.015, abs=1e-3)
    env.close()


def test_goal_marker_and_cube_visible_in_front_camera():
    def red(img):  # the cube (the orange links have much more green)
        r, g, b = (img[..., c].astype(int) for c in range(3))
        return int(np.sum((r > 120) & (g < 70) & (b < 70)))

    def green(img):  # the goal marker
        r, g, b = (img[..., c].astype(int) for c in range(3))
        return int(np.sum((g > r + 60) & (g > b + 60)))

    def first_frame(env_id):
        env = gym.make(env_id, obs="pixels", camera="front", image_size=(96, 128))
        try:
            return env.reset(seed=0)[0]["front"]
        finally:
            env.close()

    reach = first_frame("robolearn/ArmReach-v0")
    assert green(reach) > 5 and red(reach) == 0  # green target, cube hidden
    lift = first_frame("robolearn/ArmLift-v0")
    assert red(lift) > 5 and green(lift) == 0  # red cube, no goal marker


def test_backend_implements_protocols():
    from robolearn.robot import Arm, Camera

    env = make_arm_env("reach", image_size=(16, 24))
    be = env.unwrapped.backend
    assert isinstance(be.robot, Arm) and be.kind == "sim" and be.privileged is be.robot
    assert set(be.cameras) == {"wrist", "front"}
    for cam in be.cameras.values():
        assert isinstance(cam, Camera)
        frame = cam.read()
        assert frame.image.shape == cam.shape == (16, 24, 3) and frame.image.dtype == np.uint8
    st = be.robot.read()
    assert st.q.shape == (5,) and st.dq.shape == (5,) and st.stamp == 0.0
    with pytest.raises(ValueError):
        st.q[0] = 1.0  # the (cached) measurement is read-only
    env.reset(seed=0)
    env.step(np.zeros(4, dtype=np.float32))
    assert be.robot.read().stamp == pytest.approx(0.1)
    env.close()
    assert not be.robot._renderers  # GL contexts released on close


def test_a_cube_off_the_table_lands_on_the_floor_and_the_push_reward_stays_bounded():
    """A cube pushed (or flung by a contact blow-up) off the table lands on the floor instead of
    falling forever; the dense reward caps its distances, so one lost cube cannot swamp a critic
    (a reset-free run once logged -5000 a step from a cube falling for 14 s)."""
    import gymnasium as gym

    from robolearn.sim.arm_workspace import DISTANCE_REWARD_SCALE, REWARD_DISTANCE_CAP

    env = gym.make("robolearn/ArmPush-v0")
    env.reset(seed=0)
    sim = env.unwrapped.sim
    q = env.unwrapped.backend.robot.read()
    sim.set_state(q.q, q.gripper, cube_pos=np.array([0.2, 0.6, 0.3]))   # beyond the table's edge
    rewards = [env.step(np.zeros(4, np.float32))[1] for _ in range(40)]
    z = env.unwrapped.task.cube_pose()[0][2]
    assert -0.76 < z < -0.7                                            # on the floor, at rest
    assert min(rewards) >= -DISTANCE_REWARD_SCALE * 1.5 * REWARD_DISTANCE_CAP - 1e-9
    env.close()


def test_the_cube_quaternion_reads_the_same_for_every_face_it_rests_on():
    """A one-colour cube set down on another face, turned by 90 deg, or stored as -q looks the
    same: its privileged quaternion must be the same, and it must differ for a real turn."""
    env = gym.make("robolearn/ArmPush-v0", privileged_obs=True)
    env.reset(seed=0)
    base = env.unwrapped
    task, sim = base.task, base.task.sim
    s = math.sqrt(0.5)
    yaw = 0.3
    upright = np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])
    seen = []
    for body_turn in ([1, 0, 0, 0], [s, s, 0, 0], [0, 0, 1, 0], [s, 0, 0, s], [0.5, 0.5, 0.5, 0.5]):
        for sign in (1.0, -1.0):
            quat = sign * _quat_mul(upright, np.array(body_turn, dtype=float))
            sim.set_state(task.home_q, task.home_gripper, cube_pos=np.array([0.22, 0.0, 0.015]),
                          cube_quat=quat)
            task._fresh = False
            seen.append(task.privileged_observation()[6:10].copy())
    for q in seen:
        np.testing.assert_allclose(q, upright, atol=1e-5)
    other = np.array([math.cos(0.1), 0.0, 0.0, math.sin(0.1)])     # 11.5 deg less yaw: a real change
    assert np.abs(canonical_cube_quat(other) - upright).max() > 0.04    # sin(0.15) - sin(0.1)
    env.close()


def _quat_mul(a, b):
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])
