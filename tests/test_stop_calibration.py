"""Stop-based arm calibration (drivers/stop_calibration.py, `robolearn calibrate-arm`).

Against the emulated arm over a real pseudo-terminal: the hard reality's per-joint encoder
offsets (0.04-0.08 rad) live only in the emulator's plant; the procedure sees bytes. The
tolerance on a recovered offset is 0.004 rad (a tenth of the smallest hidden offset): what is
left is the 1-tick resolution of the calibration file (0.0015 rad), averaged read noise
(0.003 rad per read), and the stop's contact stiffness.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from robolearn.drivers.calibration import RAD_PER_TICK, Calibration
from robolearn.drivers.emulation import start_emulator
from robolearn.drivers.emulator_arm import ArmSimPlant
from robolearn.drivers.real import bus_protocol, default_arm_spec, make_arm_backend
from robolearn.drivers.reality import RealArmPlant, load_reality
from robolearn.drivers.servo_bus import ServoBus
from robolearn.drivers.stop_calibration import (StopMove, StopNotFoundError, UnexpectedStallError,
                                                arm_stop_plan, calibrate_against_stops,
                                                check_plan_clearance, joint_names)
from robolearn.errors import ConfigError, DeviceError
from robolearn.sim.kinematics import ArmKinematics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL_RAD = 0.004


def test_plan_is_collision_free_and_a_bad_posture_is_caught():
    spec = default_arm_spec()
    kin = ArmKinematics()
    plan = arm_stop_plan(spec)
    assert [m.joint for m in plan] == joint_names(spec)
    check_plan_clearance(plan, kin)          # every approach clear of the table and the base
    # the shoulder driven forward into its upper stop with the forearm level: the gripper
    # would hit the table, and the check says so
    bad = StopMove(joint="shoulder_lift", side=+1, angle=float(spec.upper[1]),
                   posture=(0.0, 1.25, 0.0, 0.0, 0.0, 0.8))
    with pytest.raises(ConfigError, match="shoulder_lift.*table"):
        check_plan_clearance([bad], kin)
    with pytest.raises(ConfigError, match="unknown joint"):
        arm_stop_plan(spec, stops={"elbow": 1.0})


def test_emulated_joint_presses_on_its_stop_at_the_true_limit():
    """Goals past a joint's range press it against a stop at the MJCF limit in TRUE
    coordinates: the encoder then reads limit + the reality's offset."""
    hard = load_reality("hard")
    plant = RealArmPlant(ArmSimPlant(control_hz=200.0), hard)
    try:
        lower, upper = plant.lower, plant.upper
        goal = np.append(np.zeros(5), 0.8) + plant.offsets
        goal[0] = upper[0] + 0.3 + plant.offsets[0]          # 0.3 rad past the pan's stop
        for _ in range(800):                                 # 4 s of plant time
            q, _, _ = plant.step(goal, np.ones(6, bool), 0.005)
        true = plant.true_positions()
        assert abs(true[0] - upper[0]) < 1e-3                # on the stop, not through it
        reads = [plant.step(goal, np.ones(6, bool), 0.005)[0][0] for _ in range(200)]
        assert abs(np.mean(reads) - (upper[0] + hard.arm.joint_offsets_rad[0])) < 1e-3
        assert abs(true[1]) < 0.05 and lower[0] < true[0]   # nothing else moved
    finally:
        plant.close()


def reach_errors(robot, calibration, kin, goals):
    """(true reach error, believed-vs-true gripper position) in metres for commanded poses."""
    be = make_arm_backend(robot.port, calibration=calibration, timeout=0.1)
    errs, belief = [], []
    try:
        q = np.array([0.0, 0.0, 0.4, -0.4, 0.0])
        for g in goals:
            q, _ = kin.ik(g, q)
            be.robot.command(q, 0.8)
            time.sleep(1.5)
            q_true = robot.emulator.plant.true_positions()[:5]
            q_meas = be.robot.read().q
            errs.append(np.linalg.norm(kin.fk(q_true) - g))
            belief.append(np.linalg.norm(kin.fk(q_true) - kin.fk(q_meas)))
    finally:
        be.robot.close()
    return float(np.mean(errs)), float(np.mean(belief))


def test_recovers_the_hard_realitys_offsets_and_cuts_the_reach_error(tmp_path):
    hard = load_reality("hard")
    kin = ArmKinematics()
    with start_emulator("arm", reality="hard", cameras=False) as robot:
        with ServoBus(robot.port, timeout=0.1) as bus:
            res = calibrate_against_stops(bus)
            spec = default_arm_spec()
            cal = res.calibration
            # angle limits: the calibrated tick range, written back to every servo
            for c in cal.servos.values():
                assert (bus.read_register(c.id, bus.proto.MIN_LIMIT), bus.read_register(c.id, bus.proto.MAX_LIMIT)) \
                    == (c.min, c.max)
        default = Calibration.default(joint_names(spec), list(spec.lower) + [0.0],
                                      list(spec.upper) + [spec.gripper_open])
        recovered = [(cal[n].offset - default[n].offset) * RAD_PER_TICK for n in joint_names(spec)]
        hidden = hard.arm.joint_offsets_rad
        np.testing.assert_allclose(recovered, hidden, atol=TOL_RAD)
        assert [r.joint for r in res.readings] == joint_names(spec)
        path = cal.save(tmp_path / "arm_calibration.json")
        Calibration.load(path, required=joint_names(spec))          # the drivers' format
        goals = [np.array([0.18, -0.08, 0.08]), np.array([0.26, 0.06, 0.14]), np.array([0.22, 0.12, 0.05])]
        err_raw, belief_raw = reach_errors(robot, None, kin, goals)
        err_cal, belief_cal = reach_errors(robot, str(path), kin, goals)
    # what the robot believes vs where the gripper is: the calibration's own error
    assert belief_cal < 0.005 and belief_cal < belief_raw / 5, (belief_cal, belief_raw)
    # where a commanded pose truly lands (the soft servos' sag stays: calibration cannot fix it)
    assert err_cal < err_raw / 2, (err_cal, err_raw)


def test_cli_on_the_dynamixel_arm_calibrates_the_chosen_joints(tmp_path):
    out = tmp_path / "cal.json"
    with start_emulator("arm", reality="hard", cameras=False, protocol="dynamixel") as robot:
        cmd = [sys.executable, "-m", "robolearn.cli", "calibrate-arm", "--port", robot.port, "--out", str(out),
               "--protocol", "dynamixel", "--timeout", "0.1", "--joints", "wrist_flex,gripper"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert p.returncode == 0, p.stderr
        summary = json.loads(p.stdout)
        assert set(summary["joints"]) == {"wrist_flex", "gripper"}
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert again.returncode == 2 and "--overwrite" in again.stderr      # never replaced unasked
    cal = Calibration.load(out)
    assert abs((cal["wrist_flex"].offset - 2048) * RAD_PER_TICK - (-0.05)) < TOL_RAD
    assert abs((cal["gripper"].offset - 2048) * RAD_PER_TICK) < TOL_RAD
    assert cal["shoulder_pan"].offset == 2048                 # not asked for: left as it was


def _widen_stop(robot, joint: str, lo: float, hi: float) -> None:
    """Move one joint's mechanical stop in the emulated arm (an arm built differently)."""
    plant = robot.emulator.plant.inner
    m, i = plant.sim.model, plant.names.index(joint)
    with robot.emulator.physics_lock:
        m.jnt_range[m.joint(joint).id] = (lo, hi)


def _limits(bus, ids):
    return {sid: (bus.read_register(sid, bus.proto.MIN_LIMIT), bus.read_register(sid, bus.proto.MAX_LIMIT))
            for sid in ids}


def test_a_joint_that_never_stalls_is_an_error_and_the_arm_is_left_as_it_was():
    with start_emulator("arm", reality="hard", cameras=False) as robot:
        _widen_stop(robot, "wrist_roll", -3.3, 3.3)           # like a continuous wrist roll
        with ServoBus(robot.port, timeout=0.1) as bus:
            before = _limits(bus, list(range(1, 7)))
            with pytest.raises(StopNotFoundError, match="wrist_roll.*without stalling"):
                calibrate_against_stops(bus, joints=["wrist_roll"])
            assert _limits(bus, list(range(1, 7))) == before   # the servos' limits restored
            q0 = robot.emulator.plant.true_positions()
            time.sleep(0.5)
            assert np.abs(robot.emulator.plant.true_positions() - q0).max() < 0.02   # holding still


def test_a_stall_far_from_the_stop_is_an_error():
    with start_emulator("arm", reality="hard", cameras=False) as robot:
        _widen_stop(robot, "shoulder_pan", -1.92, 1.55)       # something blocks the pan at 1.55 rad
        with ServoBus(robot.port, timeout=0.1) as bus:
            with pytest.raises(UnexpectedStallError, match="shoulder_pan stalled at .* from its expected upper stop"):
                calibrate_against_stops(bus, joints=["shoulder_pan"])


def test_missing_port_and_silent_servo_are_clear_errors(tmp_path):
    p = subprocess.run([sys.executable, "-m", "robolearn.cli", "calibrate-arm", "--port", "/dev/ttyNOPE0",
                        "--out", str(tmp_path / "c.json")], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 2 and "cannot open servo bus port '/dev/ttyNOPE0'" in p.stderr
    assert not (tmp_path / "c.json").exists()
    with start_emulator("arm", cameras=False) as robot:
        robot.emulator.faults.silent_ids.add(4)
        with ServoBus(robot.port, timeout=0.05, retries=0) as bus:
            with pytest.raises(DeviceError, match=r"servo ID\(s\) \[4\] did not answer"):
                calibrate_against_stops(bus)


def test_protocol_modules_share_what_the_procedure_uses():
    for name in ("feetech", "dynamixel"):
        proto = bus_protocol(name)
        for attr in ("MIN_LIMIT", "MAX_LIMIT", "PRESENT_POSITION", "GOAL_POSITION", "TORQUE_ENABLE",
                     "MAX_TICK", "limit_writes"):
            assert hasattr(proto, attr), (name, attr)
