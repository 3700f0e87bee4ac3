"""Safety supervisor: limits refuse commands with a precise message; the e-stop latches and
reaches the (emulated) hardware; the watchdog trips on stale observations."""
import time

import numpy as np
import pytest

from robolearn.drivers.arm import ServoArm
from robolearn.drivers.calibration import Calibration
from robolearn.drivers.emulator_arm import ArmEmulator, make_plant
from robolearn.drivers.safety import ArmSafety, CarSafety
from robolearn.drivers.servo_bus import ServoBus
from robolearn.errors import SafetyError
from robolearn.robot import ArmSpec

NAMES = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
LOWER = np.array([-2.0, -1.6, -1.6, -1.7, -2.8])
UPPER = np.array([2.0, 1.6, 1.6, 1.7, 2.8])
VMAX = np.full(5, 5.5)


def make_safety(**kw):
    return ArmSafety(NAMES, LOWER, UPPER, VMAX, gripper_range=(0.0, 1.0), **kw)


def test_joint_limit_violation_names_joint_and_limit():
    s = make_safety()
    s.check_command(np.zeros(5), 0.5)
    q = np.zeros(5)
    q[2] = 1.7
    with pytest.raises(SafetyError, match=r"joint 'elbow_flex' command 1\.7000 rad outside its limits \[-1\.6000, 1\.6000\]"):
        s.check_command(q, 0.5)
    with pytest.raises(SafetyError, match="gripper command"):
        s.check_command(np.zeros(5), 1.5)
    with pytest.raises(SafetyError, match="non-finite"):
        s.check_command(np.full(5, np.nan), 0.5)
    with pytest.raises(SafetyError, match="shape"):
        s.check_command(np.zeros(4), 0.5)
    assert s.tripped is None               # refusing a command is not an e-stop


def test_workspace_box_uses_forward_kinematics():
    s = make_safety(workspace=((-1, -1, 0.0), (1, 1, 1)), fk=lambda q: np.array([0.2, 0.0, 0.3 - q[1]]))
    s.check_command(np.zeros(5), 0.5)
    q = np.zeros(5)
    q[1] = 0.5                              # fk z = -0.2: into the table
    with pytest.raises(SafetyError, match="outside the workspace box"):
        s.check_command(q, 0.5)


def test_velocity_limit_trips_latched_estop_and_runs_every_callback():
    calls = []
    s = make_safety(on_estop=[lambda: calls.append("a"), lambda: 1 / 0, lambda: calls.append("c")])
    now = time.monotonic()
    s.check_state(np.zeros(5), np.full(5, 1.0), now, now)
    dq = np.zeros(5)
    dq[3] = 9.0
    with pytest.raises(SafetyError, match=r"joint 'wrist_flex' moving at 9\.00 rad/s") as ei:
        s.check_state(np.zeros(5), dq, now, now)
    assert "e-stop engaged" in str(ei.value)
    assert calls == ["a", "c"]              # a failing callback does not stop the others
    with pytest.raises(SafetyError, match="e-stop is latched"):
        s.check_command(np.zeros(5), 0.5)
    s.reset()
    s.check_command(np.zeros(5), 0.5)


def test_measured_position_beyond_limits_trips():
    s = make_safety()
    q = np.zeros(5)
    q[0] = 2.2
    now = time.monotonic()
    with pytest.raises(SafetyError, match="joint 'shoulder_pan' measured"):
        s.check_state(q, np.zeros(5), now, now)


def test_watchdog_trips_on_stale_observation():
    stopped = []
    s = CarSafety(max_steer=0.45, stale_after=0.1, on_estop=[lambda: stopped.append(True)])
    now = time.monotonic()
    s.check_state(now - 0.05, now)
    with pytest.raises(SafetyError, match="car telemetry is 200 ms old"):
        s.check_state(now - 0.2, now)
    assert stopped == [True] and s.tripped


def test_car_throttle_cap():
    s = CarSafety(max_steer=0.45, max_throttle=0.5)
    s.check_command(0.45, 0.5)
    with pytest.raises(SafetyError, match="throttle 0.600 beyond"):
        s.check_command(0.0, 0.6)
    with pytest.raises(SafetyError, match="steer"):
        s.check_command(-0.5, 0.0)


# ------------------------------------------------------------------ against the emulator
SPEC = ArmSpec(joint_names=NAMES, lower=LOWER, upper=UPPER, max_velocity=VMAX,
               gripper_closed=0.0, gripper_open=1.0)


@pytest.fixture
def arm_and_emu():
    emu = ArmEmulator(plant=make_plant("first_order"), mounting="scrambled", seed=5).start()
    names = list(NAMES) + ["gripper"]
    cal = Calibration.from_dict(emu.calibration.to_dict(), required=names)
    arm = ServoArm(ServoBus(emu.path), SPEC, cal)
    yield arm, emu
    arm.close()
    emu.close()


def test_refused_command_never_reaches_the_servos(arm_and_emu):
    arm, emu = arm_and_emu
    goals_before = emu.goal.copy()
    q = np.zeros(5)
    q[4] = 3.5
    n = emu.packets_handled
    with pytest.raises(SafetyError, match="wrist_roll"):
        arm.command(q, 0.5)
    time.sleep(0.05)
    assert emu.packets_handled == n
    np.testing.assert_array_equal(emu.goal, goals_before)


def test_estop_disables_torque_on_the_bus(arm_and_emu):
    arm, emu = arm_and_emu
    assert all(emu.torque_enabled().values())
    t0 = time.monotonic()
    arm.safety.estop("operator pressed stop")       # broadcast: one packet, no replies to wait for
    while any(emu.torque_enabled().values()) and time.monotonic() - t0 < 0.5:
        time.sleep(0.002)
    assert not any(emu.torque_enabled().values())
    assert time.monotonic() - t0 < 0.1
    with pytest.raises(SafetyError, match="operator pressed stop"):
        arm.command(np.zeros(5), 0.5)


def test_advance_waits_to_the_period_deadline_and_reports_overrun(arm_and_emu):
    arm, _ = arm_and_emu
    arm.advance(0.0)
    t0 = time.monotonic()
    overruns = [arm.advance(0.04) for _ in range(3)]
    elapsed = time.monotonic() - t0
    assert 0.11 <= elapsed < 0.25 and sum(overruns) < 0.05
    time.sleep(0.07)                                   # the caller was 30 ms late this period
    late = arm.advance(0.04)
    assert 0.02 <= late <= 0.12                       # (upper bound: slack for a loaded CI box)
    t1 = time.monotonic()
    assert arm.advance(0.04) == 0.0 and 0.03 <= time.monotonic() - t1 < 0.1   # schedule restarts


def test_servo_arm_writes_calibrated_limits_once(arm_and_emu):
    from robolearn.drivers import feetech as ft

    arm, emu = arm_and_emu
    for c in arm.cals:                                   # the servos clamp goals to these
        assert emu.register(c.id, ft.MIN_ANGLE_LIMIT) == c.min
        assert emu.register(c.id, ft.MAX_ANGLE_LIMIT) == c.max
    n = emu.packets_handled
    again = ServoArm(arm.bus, SPEC, arm.calibration)     # reconnect: limits already right
    assert emu.packets_handled - n <= 6 + 12 + 2 + 6     # pings + limit reads + hold + torque
    assert again.torque_on
