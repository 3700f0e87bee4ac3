"""Physical resets: no teleports, scripted cube/car resets, supervisor failures, prompt, stats."""
import math
import os
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

import robolearn  # noqa: F401
from robolearn.errors import ConfigError
from robolearn.resets.modes import resolve_reset_mode
from robolearn.errors import ResetAbortedError, ResetError
from robolearn.sim.arm_workspace import CUBE_HALF, CUBE_REGION_HIGH, CUBE_REGION_LOW


def test_unknown_reset_mode_is_a_clear_error():
    with pytest.raises(ConfigError, match="reset_mode='bounce'.*teleport.*physical"):
        gym.make("robolearn/ArmPush-v0", reset_mode="bounce")
    with pytest.raises(ConfigError, match="reset_on_failure"):
        gym.make("robolearn/ArmPush-v0", reset_mode="physical", reset_on_failure="shrug")


def test_teleport_on_real_backend_is_refused_and_physical_is_its_default():
    with pytest.raises(ConfigError, match="cannot be teleported"):
        resolve_reset_mode("teleport", "real")
    assert resolve_reset_mode(None, "real") == "physical"
    assert resolve_reset_mode(None, "sim") == "teleport"


def test_teleport_mode_reports_one_teleport_per_reset():
    env = gym.make("robolearn/ArmPush-v0")
    _, info = env.reset(seed=0)
    assert info["reset"]["kind"] == "teleport" and info["reset"]["teleports"] == 1
    env.close()


def _push_episode(env, ctrl, obs):
    ctrl.reset()
    for _ in range(120):
        obs, _, term, trunc, info = env.step(ctrl.act(obs))
        if term or trunc:
            return info


def test_physical_push_resets_move_the_cube_back_without_teleporting():
    env = gym.make("robolearn/ArmPush-v0", reset_mode="physical", reset_on_failure="raise")
    base = env.unwrapped
    ctrl = base.scripted_controller()
    obs, info = env.reset(seed=3)
    starts = []
    for _ in range(4):
        rep = info["reset"]
        assert rep["kind"] == "scripted" and rep["ok"] and rep["teleports"] == 0 and rep["seconds"] > 0
        cube = base.task.cube_pose()[0]
        assert np.all(cube[:2] >= CUBE_REGION_LOW - 0.01) and np.all(cube[:2] <= CUBE_REGION_HIGH + 0.01)
        assert abs(cube[2] - CUBE_HALF) < 0.004
        # arm at home, and the episode's commanded pose follows the measured one
        assert np.max(np.abs(base.backend.robot.read().q - base.task.home_q)) < 0.05
        starts.append(cube[:2].copy())
        _push_episode(env, ctrl, obs)
        obs, info = env.reset()
    assert base.teleport_count() == 0
    # uniform points of the region from the episode rng, not one fixed spot
    assert np.ptp(np.array(starts), axis=0).max() > 0.02


def test_physical_episode_starts_where_the_world_was_left():
    env = gym.make("robolearn/ArmReach-v0", reset_mode="physical", reset_on_failure="raise")
    base = env.unwrapped
    env.reset(seed=0)
    for _ in range(5):
        env.step(np.array([1.0, 1.0, 0.0, 1.0], np.float32))
    moved = base.backend.robot.read().q.copy()
    obs, info = env.reset(options={"reset_controller": None})
    assert info["reset"]["kind"] == "none" and info["reset"]["teleports"] == 0
    np.testing.assert_allclose(base.backend.robot.read().q, moved, atol=1e-9)
    assert base.teleport_count() == 0


class _Raises:
    kind = "scripted"

    def run(self, task, rng):
        yield 0.1
        raise RuntimeError("gripper encoder not found")


class _Hangs:
    kind = "scripted"

    def run(self, task, rng):
        while True:   # never finishes; the robot sits still
            task.arm.advance(0.1)
            yield 0.1


def test_a_raising_reset_controller_ends_safely_with_a_clear_message():
    env = gym.make("robolearn/ArmPush-v0", reset_mode="physical", reset_on_failure="raise")
    base = env.unwrapped
    env.reset(seed=0)
    env.step(np.array([0.0, 0.0, 0.0, 1.0], np.float32))
    with pytest.raises(ResetError, match="_Raises raised RuntimeError: gripper encoder not found.*held still"):
        env.reset(options={"reset_controller": _Raises()})
    # held: the set-points equal the measured state, so nothing moves on
    q0 = base.backend.robot.read().q.copy()
    base.backend.robot.advance(0.5)
    assert np.max(np.abs(base.backend.robot.read().q - q0)) < 0.01
    with pytest.raises(gym.error.ResetNeeded):
        env.step(np.zeros(4, np.float32))
    # the env is still usable: the scripted reset works afterwards
    _, info = env.reset()
    assert info["reset"]["ok"]
    env.close()


def test_a_hanging_reset_controller_times_out_and_is_counted():
    env = gym.make("robolearn/ArmReach-v0", reset_mode="physical", reset_on_failure="continue",
                   reset_timeout=2.0)
    env.reset(seed=0)
    t0 = time.perf_counter()
    _, info = env.reset(options={"reset_controller": _Hangs()})
    rep = info["reset"]
    assert not rep["ok"] and rep["failures"] == 2          # tried twice, then gave up
    assert "did not finish within 2 s of robot time" in rep["message"]
    assert rep["seconds"] == pytest.approx(4.2, abs=0.3)
    assert time.perf_counter() - t0 < 30
    env.close()


def test_a_reset_controller_stuck_in_wall_time_is_stopped_and_the_robot_held():
    """A controller that yields without moving the robot (waiting on something that never
    comes) is caught by the wall-clock limit, not only the robot-time one."""
    from robolearn.resets.supervisor import ResetSupervisor

    class Waits:
        kind = "scripted"

        def run(self, task, rng):
            while True:
                time.sleep(0.05)
                yield 0.0

    env = gym.make("robolearn/ArmReach-v0", reset_mode="physical", reset_on_failure="raise")
    base = env.unwrapped
    env.reset(seed=0)
    sup = ResetSupervisor(base.backend.robot, on_failure="raise", timeout_s=30.0, wall_timeout_s=1.0)
    t0 = time.perf_counter()
    with pytest.raises(ResetError, match=r"Waits failed: did not finish within 1 s of wall time \(hung\?\).*held still"):
        sup.run(Waits(), base.task, np.random.default_rng(0))
    assert time.perf_counter() - t0 < 10
    env.close()


def _answer_later(master, text, delay=0.3):
    import threading

    def go():
        time.sleep(delay)
        os.write(master, text)

    threading.Thread(target=go, daemon=True).start()


def _read_all(fd):
    import select

    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        out += os.read(fd, 4096)
    return out.decode()


def test_human_prompt_through_a_pty(term):
    from robolearn.resets.prompt import HumanPrompt

    master, slave = term
    prompt = HumanPrompt(fd_in=slave, fd_out=slave)
    env = gym.make("robolearn/ArmReach-v0", reset_mode="physical", reset_prompt=prompt,
                   reset_on_failure="prompt")
    env.reset(seed=0)
    _answer_later(master, b"\n")                 # operator: the scene is fixed, go
    _, info = env.reset(options={"reset_controller": _Raises()})
    rep = info["reset"]
    assert rep["kind"] == "human" and rep["human_prompts"] == 1 and rep["failures"] == 1
    shown = _read_all(master)
    assert "gripper encoder not found" in shown and "Enter" in shown and "operator: continue" in shown
    _answer_later(master, b"r")                  # retry: the task's own controller then succeeds
    _, info = env.reset(options={"reset_controller": _FailsOnce()})
    assert info["reset"]["kind"] == "scripted" and info["reset"]["human_prompts"] == 1
    _read_all(master)
    _answer_later(master, b"q")
    with pytest.raises(ResetAbortedError, match="operator quit"):
        env.reset(options={"reset_controller": _Raises()})
    env.close()


def test_a_failing_reset_keeps_the_recorded_episodes(tmp_path):
    """Recording session: the episode before the failed reset is on disk, complete."""
    from robolearn.data.dataset import Dataset
    from robolearn.data.recording import RecordingWrapper

    env = RecordingWrapper(gym.make("robolearn/ArmReach-v0", reset_mode="physical", reset_on_failure="raise"),
                           tmp_path / "ds", env_id="robolearn/ArmReach-v0")
    env.reset(seed=0)
    for _ in range(7):
        env.step(np.array([0.5, 0.0, 0.0, 1.0], np.float32))
    with pytest.raises(ResetError, match="gripper encoder not found.*held still"):
        env.reset(options={"reset_controller": _Raises()})
    env.close()
    ds = Dataset(tmp_path / "ds")
    assert len(ds) == 1 and ds.episode(0).steps == 7


class _FailsOnce:
    kind = "scripted"

    def __init__(self):
        self.calls = 0

    def run(self, task, rng):
        self.calls += 1
        if self.calls == 1:
            raise KeyError("first try fails with a non-reset error")
        yield 0.1


def test_prompt_answers_from_the_teleop_device(term):
    from robolearn.resets.prompt import CONTINUE, HumanPrompt
    from robolearn.teleop.base import DeviceCommand

    class Pad:
        name = "gamepad"

        def read(self, obs=None):
            return DeviceCommand(np.zeros(4, np.float32), events={"success"})

    master, slave = term
    assert HumanPrompt(fd_in=slave, fd_out=slave, device=Pad()).ask("cube fell") == CONTINUE
    assert "teleop: gamepad" in _read_all(master)


def test_car_physical_reset_recovers_from_a_crash_without_teleport():
    env = gym.make("robolearn/CarLap-v0", reset_mode="physical", reset_on_failure="raise",
                   end_on_collision=True)
    base = env.unwrapped
    env.reset(seed=0)
    for _ in range(200):                       # full throttle, hard left: into the wall
        _, _, term, trunc, info = env.step(np.array([1.0, 1.0], np.float32))
        if term:
            break
    assert term and info["collisions"] == 1
    _, info = env.reset()
    assert info["reset"]["ok"] and info["reset"]["teleports"] == 0
    x, y, yaw = base.sim.pose()
    s, lat, _, heading = base.task.track.project(x, y)
    assert abs(lat) < base.task.track.half_width - 0.2 and not base.sim.wall_contact
    assert abs(base.task.track.heading_error(yaw, heading)) < 0.8
    assert -base.task.track.length < info["progress"] <= 0   # lap timing starts at the next crossing
    assert base.teleport_count() == 0


@pytest.mark.parametrize("s0,turn", [(1.0, math.pi), (5.0, math.pi), (3.0, math.pi / 2), (8.0, -2.0)])
def test_car_recovery_turns_a_car_that_faces_the_wrong_way(s0, turn):
    """A car stopped in the lane facing backwards or across it (a spin in practice) is turned
    around by the recovery itself (K-turn), no teleport: it used to fail at once, 12 times in a
    row (no back-off with its nose away from the walls, no creep at such an angle), so every
    episode after a spin asked a human (57 prompts in one session on the emulated car)."""
    env = gym.make("robolearn/CarLap-v0", reset_mode="physical", reset_on_failure="raise")
    base = env.unwrapped
    env.reset(seed=0)
    track = base.task.track
    x, y, yaw = track.point_at(s0)
    base.sim.reset_pose(x, y, yaw + turn)      # where the spin left it (set up by the test)
    before = base.teleport_count()
    _, info = env.reset()
    assert info["reset"]["ok"], info["reset"]["message"]
    x, y, yaw = base.sim.pose()
    _, lat, _, heading = track.project(x, y)
    assert abs(lat) < track.half_width - 0.2 and abs(track.heading_error(yaw, heading)) < 0.8
    assert base.teleport_count() == before
    env.close()


def test_autonomous_practice_recovers_every_crash_and_stall():
    from robolearn.resets.practice import AutonomousPractice

    env = AutonomousPractice(gym.make("robolearn/CarLap-v0", reset_mode="physical", reset_on_failure="raise"),
                             no_progress_s=2.0)
    base = env.unwrapped
    driver = base.scripted_controller()
    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=1)
    triggers, noise = [], np.zeros(2)
    for n in range(1500):
        if n % 20 == 0:
            noise = np.array([rng.normal(0, 0.5), rng.normal(0.1, 0.3)])
        a = np.clip(driver.act(obs) + noise, -1, 1).astype(np.float32)
        if 600 <= n < 700:
            a = np.array([0.0, 0.0], np.float32)          # stall: no progress
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            triggers.append(info["practice_trigger"])
            # a crash ends the learner's attempt (terminated: nothing to bootstrap), a stall is cut
            assert (term, trunc) == ((True, False) if info["practice_trigger"] == "collision" else (False, True))
            obs, info = env.reset()
            driver.reset()
            assert info["reset"]["ok"], info["reset"]["message"]
    assert "collision" in triggers and "no_progress" in triggers
    assert base.teleport_count() == 0
    with pytest.raises(ConfigError, match="reset_mode='physical'"):
        AutonomousPractice(gym.make("robolearn/CarLap-v0"))
    with pytest.raises(ConfigError, match="progress.*collisions.*ArmPush"):
        AutonomousPractice(gym.make("robolearn/ArmPush-v0", reset_mode="physical"))


def test_checkpoints_from_a_slow_lap_follow_the_track():
    from robolearn.resets.car import next_checkpoint
    from robolearn.resets.checkpoints import checkpoints_from_path, dead_reckon

    env = gym.make("robolearn/CarLap-v0")
    base = env.unwrapped
    from robolearn.tasks.car_scripted import PurePursuit, PurePursuitConfig

    drv = PurePursuit(env, PurePursuitConfig(v_straight=1.5, a_lat=2.0))
    obs, _ = env.reset(seed=0)
    x0, y0, yaw0 = base.sim.pose()
    states, true_xy = [obs["state"]], [(x0, y0)]
    for _ in range(400):
        obs, _, _, _, info = env.step(drv.act(obs))
        states.append(obs["state"])
        true_xy.append(base.sim.pose()[:2])
        if info["laps"] >= 1:
            break
    poses = dead_reckon(np.array(states), 20.0, x0, y0, yaw0)
    cps = checkpoints_from_path(poses[:, :2], spacing=1.0)
    track = base.task.track
    lat = [abs(track.project(px, py)[1]) for px, py in cps]
    assert len(cps) >= 12 and max(lat) < track.half_width     # inside the walls all the way
    tx, ty = next_checkpoint(cps, *cps[3], 0.0)
    assert (tx, ty) == tuple(cps[4])


def test_reset_stats_total_up():
    from robolearn.reset_report import ResetReport, ResetStats

    st = ResetStats()
    st.add(ResetReport(kind="scripted", seconds=2.0))
    st.add(ResetReport(kind="human", ok=False, seconds=1.0, failures=2, human_prompts=1).as_dict())
    d = st.as_dict()
    assert d["episodes"] == 2 and d["ok"] == 1 and d["failures"] == 2 and d["human_prompts"] == 1
    assert d["kinds"] == {"scripted": 1, "human": 1} and d["success_rate"] == 0.5 and d["seconds"] == 3.0


@pytest.mark.slow
def test_push_200_physical_episodes_zero_teleports_95pct_resets():
    from robolearn.bench.resets import arm_episodes

    r = arm_episodes("physical", 200, "scripted", seed=0)
    assert r["teleports_total"] == 0 and r["resets"]["teleports"] == 0
    assert r["resets"]["success_rate"] >= 0.95, r["resets"]


def test_bench_car_slow_lap_and_lap_timing(tmp_path):
    """The car-learned bench's pieces: one slow demonstration lap (a loadable --demos .npz whose
    lap is slower than pure pursuit's) and lap timing of a driver on fixed episodes."""
    from robolearn.bench.resets import _pure_pursuit, eval_laps, slow_demo_lap
    from robolearn.policies.demos import load_npz_transitions

    demo = slow_demo_lap(str(tmp_path / "lap.npz"), seed=0)
    t = load_npz_transitions(tmp_path / "lap.npz")
    assert len(t["action"]) == demo["transitions"] and t["truncated"][-1] and not t["truncated"][:-1].any()
    assert set(t["obs"]) == {"state", "privileged"}
    assert 10.0 < demo["lap_time_s"] < 16.0 and t["reward"].sum() > 17.0     # a 17.28 m lap, and a bit
    pp = eval_laps(_pure_pursuit, 1, seed=0)
    assert pp["laps"] >= 6 and pp["collisions"] == 0 and 7.0 < pp["best_lap_s"] < 9.0
    assert pp["best_lap_s"] < demo["lap_time_s"]
    stopped = eval_laps(lambda env: (lambda obs: np.zeros(2, np.float32), None), 1, seed=0)
    assert stopped["laps"] == 0 and stopped["best_lap_s"] is None


def test_bench_learned_runs_trainings_in_parallel_workers_with_the_same_rows(tmp_path):
    """`bench resets --only learned --jobs 2` trains in worker processes; rows come back per arm
    in seed order, each from its own run folder."""
    from robolearn.bench.resets import learned_vs_teleport
    from robolearn.errors import ConfigError

    with pytest.raises(ConfigError, match="--jobs"):
        learned_vs_teleport(250, [0], str(tmp_path), jobs=0)
    r = learned_vs_teleport(250, [1, 0], str(tmp_path), eval_episodes=1, arms=("env",), jobs=2)
    assert [row["seed"] for row in r["runs"]["env"]] == [1, 0]
    for seed in (0, 1):
        assert (tmp_path / f"env-s{seed}" / "summary.json").exists()
    assert all(row["evals"] and row["evals"][-1]["step"] == 250 for row in r["runs"]["env"])
    assert r["ratio_vs_teleport"] == {}
    from robolearn.bench.resets import plot_learned

    plot_learned(r, str(tmp_path / "curve.png"))
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_sim_operator_hand_answers_a_failed_reset_without_a_teleport():
    """reset_prompt="operator:sim": a cube pushed out of the reset's reach is put back by the
    emulated operator's hand (a human prompt in the statistics, not a teleport), then the
    retried reset homes the arm."""
    from robolearn.teleop.operator import sim_hand

    env = gym.make("robolearn/ArmPush-v0", reset_mode="physical", reset_on_failure="prompt",
                   reset_prompt="operator:sim")
    try:
        base = env.unwrapped
        env.reset(seed=0)
        sim_hand(base.backend.privileged)(xy=(0.37, 0.15))     # where forward episodes strand it
        assert not base.task.start_state_true()
        _, info = env.reset()
        r = info["reset"]
        # ok counts resets without human help; the retried controller then homed the arm
        assert not r["ok"] and r["human_prompts"] == 1 and r["teleports"] == 0 and r["kind"] == "scripted", r
        assert "out of the arm's reach" in r["message"]
        assert env.unwrapped.resets.prompt.placed == 1
        assert base.teleport_count() == 0
        assert base.task.start_state_true()
    finally:
        env.close()
    with pytest.raises(ConfigError, match="operator:sim"):
        gym.make("robolearn/CarLap-v0", reset_mode="physical", reset_prompt="operator:sim")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_bench_workers_die_with_a_killed_bench(tmp_path):
    """`--jobs` workers must not go on training as orphans when the bench is killed."""
    import signal
    import subprocess
    import textwrap

    script = tmp_path / "pool.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp, os, sys, time
        from concurrent.futures import ProcessPoolExecutor
        from robolearn.bench.resets import _worker_init

        if __name__ == "__main__":
            with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"), initializer=_worker_init) as pool:
                print(pool.submit(os.getpid).result(), flush=True)
                pool.submit(time.sleep, 60).result()
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        os.kill(worker, 0)                                   # alive
        parent.send_signal(signal.SIGKILL)                   # no cleanup runs in the parent
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(worker, signal.SIGKILL)
            pytest.fail("the worker outlived the killed bench")
    finally:
        parent.kill()


@pytest.mark.parametrize("lift", [0.0, 0.06])
def test_arm_home_with_lift_raises_the_grasp_point_before_moving_sideways(lift):
    """`ArmHome(lift=...)` (the learned resets' homing) first goes straight up, so it does not
    sweep a cube lying next to the fingers; plain `ArmHome` moves sideways at once."""
    from robolearn.resets.scripted import ArmHome

    env = gym.make("robolearn/ArmPush-v0", reset_mode="physical", reset_on_failure="raise")
    base = env.unwrapped
    env.reset(seed=0)
    for _ in range(12):                      # forward and down, away from home, near the table
        env.step(np.array([1.0, 0.5, -1.0, 1.0], np.float32))
    task = base.task
    ee0 = task.kin.fk(task.arm.read().q)
    assert ee0[2] < 0.04
    path = []
    for _ in ArmHome(lift=lift).run(task, np.random.default_rng(0)):
        path.append(task.kin.fk(task.arm.read().q))
    path = np.array(path)
    first_high = int(np.argmax(path[:, 2] >= 0.05))
    sideways = np.linalg.norm(path[: first_high + 1, :2] - ee0[:2], axis=1).max()
    if lift:
        assert path[:, 2].max() >= 0.05 and sideways < 0.01
    else:
        assert sideways > 0.02, sideways
    assert np.max(np.abs(task.arm.read().q - task.home_q)) < 0.05       # home either way
    assert base.teleport_count() == 0
    env.close()


@pytest.mark.parametrize("task", ["ArmReach", "ArmPush"])
def test_a_physical_reset_leaves_the_arm_at_rest(task):
    """Episodes after a physical reset start with the arm still, as after a teleport: the reset
    ends by holding home until every joint is slower than `RESET_SETTLE` (without it the joints
    were still swinging at ~1 rad/s, and a policy went from 0.20 to 0.0 success on such starts)."""
    from robolearn.resets.scripted import RESET_SETTLE

    env = gym.make(f"robolearn/{task}-v0", reset_mode="physical", reset_on_failure="raise")
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=1)
    for _ in range(3):
        assert info["reset"]["ok"]
        assert np.max(np.abs(env.unwrapped.backend.robot.read().dq)) <= RESET_SETTLE
        assert np.max(np.abs(obs["state"][5:10])) <= RESET_SETTLE
        for _ in range(15):                                   # fling the arm about
            obs, *_ = env.step(rng.uniform(-1, 1, 4).astype(np.float32))
        obs, info = env.reset()
    env.close()


@pytest.mark.parametrize("yaw_off_deg", [22.0, -22.0, 40.0])
def test_cube_reset_grasps_a_turned_cube_square_and_sets_it_down_facing_the_arm(yaw_off_deg):
    """A cube turned off the radial direction is grasped with the fingers square to its faces
    (a wrong-signed roll met a cube 22 deg off across its diagonal, where it stuck between the
    open fingers) and set down a face toward the arm, as teleport starts put it."""
    from robolearn.resets.cube import yaw_off_radial
    from robolearn.sim.arm_workspace import START_YAW_SPREAD

    env = gym.make("robolearn/ArmPush-v0", reset_mode="physical", reset_on_failure="raise")
    env.reset(seed=0)
    task = env.unwrapped.task
    xy = np.array([0.26, 0.08])
    yaw = math.atan2(xy[1], xy[0]) + math.radians(yaw_off_deg)
    task.sim.set_state(task.home_q, task.home_gripper, cube_pos=np.array([*xy, CUBE_HALF]),
                       cube_quat=np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]))
    task._fresh = False
    assert math.degrees(yaw_off_radial(*task.cube_pose())) == pytest.approx(yaw_off_deg, abs=0.1)
    _, info = env.reset()
    rep = info["reset"]
    assert rep["ok"] and rep["failures"] == 0, rep["message"]
    pos, quat = task.cube_pose()
    assert abs(pos[2] - CUBE_HALF) < 0.004
    assert abs(yaw_off_radial(pos, quat)) < START_YAW_SPREAD + math.radians(5)
    env.close()


def test_cube_reset_climbs_straight_up_from_a_low_hand_beside_the_cube():
    """An episode can end with the hand low beside the cube; the reset climbs straight up
    before it moves over the cube and turns the wrist (a diagonal climb swept the cube out
    of the arm's reach, and every later reset failed)."""
    env = gym.make("robolearn/ArmPush-v0", reset_mode="physical", reset_on_failure="raise")
    env.reset(seed=0)
    task = env.unwrapped.task
    cube = np.array([0.162, 0.137, CUBE_HALF])
    yaw = math.atan2(cube[1], cube[0]) + math.radians(40)
    q, _ = task.kin.ik(np.array([0.20, 0.11, 0.027]), task.home_q)
    task.sim.set_state(q, task.spec.gripper_open, cube_pos=cube,
                       cube_quat=np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]))
    task._fresh = False
    _, info = env.reset()
    assert info["reset"]["ok"] and info["reset"]["failures"] == 0, info["reset"]["message"]
    env.close()
