"""ArmLift on a robot without a simulator: the emulated operator (hand, prompt, teleop device),
the camera cube reset, the cube finder, and recording with human labels on backend="real".

The robot is the arm emulator over a pseudo-terminal with its MJPEG camera and /truth.json
(no mocks); sim tests run the same reset controller in physical mode, where the simulator can
check what the camera-driven reset did.
"""
from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest

import robolearn  # noqa: F401  (registers the envs)
from robolearn import cli
from robolearn.errors import ConfigError, DatasetError, DeviceError
from robolearn.errors import ResetError
from robolearn.sim.arm_workspace import CUBE_HALF, CUBE_REGION_HIGH, CUBE_REGION_LOW

LIFT = "robolearn/ArmLift-v0"


class NoReward:
    def reset(self):
        pass

    def __call__(self, obs, info):
        return 0.0, False


def _in_region(xy, margin=0.0):
    return bool(np.all(np.asarray(xy) >= CUBE_REGION_LOW - margin)
                and np.all(np.asarray(xy) <= CUBE_REGION_HIGH + margin))


@pytest.fixture(scope="module")
def robot():
    from robolearn.drivers.emulation import start_emulator

    with start_emulator("arm", reality=None) as r:
        yield r


def _cube(robot):
    from robolearn.drivers.truth import fetch_truth

    t = fetch_truth(robot.truth_url)
    return np.asarray(t["bodies"]["cube"][:3]), t


# ----------------------------------------------------------------------------- the hand
def test_the_hand_puts_the_cube_back_and_every_move_is_on_the_record(robot):
    from robolearn.teleop.operator import hand_place_cube

    _, before = _cube(robot)
    out = hand_place_cube(robot.hand_url, xy=(0.2, 0.05))
    cube, after = _cube(robot)
    assert np.allclose(cube[:2], (0.2, 0.05), atol=0.002) and abs(cube[2] - CUBE_HALF) < 0.003
    assert after["hand_moves"] == before["hand_moves"] + 1 == out["moves"]
    yaw = 2 * math.atan2(after["bodies"]["cube"][6], after["bodies"]["cube"][3])
    assert abs(yaw - math.atan2(0.05, 0.2)) <= 0.3 + 1e-6     # the start yaw rule
    hand_place_cube(robot.hand_url)                            # a random start-region point
    assert _in_region(_cube(robot)[0][:2])
    import urllib.error
    import urllib.request

    for body, code in ((b'{"xy": "here"}', 500), (b"not json", 400), (b"[1, 2]", 400)):
        req = urllib.request.Request(robot.hand_url, data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == code
    assert _cube(robot)[1]["hand_moves"] == after["hand_moves"] + 1     # refused: nothing moved
    with pytest.raises(DeviceError, match="did not answer"):
        hand_place_cube(robot.hand_url.replace("place_cube", "nothing"))


def test_operator_prompt_answers_a_failed_reset_with_the_hand_and_is_counted(robot):
    """A reset that cannot succeed: the supervisor holds the arm and asks; the emulated
    operator puts the cube back (hand), answers retry twice, then continue; every ask counts."""
    from robolearn.teleop.operator import hand_place_cube

    hand_place_cube(robot.hand_url, xy=(0.33, 0.2))   # somewhere a person must fix
    env = gym.make(LIFT, backend="real", port=robot.port, timeout=0.1, control_hz=20,
                   reward_source=NoReward(), reset_prompt=f"operator:{robot.hand_url}",
                   reset_on_failure="prompt")
    try:
        _, info = env.reset(options={"reset_controller": _AlwaysFails()})
        rep = info["reset"]
        assert rep["human_prompts"] == 3 and rep["kind"] == "human" and not rep["ok"]
        assert rep["failures"] == 6                      # 2 controller tries per prompt round
        assert _in_region(_cube(robot)[0][:2])
        assert env.unwrapped.resets.prompt.placed == 3
    finally:
        env.close()
    with pytest.raises(ConfigError, match="reset_prompt='operator'"):
        gym.make(LIFT, backend="real", port=robot.port, reward_source=NoReward(), reset_prompt="operator")


def test_a_retried_reset_gets_the_arm_back_after_the_hold(robot):
    """The supervisor holds a servo arm (torque off) after a failed try; the next try (an
    automatic one, or after the operator's retry) must find the torque on again."""
    env = gym.make(LIFT, backend="real", port=robot.port, timeout=0.1, control_hz=20,
                   reward_source=NoReward(), reset_prompt=f"operator:{robot.hand_url}",
                   reset_on_failure="prompt")
    try:
        ctrl = _FailsOnceThenMoves()
        _, info = env.reset(options={"reset_controller": ctrl})
        rep = info["reset"]
        assert rep["ok"] and rep["failures"] == 1 and rep["human_prompts"] == 0, rep
        assert ctrl.moved and env.unwrapped.task.arm.torque_on
    finally:
        env.close()


class _FailsOnceThenMoves:
    kind = "scripted"

    def __init__(self):
        self.tries, self.moved = 0, False

    def run(self, task, rng):
        self.tries += 1
        st = task.arm.read()
        task.arm.command(st.q, st.gripper)
        yield task.arm.advance(0.05) or 0.05
        if self.tries == 1:
            raise ResetError("the grasp slipped")
        self.moved = True


class _AlwaysFails:
    kind = "scripted"

    def run(self, task, rng):
        yield 0.05
        raise ResetError("the cube cannot be seen")


# ------------------------------------------------------------------- operator + record
def test_record_on_the_robot_with_the_operators_labels(robot, tmp_path):
    """`robolearn record` on backend="real" for lift: no reward model, so the device's labels:
    frames marked while the true cube is lifted, rewards missing (NaN), success by the device."""
    from robolearn.data.dataset import Dataset
    from robolearn.policies.demos import load_demos
    from robolearn.policies.env_building import make_env
    from robolearn.teleop.operator import hand_place_cube

    hand_place_cube(robot.hand_url, xy=(0.22, 0.0))
    out = tmp_path / "robot_lift"
    kw = {"backend": "real", "port": robot.port, "timeout": 0.1, "control_hz": 20,
          "camera": {"front": robot.camera_urls["front"]}, "image_size": [64, 64]}
    argv = ["record", LIFT, "--device", "operator", "--truth-url", robot.truth_url, "--operator-mode",
            "demo", "--obs", "both", "--episodes", "1", "--out", str(out)]
    for k, v in kw.items():
        argv += ["--env-kw", f"{k}={json.dumps(v)}"]
    assert cli.main(argv) == 0
    ds = Dataset(out)
    ep = ds.episode(0)
    marks = np.asarray(ep.data["success_mark"], bool)
    assert ep.meta["success"] and ep.meta["label_source"] == "operator"
    assert 1 <= marks.sum() <= 9 and marks[-1]             # marked while lifted, then Enter
    assert np.all(np.isnan(ep.data["reward"])) and not np.any(ep.data["success"])
    assert ep.frames("front").shape[1:] == (64, 64, 3)
    assert _cube(robot)[0][2] - CUBE_HALF > 0.05           # the truth agrees: it is up
    env = make_env(LIFT, "both", env_kwargs={"image_size": [64, 64], "camera": "front"})
    try:
        with pytest.raises(DatasetError, match="no reward .*reward train"):
            load_demos(str(out), env)
    finally:
        env.close()


def test_operator_needs_its_eyes_and_a_lift_task(robot):
    from robolearn.teleop import make_device

    env = gym.make(LIFT)
    try:
        with pytest.raises(ConfigError, match="truth_url"):
            make_device("operator", env)
        with pytest.raises(ConfigError, match="mode='lazy'"):
            make_device("operator", env, truth_url=robot.truth_url, mode="lazy")
    finally:
        env.close()
    env = gym.make("robolearn/ArmReach-v0")
    try:
        with pytest.raises(ConfigError, match="lift"):
            make_device("operator", env, truth_url=robot.truth_url)
    finally:
        env.close()


# ------------------------------------------------------------- camera cube reset (sim)
class _SimEyes:
    """A cube finder that reads the simulator (+ an offset): tests the controller, not a net."""

    camera = "front"
    look_q = np.array((0.0, -0.6, 1.2, 0.3, 0.0))

    def __init__(self, sim, offset=(0.0, 0.0)):
        self.sim, self.offset, self.looks = sim, np.asarray(offset), 0

    def locate(self, camera):
        camera.read()
        self.looks += 1
        return self.sim.cube_pose()[0][:2] + self.offset


def _physical_lift(finder_offset=(0.0, 0.0), on_failure="raise"):
    env = gym.make(LIFT, reset_mode="physical", reset_on_failure=on_failure, camera="front",
                   image_size=[64, 64])
    base = env.unwrapped
    base.task.cube_finder = _SimEyes(base.sim, finder_offset)
    return env, base


def _put(sim, xy, yaw):
    """Where the last episode left the cube (a test stands in for the policy here)."""
    q = sim._cube_q
    sim.data.qpos[q:q + 3] = (xy[0], xy[1], CUBE_HALF)
    sim.data.qpos[q + 3:q + 7] = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))


def test_camera_cube_reset_picks_the_cube_anywhere_and_places_it_in_the_region():
    env, base = _physical_lift()
    try:
        env.reset(seed=1)
        for xy, rel in (((0.12, 0.15), 0.2), ((0.30, -0.18), -0.3), ((0.2, 0.0), 0.0)):
            _put(base.sim, xy, math.atan2(xy[1], xy[0]) + rel)
            _, info = env.reset(seed=2)
            rep = info["reset"]
            cube = base.sim.cube_pose()[0]
            assert rep["ok"] and rep["teleports"] == 0 and rep["kind"] == "scripted", rep
            assert _in_region(cube[:2], 0.01) and abs(cube[2] - CUBE_HALF) < 0.004, cube
            assert np.max(np.abs(base.backend.robot.read().q - base.task.home_q)) < 0.05
        assert base.task.cube_finder.looks >= 6       # a look before the grasp, one after placing
    finally:
        env.close()


def test_camera_cube_reset_keeps_a_cube_inside_the_region_where_it_lies_and_places_one_outside():
    """cube_reset="keep_in_region" (reset-free push): one look, arm home, the push goal drawn
    around the cube it saw; a cube outside the region is still picked up and placed."""
    env = gym.make("robolearn/ArmPush-v0", reset_mode="physical", reset_on_failure="raise", camera="front",
                   image_size=[64, 64], cube_reset="keep_in_region")
    base = env.unwrapped
    base.task.cube_finder = eyes = _SimEyes(base.sim)
    try:
        env.reset(seed=1)
        _put(base.sim, (0.21, 0.05), 0.3)
        before, looks = base.sim.cube_pose()[0].copy(), eyes.looks
        _, info = env.reset(seed=2)
        cube = base.sim.cube_pose()[0]
        assert info["reset"]["ok"] and eyes.looks == looks + 1
        assert np.allclose(cube[:2], before[:2], atol=0.003), (cube, before)
        assert np.allclose(base.task.cube_seen_xy, before[:2], atol=1e-6)
        assert 0.05 < np.linalg.norm(base.task.goal[:2] - cube[:2]) < 0.125
        assert np.max(np.abs(base.backend.robot.read().q - base.task.home_q)) < 0.05
        _put(base.sim, (0.30, -0.18), 0.0)                 # pushed out of the region
        looks = eyes.looks
        _, info = env.reset(seed=3)
        cube = base.sim.cube_pose()[0]
        assert info["reset"]["ok"] and eyes.looks >= looks + 3   # keep-look, grasp look, check look
        assert _in_region(cube[:2], 0.01) and not np.allclose(cube[:2], (0.30, -0.18), atol=0.02)
    finally:
        env.close()
    with pytest.raises(ConfigError, match="cube_reset"):
        gym.make("robolearn/ArmPush-v0", cube_reset="nearby")


def test_camera_cube_reset_says_when_the_cube_is_wedged_across_the_fingers():
    """The model's gripper opens 4.0 cm, a 3 cm cube's diagonal is 4.2 cm: a cube turned 45 deg
    to the fingers stays between them; the fingers' opening shows it, and the reset says so."""
    env, base = _physical_lift(on_failure="continue")
    try:
        env.reset(seed=1)
        _put(base.sim, (0.2, 0.0), math.radians(45))
        _, info = env.reset(seed=2)
        assert not info["reset"]["ok"] and "wedged across the open fingers" in info["reset"]["message"]
    finally:
        env.close()


def test_camera_cube_reset_with_a_wrong_estimate_fails_loudly_and_holds():
    env, base = _physical_lift(finder_offset=(0.0, 0.06), on_failure="continue")
    try:
        _, info = env.reset(seed=0)
        rep = info["reset"]
        assert not rep["ok"] and rep["failures"] == 2
        assert "could not grasp the cube in 3 attempts" in rep["message"]
    finally:
        env.close()
    env, base = _physical_lift(finder_offset=(0.3, 0.0), on_failure="continue")
    try:
        _, info = env.reset(seed=0)
        assert "out of the arm's reach" in info["reset"]["message"]
    finally:
        env.close()


# ------------------------------------------------------------------------ cube finder
@pytest.fixture(scope="module")
def finder(tmp_path_factory):
    """A finder fitted from sim frames at the look pose (the robot fits its own from frames the
    arm labels; here the sim stands in for the arm's kinematics)."""
    from robolearn.policies.cube_finder import CubeFinder, render_look_frames

    env = gym.make(LIFT, obs="both", camera="front")
    try:
        x, xy = render_look_frames(env, 40, np.random.default_rng(0))
    finally:
        env.close()
    held = np.arange(40) >= 32
    f = CubeFinder.fit(x, xy, heldout=held)
    out = tmp_path_factory.mktemp("finder") / "lift"
    f.save(out)
    return out, f


def test_cube_finder_fits_a_homography_that_finds_the_cube_anywhere_in_reach(finder):
    from robolearn.policies.cube_finder import CubeFinder, render_look_frames

    out, f = finder
    assert f.report["seen"] == 40 and f.report["heldout_points"] == 8
    assert f.report["heldout_error_m"] < 0.006, f.report          # mm, on points it was not fitted on
    g = CubeFinder.load(out)
    assert np.allclose(g.homography, f.homography)
    env = gym.make(LIFT, obs="both", camera="front")
    try:
        x, xy = render_look_frames(env, 10, np.random.default_rng(5))
        est = np.array([g.estimate(img) for img in x])
        assert np.linalg.norm(est - xy, axis=1).mean() < 0.006
    finally:
        env.close()


def test_cube_finder_ignores_red_off_the_table(finder):
    """A bigger red blob where no reachable cube could be (JPEG fringes of the orange arm did
    this on the emulated hard camera) must not be taken for the cube."""
    from robolearn.policies.cube_finder import render_look_frames

    _, f = finder
    env = gym.make(LIFT, obs="both", camera="front")
    try:
        x, xy = render_look_frames(env, 3, np.random.default_rng(9))
    finally:
        env.close()
    for img, true_xy in zip(x, xy):
        img = img.copy()
        img[2:8, 38:44] = (200, 20, 20)             # 36 px of red in the sky above the table
        assert np.linalg.norm(f.estimate(img) - true_xy) < 0.01


def test_cube_finder_refusals(finder, tmp_path):
    from robolearn.policies.cube_finder import CubeFinder, CubeNotSeenError

    out, f = finder
    with pytest.raises(CubeNotSeenError, match="does not see the cube"):
        f.estimate(np.full((84, 84, 3), 120, np.uint8))                  # an empty table
    with pytest.raises(ConfigError, match="image_size"):
        f.estimate(np.zeros((64, 64, 3), np.uint8))
    with pytest.raises(ConfigError, match="image_size"):
        gym.make(LIFT, camera="front", image_size=[64, 64], cube_finder=str(out))
    with pytest.raises(ConfigError, match="camera 'front'"):
        gym.make(LIFT, camera="wrist", cube_finder=str(out))
    with pytest.raises(ConfigError, match="no cube"):
        gym.make("robolearn/ArmReach-v0", camera="front", cube_finder=str(out))
    with pytest.raises(DatasetError, match="not found.*calibrate_perception"):
        gym.make(LIFT, cube_finder=str(tmp_path / "none"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cube_finder.json").write_text(json.dumps({**json.loads((out / "cube_finder.json").read_text()),
                                                      "homography": [[1, 0], [0, 1]]}))
    with pytest.raises(DatasetError, match="corrupt"):
        CubeFinder.load(bad)
    with pytest.raises(ConfigError, match="seen in only 0"):
        CubeFinder.fit(np.full((8, 84, 84, 3), 120, np.uint8), np.zeros((8, 2)))


def test_cube_finder_fit_drops_frames_where_a_speck_was_taken_for_the_cube():
    """Lift session 15: at one look pose the cube was hidden and a 2-pixel red speck above the
    table passed the colour rule; least squares over every frame bent the map to 190 mm mean
    error and every camera reset of the session missed the cube. The fit keeps the frames that
    agree on one map and says how many it left out."""
    from robolearn.policies.cube_finder import (ColourRule, CubeFinder, apply_homography, blob_centre,
                                                fit_homography, render_look_frames)

    env = gym.make(LIFT, obs="both", camera="front")
    try:
        x, xy = render_look_frames(env, 30, np.random.default_rng(3))
    finally:
        env.close()
    rule = ColourRule()
    for i in (4, 5):                                     # the cube hidden, a speck seen instead
        table = np.median(x[i].reshape(-1, 3), axis=0).astype(np.uint8)
        x[i][rule.mask(x[i])] = table
        x[i][18, 44:46] = (200, 20, 20)
    held = np.arange(30) >= 24
    f = CubeFinder.fit(x, xy, heldout=held)
    assert f.report["outliers"] == 2 and f.report["fit_error_m"] < 0.006, f.report
    assert f.report["heldout_error_m"] < 0.006, f.report
    uv = np.array([blob_centre(img, rule)[0] for img in x])
    plain = fit_homography(uv[~held], xy[~held])             # what least squares alone would give
    assert np.linalg.norm(apply_homography(plain, uv[held]) - xy[held], axis=1).mean() > 0.02

    x[:12] = x[4]                                        # most frames disagree: refused, not fitted
    with pytest.raises(ConfigError, match="agree on one map"):
        CubeFinder.fit(x, xy, heldout=held)


def test_camera_reset_with_the_fitted_finder_in_sim(finder):
    """The whole camera reset with the colour + homography finder (no simulator pose read):
    the cube from where an episode left it back to the start region, zero teleports."""
    out, _ = finder
    env = gym.make(LIFT, reset_mode="physical", reset_on_failure="raise", camera="front",
                   cube_finder=str(out))
    base = env.unwrapped
    try:
        env.reset(seed=1)
        for xy, rel in (((0.14, -0.16), 0.1), ((0.31, 0.1), -0.2)):
            _put(base.sim, xy, math.atan2(xy[1], xy[0]) + rel)
            _, info = env.reset(seed=3)
            cube = base.sim.cube_pose()[0]
            assert info["reset"]["ok"] and info["reset"]["teleports"] == 0, info["reset"]
            assert _in_region(cube[:2], 0.01) and abs(cube[2] - CUBE_HALF) < 0.004
    finally:
        env.close()


# ------------------------------------------------------------------ camera calibration
def test_camera_calibration_labels_frames_with_the_arm_and_fits_the_finder(tmp_path):
    """The arm moves the cube; each frame's label comes from its kinematics (checked here
    against the sim's truth), and the finder fitted from them finds the cube."""
    import robolearn.runtime.perception_calibration as PC

    env = gym.make(LIFT, obs="both", camera="front", reset_mode="physical")
    base = env.unwrapped
    errs = {0: [], 1: [], 2: [], 3: []}
    orig = PC._Frames.add

    def add(self, image, label, cycle, kind):       # the sim's truth at the moment of each frame
        errs[kind].append(np.linalg.norm(np.asarray(label) - base.sim.cube_pose()[0][:len(label)]))
        orig(self, image, label, cycle, kind)

    placed = []

    def put_cube(xy, why):                           # the operator (here: the test) places it
        placed.append(why)
        _put(base.sim, xy, math.atan2(xy[1], xy[0]))

    PC._Frames.add = add
    try:
        cfg = PC.PerceptionCalibrationConfig(cycles=10, sim_frames=40, epochs=1)
        frames, stats = PC.collect_robot_frames(base.task, base.backend.cameras["front"], cfg, put_cube)
    finally:
        PC._Frames.add = orig
        env.close()
    assert stats["cycles"] == 10 and len(placed) == stats["operator_placements"] == 2   # start, cycle 5
    assert stats["robot_s"] > 20
    # on the table / in the hand / at the look pose / hovering over it (the hover must not push it);
    # in the hand the fingers centre the cube across their closing direction only, so it may sit up
    # to ~1.5 cm along them (and is let go there)
    assert (frames["episode"]["kind"] == 3).sum() == 10 * cfg.hover_points * cfg.hover_frames
    for kind, (mean, most) in {0: (0.008, 0.015), 1: (0.012, 0.02), 2: (0.01, 0.02), 3: (0.008, 0.015)}.items():
        e = errs[kind]
        assert len(e) and np.mean(e) < mean and np.max(e) < most, (kind, np.mean(e), np.max(e))
    assert frames["look"]["labels"].shape == (20, 2) and frames["episode"]["labels"].shape[1] == 3
    rep = PC.calibrate_localisers(frames, None, tmp_path / "cal", LIFT, cfg, log=lambda s: None)
    assert rep["cube_finder"]["seen"] == 20 and rep["cube_finder"]["heldout_error_m"] < 0.01
    from robolearn.policies.cube_finder import CubeFinder

    assert CubeFinder.load(tmp_path / "cal" / "cube_finder").report == rep["cube_finder"]

    # the lift success classifier from the same frames: labels from the cube's height
    from robolearn.rewards.serving import make_reward_source
    from robolearn.sim.arm_workspace import LIFT_HEIGHT

    h = frames["episode"]["labels"][:, 2] - CUBE_HALF
    lifted, keep = PC.success_labels(h, LIFT_HEIGHT, 0.01)
    assert lifted[keep].any() and not lifted[keep].all()
    assert not (lifted & (frames["episode"]["kind"] != 1)).any()    # only a held cube is ever lifted
    cfg.classifier_epochs = 1
    crep = PC.train_success_classifier(frames, tmp_path / "cal" / "clf", LIFT, cfg, log=lambda s: None)
    assert crep["positive_frames"] == int(lifted[keep].sum()) and crep["frames"] == int(keep.sum())
    assert crep["held_out"]["frames"] == crep["held_out_frames"] > 0
    source = make_reward_source(str(tmp_path / "cal" / "clf"))
    assert source is not None
    saved = PC.save_frames(frames, tmp_path / "cal" / "frames.npz")
    with np.load(saved) as z:              # no pickles: plain arrays
        assert z["episode_images"].shape == frames["episode"]["images"].shape
        assert np.array_equal(z["look_labels"], frames["look"]["labels"])


def test_success_labels_leave_out_the_unsure_band():
    import robolearn.runtime.perception_calibration as PC

    lab, keep = PC.success_labels(np.array([0.0, 0.03, 0.045, 0.05, 0.055, 0.07]), 0.05, 0.01)
    assert lab.tolist() == [False, False, False, True, True, True]
    assert keep.tolist() == [True, True, False, False, False, True]


def test_calibrate_reward_needs_lift_and_the_camera_calibration(tmp_path):
    from robolearn.runtime.config import load_launch

    path = "launch/finetune_arm_lift_real.toml"
    ft = load_launch(path).finetune
    assert ft.calibrate_arm and ft.calibrate_perception and ft.calibrate_reward
    base = open(path).read()
    off = "calibrate_perception = false"
    cases = ((base.replace("calibrate_perception = true", off), "calibrate_perception = true"),
             (base.replace("[reward]", '[reward]\nmodel = "models/clf"'), r"may only set device, require_grasp, threshold.*has model"),
             (base.replace("ArmLift", "ArmReach"), "needs env ArmLift or ArmPush"))
    for i, (text, msg) in enumerate(cases):
        f = tmp_path / f"l{i}.toml"
        f.write_text(text)
        with pytest.raises(ConfigError, match=msg):
            load_launch(f)
    # the classifier's options may sit beside calibrate_reward (the grasp check, a threshold)
    f = tmp_path / "grasp.toml"
    f.write_text(base.replace("require_grasp = true", "require_grasp = true\nthreshold = 0.7"))
    assert load_launch(f).reward == {"require_grasp": True, "threshold": 0.7}


def test_children_read_the_calibrated_session_as_a_valid_launch_file(tmp_path):
    """After calibrate_reward has put its model into [reward], the file the learner and actor
    are started with must load (it did not: the children refused the [reward] that
    calibrate_reward had made, and the shipped lift session stopped after its zero-shot)."""
    from robolearn.commands.finetune import children_config
    from robolearn.configs import dump_toml
    from robolearn.runtime.config import load_launch

    cfg = load_launch("launch/finetune_arm_lift_real.toml")
    cfg.reward = {"model": str(tmp_path / "perception_calibration" / "success_classifier")}
    f = tmp_path / "finetune_launch.toml"
    f.write_text(dump_toml(children_config(cfg)))
    child = load_launch(f)
    assert child.reward["model"].endswith("success_classifier")
    assert not (child.finetune.calibrate_arm or child.finetune.calibrate_perception
                or child.finetune.calibrate_reward)


def _untrained_localiser(out):
    import torch
    from robolearn.policies.perception import Localiser, LocaliserNet

    meta = {"env": LIFT, "camera": "front", "image_shape": [84, 84, 3], "targets": ["x", "y", "z"],
            "target_mean": [0.22, 0.0, 0.05], "target_std": [0.05, 0.05, 0.03]}
    torch.manual_seed(0)
    Localiser(LocaliserNet((84, 84, 3), 3).eval().requires_grad_(False), meta).save(out)
    return Localiser.load(out)


def test_localiser_adaptation_learns_the_robots_labels_and_is_saved(tmp_path):
    """adapt_localiser moves a localiser to the labels of the robot's frames (its error on them
    drops), and calibrate_localisers saves it loadable, with the report in its meta."""
    import robolearn.runtime.perception_calibration as PC
    from robolearn.policies.perception import Localiser

    loc = _untrained_localiser(tmp_path / "loc")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (48, 84, 84, 3), dtype=np.uint8)
    labels = np.tile(np.array([0.30, 0.08, 0.12], np.float32), (48, 1))
    before = PC.mean_error_m(loc, images, labels)
    tuned = PC.adapt_localiser(loc, images, labels, images[:0], labels[:0], epochs=40, lr=1e-3)
    after = PC.mean_error_m(tuned, images, labels)
    assert after < 0.3 * before, (before, after)
    assert PC.mean_error_m(loc, images, labels) == before          # the original is untouched

    frames = {"episode": {"images": images, "labels": labels, "cycle": np.arange(48) // 8,
                          "kind": np.zeros(48, int)},
              "look": None}
    cfg = PC.PerceptionCalibrationConfig(sim_frames=20, sim_heldout=10, epochs=1)
    with pytest.raises(ConfigError, match="no look-pose frames"):
        PC.calibrate_localisers(frames, tmp_path / "loc", tmp_path / "cal", LIFT, cfg, log=lambda s: None)
    env = gym.make(LIFT, obs="both", camera="front")
    try:
        from robolearn.policies.cube_finder import render_look_frames

        lx, lxy = render_look_frames(env, 12, np.random.default_rng(1))
    finally:
        env.close()
    frames["look"] = {"images": lx, "labels": lxy, "cycle": np.arange(12) // 2, "kind": np.full(12, 2)}
    rep = PC.calibrate_localisers(frames, tmp_path / "loc", tmp_path / "cal", LIFT, cfg, log=lambda s: None)
    p = rep["perception"]
    assert p["robot_frames"] == 40 and p["heldout_robot_frames"] == 8 and p["sim_frames"] == 20
    saved = Localiser.load(tmp_path / "cal" / "perception")
    assert saved.meta["calibrated"]["heldout_robot_error_after_m"] == p["heldout_robot_error_after_m"]
    with pytest.raises(ConfigError, match="trained on"):
        small = {**frames, "episode": {**frames["episode"], "images": images[:, :64, :64]}}
        PC.calibrate_localisers(small, tmp_path / "loc", tmp_path / "cal2", LIFT, cfg, log=lambda s: None)
