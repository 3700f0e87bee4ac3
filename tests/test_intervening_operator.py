"""The emulated intervening operator (HIL-SERL) on the emulated arm: it takes over a stuck policy
after its patience plus its reaction delay, lifts the cube through the device interface with a
noisy hand, hands back, keeps to its cap, and leaves a policy that makes progress alone.
The robot is the arm emulator over a pseudo-terminal with its /truth.json (no mocks)."""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import robolearn  # noqa: F401  (registers the envs)
from robolearn.errors import ConfigError
from robolearn.runtime.config import config_from_dict
from robolearn.sim.arm_workspace import CUBE_HALF, LIFT_HEIGHT

LIFT = "robolearn/ArmLift-v0"
HZ = 20


class NoReward:
    def reset(self):
        pass

    def __call__(self, obs, info):
        return 0.0, False


@pytest.fixture(scope="module")
def robot():
    from robolearn.drivers.emulation import start_emulator

    with start_emulator("arm", reality=None) as r:
        yield r


def _cube(robot):
    from robolearn.drivers.truth import fetch_truth

    return np.asarray(fetch_truth(robot.truth_url)["bodies"]["cube"][:3])


def _session_cfg(robot, **ft):
    return config_from_dict({"env": LIFT, "algo": "rlpd", "finetune": {
        "checkpoint": "unused", "warm_start": "rlpd", "prior_data": "sim:1", "intervene": "operator",
        "truth_url": robot.truth_url, **ft}})


def _actor_env(robot, cfg):
    """The robot env with the takeover device exactly as the actor wraps it."""
    from robolearn.runtime.actor import _intervening
    from robolearn.teleop.intervention import maybe_intervene

    env = gym.make(LIFT, backend="real", port=robot.port, timeout=0.1, control_hz=HZ,
                   reward_source=NoReward(), max_episode_steps=160)
    return _intervening(env, cfg, maybe_intervene)


def _episode(robot, env, policy, steps: int):
    from robolearn.teleop.operator import hand_place_cube

    obs, _ = env.reset(seed=0)
    hand_place_cube(robot.hand_url, xy=(0.22, 0.0))   # a cube where the arm can reach it
    flags, applied, lifted = [], [], []
    for _ in range(steps):
        obs, _, term, trunc, info = env.step(policy(obs))
        flags.append(info["intervention"])
        applied.append(info["intervention_action"])
        lifted.append(_cube(robot)[2] - CUBE_HALF >= LIFT_HEIGHT)
        if term or trunc:
            break
    return np.array(flags), np.array(applied), np.array(lifted)


def test_operator_takes_over_a_stuck_policy_after_patience_and_reaction_then_hands_back(robot):
    from robolearn.teleop.intervening_operator import InterveningOperator
    from robolearn.teleop.intervention import InterventionWrapper

    opts = {"patience_s": 0.5, "reaction_s": 0.3, "noise": 0.05, "max_takeover_s": 5.0}
    env = _actor_env(robot, _session_cfg(robot, intervene_options=opts))
    try:
        assert isinstance(env, InterventionWrapper) and isinstance(env.device, InterveningOperator)
        still = np.array([0, 0, 0, 1], np.float32)          # a policy stuck at home
        flags, applied, lifted = _episode(robot, env, lambda obs: still, steps=140)
        patience, reaction = math.ceil(0.5 * HZ), math.ceil(0.3 * HZ)
        first = int(np.argmax(flags))
        assert flags.any() and first == patience + reaction   # decided at 1 + patience, hands on after the delay
        assert not flags[:first].any()
        driven = np.flatnonzero(flags)
        assert np.all(np.diff(driven) == 1)                   # one takeover: the cap is 1 an episode
        assert lifted.any(), "the operator did not lift the cube"
        up = int(np.argmax(lifted))
        # lets go `reaction` steps after seeing the lift (the operator looks before a step, this
        # test after it, while the emulator's physics runs on: one step either way)
        assert up + reaction - 1 <= driven[-1] <= up + reaction
        assert not flags[driven[-1] + 1:].any()               # handed back, and no second takeover
        # the policy's action is replaced only while driving
        np.testing.assert_array_equal(applied[~flags], np.tile(still, ((~flags).sum(), 1)))
        # the hand's noise: the 6 closing steps ask for no motion, so their x/y/z is noise alone
        grip = applied[flags, 3]
        closing = applied[flags][np.flatnonzero(grip < 0)[:6], :3]
        assert np.all(np.abs(closing) < 0.25) and np.std(closing) > 0.01
        assert set(np.unique(grip)) <= {-1.0, 1.0}            # the gripper is a button: no noise
        assert env.device.stats() == {"takeovers": 1, "driven_steps": len(driven),
                                      "handbacks": {"lifted": 1, "gave_up": 0},
                                      "takeover_reasons": {"stuck": 1, "landing": 0},
                                      "takeover_starts": {"above": 1}, "give_up_phases": {},
                                      "reaims": 0, "late_looks": 0}
    finally:
        env.close()


@pytest.mark.parametrize("resume_grasp", [True, False])
def test_the_operator_closes_a_grasp_the_policy_left_under_way(robot, resume_grasp):
    """A policy that brings the open fingers around the cube and stops there: the operator takes
    over and, from where the hand is (`resume_grasp = true`), closes and lifts at once; a takeover
    from above (the default) first opens, goes 5 cm up and comes back down."""
    from robolearn.teleop import make_device

    opts = {"patience_s": 0.5, "reaction_s": 0.1, "noise": 0.0, "resume_grasp": resume_grasp}
    env = _actor_env(robot, _session_cfg(robot, intervene_options=opts))
    try:
        hands = make_device("operator", env, truth_url=robot.truth_url, mode="demo")
        hands.reset()
        hold_open = np.array([0, 0, 0, 1], np.float32)

        def policy(obs):            # the scripted approach, stopped with the cube between the fingers
            a = hands.read(obs).action
            return hold_open if hands.phase != "above" and hands.phase != "descend" else a

        flags, applied, lifted = _episode(robot, env, policy, steps=150)
        assert flags.any() and lifted.any()
        z, grip = applied[flags, 2], applied[flags, 3]
        starts = env.device.stats()["takeover_starts"]
        if resume_grasp:
            assert starts == {"close": 1}
            assert grip[0] < 0 and np.all(z[:6] == 0)         # closes where the hand is ...
            assert not np.any(z < 0)                          # ... and only goes up, with the cube
        else:
            assert starts == {"above": 1}
            assert grip[0] > 0 and z[0] > 0 and np.any(z < 0)  # opens, goes up, comes back down
    finally:
        env.close()


def test_operator_leaves_a_policy_that_makes_progress_alone(robot):
    """A competent policy (the scripted lift, seeing the table as the operator does) never
    stalls for the patience: no takeover, and the cube is lifted by the policy."""
    from robolearn.teleop import make_device

    env = _actor_env(robot, _session_cfg(robot, intervene_options={"patience_s": 0.5}))
    try:
        policy_hands = make_device("operator", env, truth_url=robot.truth_url, mode="demo")
        policy_hands.reset()
        flags, _, lifted = _episode(robot, env, lambda obs: policy_hands.read(obs).action, steps=90)
        assert lifted.any() and not flags.any()
        assert env.device.stats()["takeovers"] == 0
    finally:
        env.close()


@pytest.mark.parametrize("ee, phase, hover", [
    ((0.222, 0.0, 0.02), "close", 0.07),      # the cube between the open fingers: close and lift
    ((0.22, 0.003, 0.06), "descend", 0.07),   # over it, on the way down: come down
    ((0.25, 0.0, 0.05), "above", 0.04),       # beside it, low: over it at the fingertips' clearance
    ((0.25, 0.0, 0.07), "above", 0.055),      # ... at the hand's own height
    ((0.25, 0.0, 0.15), "above", 0.07),       # ... at most the scripted hover
])
def test_a_takeover_starts_from_where_the_hand_is(ee, phase, hover):
    env = gym.make(LIFT, control_hz=10)
    try:
        from robolearn.teleop.operator import OperatorConfig, OperatorDevice

        scene = {"bodies": {"cube": [0.22, 0.0, CUBE_HALF, 1, 0, 0, 0]}, "sites": {"ee": list(ee)}}
        hands = OperatorDevice(env, OperatorConfig(), truth=lambda: scene)
        assert hands.take_over(scene) == phase == hands.phase
        assert hands.hover == pytest.approx(hover)
    finally:
        env.close()


def test_intervening_operator_options_are_checked(robot):
    from robolearn.teleop import make_device

    env = gym.make(LIFT)
    try:
        with pytest.raises(ConfigError, match="patience_s=0"):
            make_device("operator", env, mode="intervene", truth_url=robot.truth_url, patience_s=0)
        with pytest.raises(ConfigError, match="max_per_episode"):
            make_device("operator", env, mode="intervene", truth_url=robot.truth_url, max_per_episode=0)
        with pytest.raises(ConfigError, match="no option"):
            make_device("operator", env, mode="intervene", truth_url=robot.truth_url, patience=3)
        with pytest.raises(ConfigError, match="truth_url"):
            make_device("operator", env, mode="intervene")
    finally:
        env.close()


@pytest.mark.parametrize("ft, match", [
    ({"intervene": "keyboard"}, "actor\\] intervene"),
    ({"intervene": "operator"}, "finetune.reality"),
    ({"intervene": "operator", "reality": "mild", "intervene_options": {"patiense_s": 1}}, "patience_s"),
    ({"intervene_options": {"noise": 0.1}, "reality": "mild"}, "without finetune.intervene"),
    ({"robot_demos": 10, "reality": "mild", "warm_start": "wsrl"}, "warm_start = \"rlpd\""),
    ({"robot_demos": -1, "reality": "mild"}, "robot_demos=-1"),
])
def test_finetune_operator_keys_are_checked(ft, match):
    base = {"checkpoint": "unused", "warm_start": "rlpd", "prior_data": "sim:1"}
    with pytest.raises(ConfigError, match=match):
        config_from_dict({"env": LIFT, "algo": "rlpd", "finetune": {**base, **ft}})
    with pytest.raises(ConfigError, match="ArmLift"):
        config_from_dict({"env": "robolearn/ArmReach-v0", "algo": "rlpd",
                          "finetune": {**base, "intervene": "operator", "reality": "mild"}})
    with pytest.raises(ConfigError, match="one device"):
        config_from_dict({"env": LIFT, "algo": "rlpd", "actor": {"intervene": "keyboard"},
                          "finetune": {**base, "intervene": "operator", "reality": "mild"}})


# --------------------------------------------------------------------- demos on the robot
@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path_factory.mktemp("pre") / "lift"
    subprocess.run([sys.executable, "-m", "robolearn.cli", "train", "--env", LIFT, "--algo", "sac",
                    "--steps", "100", "--out", str(out), "--eval-episodes", "1", "--no-video"],
                   check=True, cwd=Path(__file__).resolve().parents[1], capture_output=True, timeout=300)
    return out


def test_robot_demos_are_recorded_by_the_operator_and_join_the_learners_prior_data(robot, tmp_path, pretrained):
    """`[finetune] robot_demos`: the emulated operator records lifts on the robot through the
    teleop path (record + its device), robot time counted; the session's learner loads them as
    RLPD prior data beside `prior_data`, and a resumed session does not record them again."""
    from robolearn.data.dataset import Dataset
    from robolearn.runtime import finetune as F
    from robolearn.runtime.learner import Learner
    from robolearn.teleop.operator import hand_place_cube

    run = tmp_path / "session"
    cfg = _session_cfg(robot, intervene="", robot_demos=2, prior_data="scripted:1", checkpoint=str(pretrained),
                       load="none")
    cfg.out = str(run)
    cfg.env_kwargs.update(backend="real", port=robot.port, timeout=0.1, control_hz=HZ,
                          reward_source=NoReward())
    hand_place_cube(robot.hand_url, xy=(0.22, 0.0))
    rep = F.record_robot_demos(cfg, run, 2)
    ds = Dataset(run / F.ROBOT_DEMOS)
    assert len(ds) == rep["episodes"] == rep["recorded_now"] == 2
    assert ds.episode(0).meta["success"] and ds.episode(0).meta["label_source"] == "operator"
    # held up long enough for the session's reward model to see the lift (no model here)
    assert ds.episode(0).data["success_mark"].sum() >= F.DEMO_HOLD_FRAMES
    assert rep["steps"] == sum(ds.episode(i).steps for i in range(2))
    assert rep["robot_time_s"] == pytest.approx(rep["steps"] / HZ, abs=0.05)
    assert set(np.unique(ds.episode(0).data["device"])) == {"operator"}
    again = F.record_robot_demos(cfg, run, 2)         # a resumed session: already there
    assert again["recorded_now"] == 0 and again["episodes"] == 2

    cfg.env_kwargs.pop("reward_source")               # the learner never opens the robot
    learner = Learner(cfg, run_dir=run)
    try:
        info = learner.finetune_info
        assert info["robot_demo_transitions"] == rep["steps"]
        assert len(learner.prior) == info["prior_transitions"] > rep["steps"]   # + scripted:1
        got = learner.prior.transitions()["action"][-rep["steps"]:]
        want = np.concatenate([ds.episode(i).data["action"] for i in range(2)])
        np.testing.assert_array_equal(got, want)      # the operator's actions, in order, last in
        # the operator's interventions reach the prior buffer, and again after a learner restart
        from robolearn.runtime import messages as M
        from robolearn.runtime.learner import ActorRecord

        obs, _ = learner.env.reset(seed=0)
        rows = []
        for i in range(6):
            nxt, *_ = learner.env.step(np.zeros(4, np.float32))
            rows.append({"obs": obs, "next_obs": nxt, "action": np.full(4, 0.1 * i, np.float32), "reward": 0.0,
                         "terminated": False, "truncated": i == 5, "intervention": i % 2 == 1, "success": False,
                         "step": i})
            obs = nxt
        before = len(learner.prior)
        learner._add(ActorRecord("robot0", b"x", 0.0), M.stack_transitions(rows), 6)
        assert len(learner.prior) == before + 3 and len(learner.replay) == 6
        learner.save_checkpoint()
    finally:
        learner.close()
    restarted = Learner(cfg, run_dir=run)
    try:
        assert restarted.finetune_info["resumed_at_env_step"] == 6
        assert restarted.finetune_info["resumed_interventions"] == 3
        tail = restarted.prior.transitions()
        assert len(restarted.prior) == before + 3 and tail["intervention"][-3:].all()
        np.testing.assert_allclose(tail["action"][-3:, 0], [0.1, 0.3, 0.5], rtol=1e-6)
    finally:
        restarted.close()


def test_bad_operator_option_values_stop_the_launch_file():
    with pytest.raises(ConfigError, match="reaction_s=-0.1"):
        config_from_dict({"env": LIFT, "algo": "rlpd", "finetune": {
            "checkpoint": "unused", "warm_start": "rlpd", "prior_data": "sim:1", "intervene": "operator",
            "reality": "mild", "intervene_options": {"reaction_s": -0.1}}})


def _watching_operator(truths, **options):
    """The operator's rule alone: it watches a scripted scene (what /truth.json would say each step)."""
    from robolearn.teleop.intervening_operator import InterveneConfig, InterveningOperator

    env = gym.make(LIFT, control_hz=10)
    scene = iter(truths)
    op = InterveningOperator(env, InterveneConfig(patience_s=2.0, reaction_s=0.0, **options),
                             truth=lambda: next(scene))
    return env, op


def _scene(gap: float, dist: float = 0.03) -> dict:
    cube = [0.22, 0.0, CUBE_HALF]
    return {"bodies": {"cube": cube + [1, 0, 0, 0], "finger_left": [0.22, gap / 2, 0.04],
                       "finger_right": [0.22, -gap / 2, 0.04]},
            "sites": {"ee": [0.22, 0.0, CUBE_HALF + dist]}}


@pytest.mark.parametrize("gaps, first_driven", [
    ([0.04] * 30, 20),                                              # open over the cube: stuck 2 s
    ([0.04] * 5 + [0.04 - 0.0015 * i for i in range(1, 8)] + [0.0295] * 13, None),  # a slow grasp
    ([0.04] * 5 + [0.03] * 3 + [0.04] * 3 + [0.03] * 24, 31),       # reopened, a new grasp: 2 s from it
    ([0.04] * 5 + [0.03] * 25, 25),                                 # closed and held: 2 s from the close
])
def test_the_operator_counts_a_grasp_under_way_as_progress(gaps, first_driven):
    """Beside approaching and lifting, the fingers closing on the cube are progress: a slow servo
    closing for a second and a half is not a stuck policy, nor is a new grasp after the fingers
    reopened; a gripper that closed and stays closed without lifting is."""
    env, op = _watching_operator([_scene(g) for g in gaps])
    try:
        engaged = [op.read().engaged for _ in gaps]
        # 2 s (20 steps) after the last progress: the start, or the first close
        assert (engaged.index(True) if any(engaged) else None) == first_driven
    finally:
        env.close()


def test_without_grasp_progress_only_nearer_or_higher_is_progress():
    """`grasp_progress = false` (the lift session's launch file, stop 52): the slow grasp that
    resets the patience above is no progress, so the operator takes over 2 s after the hand last
    got nearer, while the fingers close; a lift is still progress."""
    gaps = [0.04] * 5 + [0.04 - 0.0015 * i for i in range(1, 8)] + [0.0295] * 13
    for grasp_progress, first_driven in ((True, None), (False, 20)):
        env, op = _watching_operator([_scene(g) for g in gaps], grasp_progress=grasp_progress)
        try:
            engaged = [op.read().engaged for _ in gaps]
            assert (engaged.index(True) if any(engaged) else None) == first_driven
        finally:
            env.close()
    for rise, first_driven in ((0.0, 20), (0.011, None)):      # the cube 1.1 cm up at step 15: progress
        scenes = [_scene(0.0295) for _ in range(25)]
        for i in range(15, 25):
            scenes[i]["bodies"]["cube"][2] += rise
        env, op = _watching_operator(scenes, grasp_progress=False)
        try:
            engaged = [op.read().engaged for _ in scenes]
            assert (engaged.index(True) if any(engaged) else None) == first_driven
        finally:
            env.close()


@pytest.mark.parametrize("bob", [False, True])
def test_a_gripper_that_fumbles_beside_the_cube_is_not_progress(bob):
    """Closing, reopening and closing again beside the cube (the failed lifts of sessions 11, 18
    and 19 closed 11 times an episode): two grasps count, the third does not, so the operator takes
    over 2 s after the second. Closing 1.5 cm higher and coming back down open does not count as
    nearing the cube (nearer is measured from the nearest so far)."""
    gaps = [0.04] * 5 + ([0.03] * 3 + [0.04] * 3) * 8
    dists = [0.03] * 5 + [0.045 if bob and i % 6 < 3 else 0.03 for i in range(48)]
    env, op = _watching_operator([_scene(g, d) for g, d in zip(gaps, dists)])
    try:
        engaged = [op.read().engaged for _ in gaps]
        assert engaged.index(True) == 11 + 20     # the second grasp began at step 11
    finally:
        env.close()


def test_a_grasp_far_from_the_cube_is_not_progress():
    env, op = _watching_operator([_scene(0.04 - 0.002 * min(i, 15), dist=0.09) for i in range(30)])
    try:
        assert any(op.read().engaged for _ in range(30))
    finally:
        env.close()


def _hand_scene(offset_y: float, tip_z: float, gap: float = 0.04) -> dict:
    """/truth.json of a top-down hand over the 3 cm cube: its fingers' bodies `gap`/2 either side of
    the hand's centre line, `offset_y` beside the cube's centre along the closing axis, fingertips
    at `tip_z` (the model's: 52 mm below the finger bodies, the grasp site 18 mm above the tips)."""
    cube = [0.22, 0.0, CUBE_HALF, 1, 0, 0, 0]
    body_z = tip_z + 0.052
    return {"bodies": {"cube": cube, "finger_left": [0.22, offset_y + gap / 2, body_z, 1, 0, 0, 0],
                       "finger_right": [0.22, offset_y - gap / 2, body_z, 1, 0, 0, 0]},
            "sites": {"ee": [0.22, offset_y, tip_z + 0.018]}}


@pytest.mark.parametrize("offset_y, first_driven", [
    (0.008, 7),       # 8 mm off: the right finger comes down on the cube's top face
    (-0.008, 7),      # ... the left one
    (0.003, None),    # 3 mm off: both fingers pass beside the cube (the 4 cm gripper's 5 mm margin)
])
@pytest.mark.parametrize("landing_m", [0.02, 0.0])
def test_the_operator_takes_over_when_a_finger_comes_down_on_the_cube(offset_y, first_driven, landing_m):
    """The failed lifts land a finger on the cube's edge and push it: a person sees the finger
    coming down on the cube and takes over at once (no patience), before the push; a hand coming
    down with the cube between its fingers is left alone."""
    top = 2 * CUBE_HALF
    tips = [top + 0.052 - 0.005 * i for i in range(11)] + [top - 0.005] * 4   # down 5 mm a step
    env, op = _watching_operator([_hand_scene(offset_y, z) for z in tips], landing_m=landing_m)
    try:
        engaged = [op.read().engaged for _ in tips]
        if not landing_m:          # off (the default): the descent is progress, no takeover in 1.5 s
            assert not any(engaged)
            return
        # step 7: the fingertip 1.7 cm above the top face (2.2 cm at step 6 is too high to tell)
        assert (engaged.index(True) if any(engaged) else None) == first_driven
        if first_driven is not None:
            assert op.stats()["takeover_reasons"] == {"stuck": 0, "landing": 1}
    finally:
        env.close()


def test_a_hand_hovering_over_the_cube_is_not_landing():
    """Fingertips held 1 cm over the cube's edge (the policy re-aiming) are not coming down: the
    operator waits out its patience as before."""
    env, op = _watching_operator([_hand_scene(0.008, 2 * CUBE_HALF + 0.01)] * 25, landing_m=0.02)
    try:
        engaged = [op.read().engaged for _ in range(25)]
        assert engaged.index(True) == 20
        assert op.stats()["takeover_reasons"] == {"stuck": 1, "landing": 0}
    finally:
        env.close()


class _SlowTruth:
    """/truth.json over real HTTP that answers its first `late` requests after `delay_s` (a loaded
    machine) or, with `down`, never with a scene (500)."""

    def __init__(self, late: int = 1, delay_s: float = 1.3, down: bool = False):
        import http.server
        import json
        import threading
        import time

        scene = _scene(0.04)
        outer = self
        self.requests = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests += 1
                if down:
                    self.send_error(500)
                    return
                if outer.requests <= late:
                    time.sleep(delay_s)
                body = json.dumps(scene).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/truth.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_late_truth_is_looked_at_again_not_the_end_of_the_session():
    """Lift session 31's actor died on one /truth.json answer that took over the 1 s timeout (a
    loaded machine): the operator's eyes now look again, and only silence for their whole
    patience is an error."""
    from robolearn.errors import DeviceError
    from robolearn.teleop.operator import OperatorConfig, OperatorDevice

    env = gym.make(LIFT, control_hz=10)
    slow, dead = _SlowTruth(late=1, delay_s=1.3), _SlowTruth(down=True)
    try:
        eyes = OperatorDevice(env, OperatorConfig(truth_url=slow.url))
        assert eyes.seen()["sites"]["ee"] == _scene(0.04)["sites"]["ee"]
        assert eyes.late_looks == 1 and slow.requests == 2
        blind = OperatorDevice(env, OperatorConfig(truth_url=dead.url, look_patience_s=0.3))
        with pytest.raises(DeviceError, match="saw nothing for 0.3 s"):
            blind.seen()
        assert blind.late_looks >= 2
    finally:
        slow.close()
        dead.close()
        env.close()


def _arm_off_by(offset, blocked_on_top: bool = False):
    """A sim arm whose hand is truly `offset` (m) from where its command puts it (a hard arm's
    tracking error the person sees), the cube at (0.22, 0) and, with `blocked_on_top`, a hand
    more than 6 mm across from the cube's centre stopped on its top face (a finger on it)."""
    env = gym.make(LIFT, control_hz=10)
    env.reset(seed=0)
    task, cube = env.unwrapped.task, np.array([0.22, 0.0, CUBE_HALF])

    def truth():
        ee = np.asarray(task.ee_cmd, float) + offset
        if blocked_on_top and np.linalg.norm(ee[:2] - cube[:2]) > 0.006:
            ee[2] = max(ee[2], 2 * CUBE_HALF + 0.015)
        return {"bodies": {"cube": [*cube, 1, 0, 0, 0]}, "sites": {"ee": list(ee)}}
    return env, truth


@pytest.mark.parametrize("aim_by_eye", [True, False])
@pytest.mark.parametrize("offset, blocked, reaims", [
    ((0.015, 0.0, 0.0), False, 0),    # stops 15 mm short across (the hover's tolerance is 12 mm)
    ((0.0, 0.010, 0.0), True, 1),     # 10 mm across: a finger comes down on the cube's top
])
def test_the_operator_aiming_by_eye_gets_a_hand_that_stops_short_to_the_cube(aim_by_eye, offset, blocked, reaims):
    """A hand that does not go where the device commands it: by the command alone the person waits
    where the hand stopped (until they give up); aiming by eye they nudge the command by the miss
    they see, or lift a finger stopped on the cube's top and come down again re-aimed, and close."""
    from robolearn.teleop.operator import OperatorConfig, OperatorDevice

    env, truth = _arm_off_by(np.array(offset), blocked)
    try:
        hands = OperatorDevice(env, OperatorConfig(aim_by_eye=aim_by_eye), truth=truth)
        hands.reset()
        phases = []
        for _ in range(80):
            env.step(hands.read().action)
            phases.append(hands.phase)
        if aim_by_eye:
            assert "close" in phases and hands.reaims == reaims
            assert np.linalg.norm(hands.aim[:2] + np.array(offset[:2])) < 0.003   # the miss taken off
        else:
            assert "close" not in phases and phases[-1] == ("descend" if blocked else "above")
            assert hands.reaims == 0 and not hands.aim.any()
    finally:
        env.close()


def test_aiming_by_eye_is_an_operator_option():
    from robolearn.teleop.intervening_operator import InterveneConfig

    with pytest.raises(ConfigError, match="aim_by_eye"):
        InterveneConfig(aim_by_eye="yes").check()


def test_a_takeover_that_runs_out_of_time_gives_up_and_counts_where_the_hands_were(robot):
    """A takeover shorter than the way to the cube: the person gives up in the phase the hands are
    in (still on the way: over the cube or coming down), hands back, and the session's counters
    say where."""
    opts = {"patience_s": 0.5, "reaction_s": 0.1, "noise": 0.0, "max_takeover_s": 0.3}
    env = _actor_env(robot, _session_cfg(robot, intervene_options=opts))
    try:
        still = np.array([0, 0, 0, 1], np.float32)          # a policy stuck at home
        flags, _, lifted = _episode(robot, env, lambda obs: still, steps=40)
        driven = np.flatnonzero(flags)
        assert len(driven) == math.ceil(0.3 * HZ) and not lifted.any()
        stats = env.device.stats()
        assert stats["handbacks"] == {"lifted": 0, "gave_up": 1}
        phase = env.device.hands.phase                       # the hands stopped where they gave up
        assert phase in ("above", "descend")
        assert stats["give_up_phases"] == {phase: 1} and stats["takeover_starts"] == {"above": 1}
    finally:
        env.close()


@pytest.mark.parametrize("cube_yaw, finger_yaw, turn", [
    (0, 0, 0.0), (30, 0, 30.0), (60, 0, 30.0), (-45, 0, 45.0), (90, 0, 0.0), (100, 10, 0.0), (20, 80, 30.0),
])
def test_the_cube_turn_from_the_fingers_is_folded_to_0_45_degrees(cube_yaw, finger_yaw, turn):
    from robolearn.teleop.intervening_operator import cube_turn_deg

    def pose(yaw_deg):
        h = math.radians(yaw_deg) / 2
        return [0.2, 0.0, 0.015, math.cos(h), 0.0, 0.0, math.sin(h)]

    bodies = {"cube": pose(cube_yaw), "finger_left": pose(finger_yaw)}
    assert cube_turn_deg(bodies) == pytest.approx(turn, abs=0.05)
    assert cube_turn_deg({"cube": pose(cube_yaw)}) is None       # no fingers in the scene: not known
