"""ArmPush from the camera: the robot-side push reward from the cube finder
(rewards/push_camera.py), its MISSING frames, the session report's per-block precision from the
recorded episodes, calibrate_reward for push, and the push launch files."""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import robolearn  # noqa: F401
from robolearn.errors import ConfigError
from robolearn.sim.arm_workspace import CUBE_HALF

PUSH = "robolearn/ArmPush-v0"


class _FixedFinder:
    """A cube finder that reports a set table position (or sees nothing: xy None)."""

    camera = "front"
    image_shape = [84, 84, 3]
    source = "(test)"

    def __init__(self, xy=None):
        self.xy = xy
        self.images = 0

    def estimate(self, image, whole_share=0.0):
        from robolearn.policies.cube_finder import CubeNotSeenError

        assert image.shape == (84, 84, 3)
        self.images += 1
        if self.xy is None:
            raise CubeNotSeenError("no cube (test)")
        return np.asarray(self.xy, float)


def _push_env(**kw):
    return gym.make(PUSH, obs="both", camera="front", image_size=(84, 84), **kw)


def _place_cube(task, xy):
    task.sim.set_state(task.home_q, task.home_gripper, cube_pos=np.array([xy[0], xy[1], CUBE_HALF]),
                       cube_quat=np.array([1.0, 0, 0, 0]))
    task._fresh = False


def test_the_reward_from_a_finder_position_is_the_sim_tasks_reward_for_that_cube_position():
    from robolearn.rewards.push_camera import CubeFinderPushReward

    env = _push_env()
    try:
        obs, _ = env.reset(seed=3)
        base = env.unwrapped
        task = base.task
        finder = _FixedFinder()
        src = CubeFinderPushReward(finder)
        src.bind(base)
        goal = task.goal.copy()
        rewards = []
        for xy in ((0.20, 0.05), (goal[0] + 0.02, goal[1] - 0.01), (goal[0] + 0.025, goal[1] + 0.025),
                   (0.28, -0.10)):
            _place_cube(task, xy)
            ev = task.evaluate()                   # the simulator's reward at that cube position
            finder.xy = xy
            obs = base._observe()[0]
            r, s = src(obs, {})
            assert r == pytest.approx(ev.reward, abs=1e-9) and s == ev.success, (xy, r, ev.reward)
            rewards.append(r)
        # the positions span success and failure and distinct rewards: the test can tell them apart
        assert [math.hypot(x - goal[0], y - goal[1]) < 0.03 for x, y in
                ((0.20, 0.05), (goal[0] + 0.02, goal[1] - 0.01), (goal[0] + 0.025, goal[1] + 0.025),
                 (0.28, -0.10))][1:3] == [True, False]
        assert len(set(np.round(rewards, 6))) == 4
        assert finder.images == 4
    finally:
        env.close()


def test_the_success_margin_grows_with_the_finders_held_out_error_on_the_robot():
    """A finder refitted on a robot with 8.6 mm held-out error must not call a cube seen 2.2 cm
    from the goal a success (the emulated hard robot's false successes); a sim-accurate one keeps
    the 5 mm margin."""
    from robolearn.rewards.push_camera import SUCCESS_MARGIN, CubeFinderPushReward, success_margin_for

    finder = _FixedFinder()
    assert success_margin_for(finder) == SUCCESS_MARGIN                      # no report
    for heldout, margin in ((0.0019, SUCCESS_MARGIN), (0.0086, 1.71 * 0.0086), (float("nan"), SUCCESS_MARGIN),
                            (0.05, 0.015)):
        finder.report = {"heldout_error_m": heldout}
        assert success_margin_for(finder) == pytest.approx(margin)
    env = _push_env()
    try:
        env.reset(seed=3)
        base = env.unwrapped
        goal = base.task.goal.copy()
        finder.report = {"heldout_error_m": 0.0086}
        robot, sim_like = CubeFinderPushReward(finder), CubeFinderPushReward(finder, success_margin=SUCCESS_MARGIN)
        for src in (robot, sim_like):
            src.bind(base)
        calls = {}
        for d in (0.022, 0.012):
            _place_cube(base.task, (goal[0] + d, goal[1]))
            finder.xy = (goal[0] + d, goal[1])
            obs = base._observe()[0]
            calls[d] = (robot(obs, {})[1], sim_like(obs, {})[1])
        assert calls == {0.022: (False, True), 0.012: (True, True)}, calls
    finally:
        env.close()


def _sim_finder(env, tmp_path, n=40):
    from robolearn.policies.cube_finder import CubeFinder, render_look_frames

    images, xy = render_look_frames(env, n, np.random.default_rng(0))
    finder = CubeFinder.fit(images, xy, camera="front", heldout=np.arange(n) >= 30)
    assert finder.report["heldout_error_m"] < 0.005, finder.report
    finder.save(tmp_path / "cube_finder")
    return tmp_path / "cube_finder"


def test_a_frame_without_the_cube_gives_a_missing_reward_never_a_zero(tmp_path):
    """Built as a session builds it ([reward] kind = "cube_finder"): the fitted finder in the loop
    follows the sim's reward on a scripted push; with the cube out of view the step's reward is
    NaN, flagged missing, not a success, and counted; the episode goes on."""
    env = _push_env()
    try:
        finder_dir = _sim_finder(env, tmp_path)
    finally:
        env.close()
    env = _push_env(privileged_obs=True,
                    reward_source={"kind": "cube_finder", "model": str(finder_dir), "where": "env"})
    try:
        base = env.unwrapped
        src = base.reward_source.inner
        obs, _ = env.reset(seed=5)
        ctrl = base.scripted_controller()
        ctrl.reset()
        diffs = []
        for _ in range(30):
            obs, r, term, trunc, info = env.step(ctrl.act(obs))
            from robolearn.tasks.arm import push_reward

            r_true = push_reward(info["cube_pos"], base.task.ee_pos, base.task.goal)[0]
            if not info.get("reward_missing"):
                diffs.append(abs(r - r_true))
            if term or trunc:
                break
        assert diffs and np.mean(diffs) < 0.15, diffs      # ~5 mm of finder error: ~0.05 of reward
        obs, _ = env.reset(seed=6)
        base.sim.set_cube_visible(False)                   # the camera sees no cube
        obs, r, term, trunc, info = env.step(np.zeros(4, np.float32))
        assert math.isnan(r) and info["reward_missing"] is True
        assert info["success"] is False and not term
        assert src.not_seen >= 1
    finally:
        env.close()


def test_the_push_reward_refuses_the_wrong_task_or_camera(tmp_path):
    from robolearn.rewards.base import RewardModelError
    from robolearn.rewards.push_camera import CubeFinderPushReward

    env = gym.make("robolearn/ArmLift-v0", obs="both", camera="front")
    try:
        with pytest.raises(RewardModelError, match="ArmPush's reward"):
            CubeFinderPushReward(_FixedFinder()).bind(env.unwrapped)
    finally:
        env.close()
    env = gym.make(PUSH, obs="both", camera="wrist")
    try:
        with pytest.raises(RewardModelError, match="camera 'front'"):
            CubeFinderPushReward(_FixedFinder()).bind(env.unwrapped)
    finally:
        env.close()
    with pytest.raises(Exception, match="cube finder .* not found"):
        CubeFinderPushReward(tmp_path / "nothing")


def test_reward_table_checks_for_the_cube_finder_kind():
    from robolearn.reward_config import reward_config

    assert reward_config({"kind": "cube_finder", "model": "x"}).where == "env"
    for table, msg in (({"kind": "cube_finder"}, "needs model"),
                       ({"kind": "cube_finder", "model": "x", "where": "learner"}, "where = \"env\""),
                       ({"kind": "cube_finder", "model": "x", "require_grasp": True}, "no classifier threshold"),
                       ({"kind": "cube_finder", "model": "x", "threshold": 0.5}, "no classifier threshold")):
        with pytest.raises(ConfigError, match=msg):
            reward_config(table)


def test_per_block_precision_and_missing_steps_from_recorded_episodes():
    from robolearn.runtime.finetune_report import episode_precision_report

    # 10 Hz, 600 s blocks = 6000 steps: two blocks
    eps = ([{"steps": 100, "success": True, "true_success": True, "true_success_last": True, "reward_missing": 2}] * 30
           + [{"steps": 100, "success": True, "true_success": True, "true_success_last": False}] * 10   # fired early
           + [{"steps": 100, "success": False, "true_success": True, "true_success_last": False,
               "reward_missing": 7}] * 20                                                              # missed
           + [{"steps": 120, "success": True, "true_success": False, "true_success_last": False}] * 5)  # false positive
    rep = episode_precision_report(eps, 10.0)
    blocks = rep["reward_precision_by_block"]
    assert [b["episodes"] for b in blocks] == [60, 5]
    b0, b1 = blocks
    assert (b0["tp"], b0["fp"], b0["fn"]) == (30, 10, 20)
    assert b0["precision"] == pytest.approx(30 / 40) and b0["recall"] == pytest.approx(30 / 50)
    assert b0["reward_missing_steps"] == 30 * 2 + 20 * 7
    assert (b1["precision"], b1["recall"]) == (0.0, None)
    assert rep["reward_precision_min_block"] == 0.0
    assert episode_precision_report([{"steps": 10, "success": True}], 10.0) == {}   # no truth: a real robot


def test_the_recorder_keeps_the_truth_at_the_last_step(tmp_path):
    """`true_success_last`: the truth where the reward's success ended the episode (the emulator's
    oracle, here the sim's): a reward that fires too early is seen as a false positive."""
    import json

    from robolearn.data.recording import RecordingWrapper

    class Oracle(gym.Wrapper):
        truths = [False, True, False]

        def step(self, action):
            obs, r, term, trunc, info = self.env.step(action)
            self.k = getattr(self, "k", 0)
            info["true_success"] = self.truths[self.k]
            self.k += 1
            return obs, r, self.k == 3, trunc, info

    env = RecordingWrapper(Oracle(gym.make(PUSH)), tmp_path / "eps", env_id=PUSH)
    try:
        env.reset(seed=0)
        for _ in range(3):
            env.step(np.zeros(4, np.float32))
    finally:
        env.close()
    meta = json.loads(next((tmp_path / "eps").glob("episode_*/episode.json")).read_text())
    assert meta["true_success"] is True and meta["true_success_last"] is False


def test_calibrate_reward_for_push_makes_the_cube_finder_reward(tmp_path):
    from robolearn.commands.finetune import children_config
    from robolearn.configs import dump_toml
    from robolearn.runtime.config import load_launch

    path = "launch/finetune_arm_push_real.toml"
    cfg = load_launch(path)
    ft = cfg.finetune
    assert ft.calibrate_arm and ft.calibrate_perception and ft.calibrate_reward
    base = open(path).read()
    for i, (text, msg) in enumerate(((base.replace("calibrate_perception = true", "calibrate_perception = false"),
                                      "calibrate_perception = true"),
                                     (base.replace('hidden = ', 'require_grasp = true\nhidden = '),
                                      "remove threshold / require_grasp"),
                                     (base.replace('hidden = ', 'model = "models/finder"\nhidden = '), "may only set hidden"),
                                     (base.replace('hidden = "last_seen"', 'hidden = "zero"'), "hidden='zero'"),
                                     (base.replace("ArmPush", "ArmReach").replace('hidden = "last_seen"', ''), "ArmLift or ArmPush"))):
        f = tmp_path / f"p{i}.toml"
        f.write_text(text)
        with pytest.raises(ConfigError, match=msg):
            load_launch(f)
    # what the camera calibration puts into [reward] (finetune_calibration.py), as the children read it
    assert cfg.reward == {"hidden": "last_seen"}
    cfg.reward = {**cfg.reward, "kind": "cube_finder",
                  "model": str(tmp_path / "perception_calibration" / "cube_finder"), "where": "env"}
    f = tmp_path / "finetune_launch.toml"
    f.write_text(dump_toml(children_config(cfg)))
    child = load_launch(f)
    assert child.reward["kind"] == "cube_finder" and not child.finetune.calibrate_reward
    assert child.reward["hidden"] == "last_seen"


def test_push_launch_files_load():
    from robolearn.policies.perception import camera_names
    from robolearn.policies.train_config import load_launch as load_train_config
    from robolearn.runtime.config import load_launch

    cfg = load_launch("launch/finetune_arm_push_real.toml")
    ft = cfg.finetune
    assert cfg.env == PUSH and cfg.algo == "rlpd" and ft.warm_start == "rlpd"
    assert ft.reality == "hard" and ft.prior_data.startswith("sim:")
    assert camera_names(cfg.env_kwargs) == ["front"]                 # finder (reset + reward) and localiser
    assert cfg.env_kwargs["perception"] == ft.sim_env_kwargs["perception"]
    assert ft.checkpoint == "runs/push-hard-100k" and cfg.env_kwargs["perception"] == "models/push-finder"
    assert ft.load == "agent" and cfg.env_kwargs["cube_reset"] == "keep_in_region"
    train = load_train_config("launch/sim_arm_push_hard.toml")
    assert train.env == PUSH and train.algo == "rlpd" and train.demos == "scripted:20"
    assert train.steps == 50_000                  # 20k left sim success at 0.3-0.9 and the robot's at 0.3-0.5
    assert train.env_kwargs["perception"] == cfg.env_kwargs["perception"]
    assert train.agent["privileged"] == "none"                       # the critic goes to the robot too
    assert train.sim_params == ft.sim_params == "launch/hard_arm_sim_params.toml"
    # the session's pretraining: those 50k steps continued for 50k more, same sim and networks
    more = load_train_config("launch/sim_arm_push_hard_100k.toml")
    assert more.init_from == "runs/push-hard" and more.out == ft.checkpoint and more.steps == 50_000
    assert (more.env, more.algo, more.demos, more.sim_params, more.utd) == (train.env, train.algo, train.demos,
                                                                           train.sim_params, train.utd)
    assert more.agent == train.agent and more.env_kwargs == train.env_kwargs and not more.reality_gap
    assert cfg.learner.agent["privileged"] == train.agent["privileged"]
    nominal = load_train_config("launch/sim_arm_push_perception.toml")
    assert nominal.agent["privileged"] == "critic" and nominal.env_kwargs["perception"] == cfg.env_kwargs["perception"]


def test_a_robots_push_goal_is_drawn_around_the_cube_the_reset_saw():
    """On hardware the goal cannot come from the simulator's cube: the camera reset's last look
    (`cube_seen_xy`) stands in, so goals lie 6-12 cm from the cube as in sim."""
    from robolearn.tasks.arm import ArmPush

    class _T:
        sim = None
        cube_seen_xy = np.array([0.27, 0.11])

    rng = np.random.default_rng(0)
    d = [np.linalg.norm(ArmPush.sample_goal(_T(), rng)[:2] - _T.cube_seen_xy) for _ in range(50)]
    assert min(d) >= 0.06 - 1e-9 and max(d) <= 0.12 + 1e-9
    _T.cube_seen_xy = None                 # no look: the region's centre, as before
    g = ArmPush.sample_goal(_T(), rng)
    assert 0.06 - 1e-9 <= np.linalg.norm(g[:2] - np.array([0.22, 0.0])) <= 0.12 + 1e-9


def test_the_finder_estimate_holds_the_last_sighting_flagged_and_forgets_it_at_reset():
    from robolearn.policies.finder_estimate import FinderEstimate

    finder = _FixedFinder((0.25, -0.05))
    est = FinderEstimate(finder)
    img = np.zeros((84, 84, 3), np.uint8)
    assert est.predict(img).tolist() == pytest.approx([0.25, -0.05, 1.0])
    finder.xy = None                                           # occluded: the last sighting, seen = 0
    assert est.predict(img).tolist() == pytest.approx([0.25, -0.05, 0.0])
    est.reset()                                                # a new episode: no sighting yet
    assert est.predict(img).tolist() == pytest.approx([0.22, 0.0, 0.0])   # the start region's centre
    assert (est.seen, est.not_seen) == (1, 2)
    assert est.predict(np.stack([img, img])).shape == (2, 3)


def test_perception_can_be_a_cube_finder_fitted_in_sim(tmp_path, capsys):
    """`robolearn perception fit-finder` writes a finder that `perception = DIR` turns into the
    policy's (x, y, seen) estimate: close to the sim's cube on a scripted push."""
    from robolearn import cli
    from robolearn.policies.env_building import make_env

    out = tmp_path / "finder"
    assert cli.main(["perception", "fit-finder", "--env", PUSH, "--out", str(out), "--frames", "40"]) == 0
    capsys.readouterr()
    assert cli.main(["perception", "fit-finder", "--env", PUSH, "--out", str(out)]) == 2
    assert "already holds a cube finder" in capsys.readouterr().err
    assert cli.main(["perception", "fit-finder", "--env", PUSH, "--camera", "wrist", "--out", str(tmp_path / "w")]) == 2
    assert "fixed to the world" in capsys.readouterr().err and not (tmp_path / "w").exists()
    env = make_env(PUSH, "state", env_kwargs={"perception": str(out), "privileged_obs": True})
    try:
        assert env.observation_space["state"].shape == (17 + 3,)
        obs, _ = env.reset(seed=7)
        ctrl = env.unwrapped.scripted_controller()
        ctrl.reset()
        errs = []
        for _ in range(25):
            s = obs["state"]
            if s[-1] == 1.0:
                errs.append(float(np.linalg.norm(s[-3:-1] - obs["privileged"][3:5])))
            obs, _, term, trunc, _ = env.step(ctrl.act(obs))
            if term or trunc:
                break
        assert len(errs) >= 5 and np.mean(errs) < 0.012, errs
    finally:
        env.close()


def test_a_partly_hidden_cube_is_not_a_sighting_for_the_reward():
    """The arm in front of part of the cube pulls the blob's centre off it: for the reward
    (whole_share) such a blob is "not seen"; the whole cube, and the plain finder, still answer."""
    from robolearn.policies.cube_finder import CubeFinder, CubeNotSeenError, render_look_frames

    env = _push_env()
    try:
        images, xy = render_look_frames(env, 30, np.random.default_rng(1))
    finally:
        env.close()
    finder = CubeFinder.fit(images[:24], xy[:24], camera="front")
    assert len(finder.area_fit) == 3
    img = images[27].copy()
    assert np.linalg.norm(finder.estimate(img, whole_share=0.7) - xy[27]) < 0.006
    vs, us = np.nonzero(finder.rule.mask(img))
    assert len(vs) >= 6
    cover = us <= np.median(us)                       # hide the left half of the blob
    img[vs[cover], us[cover]] = (90, 90, 90)
    finder.estimate(img)                               # the plain finder still answers ...
    with pytest.raises(CubeNotSeenError, match="only part of the cube"):
        finder.estimate(img, whole_share=0.7)          # ... the reward's does not


def test_the_session_uses_the_robot_fitted_finder_for_policy_reward_and_resets(tmp_path):
    from types import SimpleNamespace

    from robolearn.runtime.finetune_calibration import use_calibration

    out = tmp_path / "RUN" / "perception_calibration"
    sim_finder = tmp_path / "sim_finder"
    sim_finder.mkdir()
    (sim_finder / "cube_finder.json").write_text("{}")
    cfg = SimpleNamespace(env=PUSH, reward={}, finetune=SimpleNamespace(calibrate_reward=True),
                          env_kwargs={"perception": str(sim_finder)})
    rep = use_calibration(cfg, out, str(sim_finder))
    assert cfg.env_kwargs["perception"] == cfg.env_kwargs["cube_finder"] == str(out / "cube_finder")
    assert cfg.reward == {"kind": "cube_finder", "model": str(out / "cube_finder"), "where": "env"}
    assert rep["push_reward"]["kind"] == "cube_finder"
    # a localiser policy gets the localiser tuned on the robot's frames; lift the classifier
    cfg = SimpleNamespace(env="robolearn/ArmLift-v0", reward={"require_grasp": True},
                          finetune=SimpleNamespace(calibrate_reward=True), env_kwargs={})
    use_calibration(cfg, out, "models/lift-perception")
    assert cfg.env_kwargs["perception"] == str(out / "perception")
    assert cfg.reward == {"require_grasp": True, "model": str(out / "success_classifier"), "where": "env"}


def test_a_cube_held_in_the_gripper_is_a_missing_reward():
    """Closed on something (measured open, commanded closed): the cube is off the table, where
    the table homography cannot place it; the finder is not even asked."""
    from types import SimpleNamespace

    from robolearn.rewards.push_camera import CubeFinderPushReward

    task = SimpleNamespace(name="push", spec=SimpleNamespace(gripper_closed=0.0, gripper_open=1.6),
                           measured_gripper=1.35, gripper_cmd=0.0, ee_pos=np.array([0.2, 0.0, 0.08]),
                           goal=np.array([0.25, 0.05, CUBE_HALF]))
    env = SimpleNamespace(task=task, backend=SimpleNamespace(cameras={"front": None}))
    finder = _FixedFinder((0.25, 0.05))
    src = CubeFinderPushReward(finder)
    src.bind(env)
    obs = {"front": np.zeros((84, 84, 3), np.uint8)}
    src.reset()
    r, s = src(obs, {})                           # the first step: still closing, for all it knows
    assert np.isfinite(r) and finder.images == 1
    task.measured_gripper = 1.34                  # stopped short of closed: holding the cube
    r, s = src(obs, {})
    assert math.isnan(r) and not s and src.in_hand == 1 and finder.images == 1
    task.measured_gripper = 0.8                   # moving (a slow servo still closing): not a hold
    assert np.isfinite(src(obs, {})[0])
    task.measured_gripper = 0.02
    src(obs, {})
    r, s = src(obs, {})                           # closed on nothing: the cube is on the table
    assert np.isfinite(r) and s and finder.images == 4


def test_robot_evaluation_counts_missing_rewards_instead_of_returning_nan():
    """A reward source that abstains (NaN, e.g. the finder did not see the cube) on some steps:
    the evaluation's return sums the steps that had a reward and counts the others (the push
    session's zero-shot printed `"return": NaN` before)."""
    import gymnasium as gym

    from robolearn.runtime.finetune import evaluate_on_robot

    class Abstaining(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

        def reset(self, seed=None, options=None):
            self.t = 0
            return np.zeros(2, np.float32), {}

        def step(self, action):
            self.t += 1
            r = float("nan") if self.t % 2 else -1.0
            return np.zeros(2, np.float32), r, False, self.t >= 4, {"success": False, "true_success": False}

    res = evaluate_on_robot(Abstaining, lambda o: np.zeros(2, np.float32), episodes=3, seed=0)
    assert res["return"] == -2.0 and res["reward_missing_steps"] == 6
    assert res["true_success_rate"] == 0.0 and res["env_steps"] == 12
    assert res["per_episode"] == [{"seed": s, "steps": 4, "success": False, "true_success": False,
                                   "return": -2.0, "reward_missing_steps": 2} for s in (0, 1, 2)]


def test_an_evaluation_prints_its_failed_seeds_by_the_truth(capsys):
    """The zero-shot and final lines: the summed result without the per-episode rows, then the
    seeds that failed by the truth (the reward's verdict only where no truth was there)."""
    from robolearn.commands.finetune import print_evaluation

    rows = [{"seed": 7000 + i, "steps": 50, "success": i != 1, "true_success": i not in (1, 2),
             "return": 0.0, "reward_missing_steps": 0} for i in range(4)]
    print_evaluation("final", {"episodes": 4, "true_success_rate": 0.5, "per_episode": rows})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == 'final: {"episodes": 4, "true_success_rate": 0.5}'
    assert out[1] == "final: 2 of 4 episodes failed (true success), seeds [7001, 7002]"
    for r in rows:
        r["true_success"] = None
    print_evaluation("zero-shot", {"episodes": 4, "per_episode": rows})
    assert capsys.readouterr().out.splitlines()[1] == "zero-shot: 1 of 4 episodes failed (success), seeds [7001]"


def test_hidden_last_seen_gives_a_hidden_frame_the_last_sightings_reward_never_a_success():
    """`[reward] hidden = "last_seen"`: a frame where the arm hides the cube scores the cube at its
    last whole sighting this episode (the policy's own estimate there) with the arm where it is now;
    never a success; before any sighting, and after a reset, it stays MISSING. The default
    ("missing") keeps every hidden frame MISSING."""
    from types import SimpleNamespace

    from robolearn.rewards.base import RewardModelError
    from robolearn.rewards.push_camera import CubeFinderPushReward
    from robolearn.tasks.arm import push_reward

    goal = np.array([0.25, 0.05, CUBE_HALF])
    task = SimpleNamespace(name="push", spec=SimpleNamespace(gripper_closed=0.0, gripper_open=1.6),
                           measured_gripper=1.6, gripper_cmd=1.6, ee_pos=np.array([0.2, 0.0, 0.08]), goal=goal)
    env = SimpleNamespace(task=task, backend=SimpleNamespace(cameras={"front": None}))
    obs = {"front": np.zeros((84, 84, 3), np.uint8)}
    finder = _FixedFinder()
    filled, dropping = CubeFinderPushReward(finder, hidden="last_seen"), CubeFinderPushReward(finder)
    for src in (filled, dropping):
        src.bind(env)
        src.reset()
    finder.xy = None
    assert math.isnan(filled(obs, {})[0])               # nothing seen yet this episode: no reward to give
    at_goal = (goal[0] + 0.001, goal[1])
    finder.xy = at_goal
    assert filled(obs, {})[1] and dropping(obs, {})[1]  # seen at the goal: a success
    finder.xy = None
    task.ee_pos = np.array([0.3, 0.1, 0.1])             # the arm moved, the cube is hidden
    r, s = filled(obs, {})
    want = push_reward((at_goal[0], at_goal[1], CUBE_HALF), task.ee_pos, goal)[0]
    assert r == pytest.approx(want, abs=1e-12) and not s and filled.filled == 1
    assert want != pytest.approx(push_reward((at_goal[0], at_goal[1], CUBE_HALF), np.array([0.2, 0.0, 0.08]), goal)[0])
    r, s = dropping(obs, {})
    assert math.isnan(r) and not s and dropping.filled == 0
    filled.reset()                                      # a new episode forgets the sighting
    assert math.isnan(filled(obs, {})[0])
    with pytest.raises(RewardModelError, match="hidden"):
        CubeFinderPushReward(finder, hidden="zero")


def test_the_hidden_option_is_checked_and_kept_through_the_sessions_calibration(tmp_path):
    from types import SimpleNamespace

    from robolearn.reward_config import reward_config
    from robolearn.runtime.finetune_calibration import use_calibration

    assert reward_config({"kind": "cube_finder", "model": "F", "hidden": "last_seen"}, "[reward]").hidden == "last_seen"
    with pytest.raises(ConfigError, match="hidden='zero'"):
        reward_config({"kind": "cube_finder", "model": "F", "hidden": "zero"}, "[reward]")
    with pytest.raises(ConfigError, match="cube finder"):
        reward_config({"kind": "classifier", "model": "F", "hidden": "last_seen"}, "[reward]")
    out = tmp_path / "perception_calibration"
    cfg = SimpleNamespace(env=PUSH, reward={"hidden": "last_seen"}, finetune=SimpleNamespace(calibrate_reward=True),
                          env_kwargs={})
    use_calibration(cfg, out, None)
    assert cfg.reward == {"hidden": "last_seen", "kind": "cube_finder", "model": str(out / "cube_finder"),
                          "where": "env"}
