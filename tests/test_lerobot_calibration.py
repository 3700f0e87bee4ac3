"""Reusing LeRobot's arm calibration (drivers/lerobot_calibration.py, `calibrate-arm --from-lerobot`).

The LeRobot file is made the LeRobot way, not from our own values: `lerobot_calibrate` below
replays lerobot 0.4's `calibrate()` of the SO-101 follower (Feetech) and the Koch follower
(Dynamixel) against the emulated arm through the vendors' official SDKs (scservo_sdk,
dynamixel_sdk): torque off (+ Lock 0 on Feetech), Homing_Offset 0 and limits 0..4095, an
operator's eyeballed "middle" pose, `set_half_turn_homings` (Feetech: pos - 2047; Dynamixel:
2047 - pos), the operator sweeping every recorded joint stop to stop while the present
positions' min / max are kept, full-turn motors set to 0..4095 (Koch: shoulder_pan, wrist_roll),
then `write_calibration` (Homing_Offset, position limits). The operator's hand moves the emulated
arm's links (torque off) as a person would; the horns are scrambled (random offsets and
directions) and carry the hard reality's per-joint offsets, which only the emulator knows.
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
from robolearn.drivers.lerobot_calibration import calibration_from_lerobot
from robolearn.drivers.real import bus_protocol, default_arm_spec, make_arm_backend
from robolearn.drivers.servo_bus import ServoBus
from robolearn.drivers.stop_calibration import calibrate_against_stops, joint_names
from robolearn.errors import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
#: scrambled horns: the hard reality's per-joint offsets, no read noise, backlash or deadband
#: (those would blur a one-tick comparison of two calibrations, not test the conversion)
HORNS = {"arm": {"joint_offsets_rad": [0.08, -0.07, 0.07, -0.05, 0.04, 0.0]}}
#: stop calibration's own error on the gripper (test_stop_calibration allows 0.004 rad = 2.6 ticks)
STOP_GRIPPER_TICKS = 2
FULL_TURN = {"so100": ["wrist_roll"], "so101": [], "koch": ["shoulder_pan", "wrist_roll"]}

# LeRobot's control tables (lerobot/motors/feetech/tables.py, dynamixel/tables.py): address, bytes
FEETECH = {"Torque_Enable": (40, 1), "Lock": (55, 1), "Operating_Mode": (33, 1), "Homing_Offset": (31, 2),
           "Min_Position_Limit": (9, 2), "Max_Position_Limit": (11, 2), "Present_Position": (56, 2)}
DYNAMIXEL = {"Torque_Enable": (64, 1), "Operating_Mode": (11, 1), "Drive_Mode": (10, 1),
             "Homing_Offset": (20, 4), "Min_Position_Limit": (52, 4), "Max_Position_Limit": (48, 4),
             "Present_Position": (132, 4)}


class SdkBus:
    """The few reads and writes LeRobot's MotorsBus makes, through the vendor's own SDK, with
    LeRobot's sign encodings (Feetech sign-magnitude: Homing_Offset bit 11, Present_Position
    bit 15; Dynamixel two's complement)."""

    def __init__(self, port: str, protocol: str, monkeypatch):
        self.protocol = protocol
        if protocol == "feetech":
            self.sdk = pytest.importorskip("scservo_sdk")
            self.table, self.ph = FEETECH, self.sdk.PacketHandler(0)
        else:
            self.sdk = pytest.importorskip("dynamixel_sdk")
            self.table, self.ph = DYNAMIXEL, self.sdk.PacketHandler(2.0)
        monkeypatch.setattr(self.sdk.port_handler, "LATENCY_TIMER", 100)
        self.port = self.sdk.PortHandler(port)
        assert self.port.openPort() and self.port.setBaudRate(1_000_000)

    def _encode(self, name, value):
        if self.protocol == "feetech":
            bit = {"Homing_Offset": 11, "Present_Position": 15}.get(name)
            return (abs(value) | (1 << bit)) if bit is not None and value < 0 else value
        return value & ((1 << (8 * self.table[name][1])) - 1)

    def _decode(self, name, value):
        if self.protocol == "feetech":
            bit = {"Homing_Offset": 11, "Present_Position": 15}.get(name)
            return -(value & ((1 << bit) - 1)) if bit is not None and value & (1 << bit) else value
        n = 8 * self.table[name][1]
        return value - (1 << n) if value & (1 << (n - 1)) else value

    def write(self, name, sid, value):
        addr, size = self.table[name]
        fn = {1: self.ph.write1ByteTxRx, 2: self.ph.write2ByteTxRx, 4: self.ph.write4ByteTxRx}[size]
        result, error = fn(self.port, sid, addr, self._encode(name, int(value)))
        assert result == self.sdk.COMM_SUCCESS and error == 0, (name, sid, value, result, error)

    def read(self, name, sid):
        addr, size = self.table[name]
        fn = {1: self.ph.read1ByteTxRx, 2: self.ph.read2ByteTxRx, 4: self.ph.read4ByteTxRx}[size]
        value, result, error = fn(self.port, sid, addr)
        assert result == self.sdk.COMM_SUCCESS and error == 0, (name, sid, result, error)
        return self._decode(name, value)

    def close(self):
        self.port.closePort()


def hand(robot, q_true) -> None:
    """The operator's hand puts the links at `q_true` (rad, true joint angles, gripper last),
    torque off: the servos then hold there."""
    inner = robot.emulator.plant.inner
    q = np.asarray(q_true, float)
    with robot.emulator.physics_lock:
        inner.sim.set_state(q[:5], float(q[5]))
        inner.q = q.copy()
    time.sleep(0.03)                                   # a few physics steps: fresh readings


def lerobot_calibrate(robot, protocol: str, robot_type: str, monkeypatch, eyeball_rad=0.08, seed=0):
    """lerobot 0.4's `calibrate()` against the emulated arm (see the module docstring). Returns
    (the calibration JSON LeRobot would save, the operator's error on the middle pose)."""
    rng = np.random.default_rng(seed)
    plant = robot.emulator.plant
    lower, upper = plant.lower, plant.upper
    ids = dict(zip(NAMES, range(1, 7)))
    bus = SdkBus(robot.port, protocol, monkeypatch)
    try:
        for n in NAMES:                                # bus.disable_torque()
            bus.write("Torque_Enable", ids[n], 0)
            if protocol == "feetech":
                bus.write("Lock", ids[n], 0)
            bus.write("Operating_Mode", ids[n], 0 if protocol == "feetech" else 4)   # POSITION / EXTENDED
        eyeball = rng.uniform(-eyeball_rad, eyeball_rad, 6)
        middle = 0.5 * (lower + upper) + eyeball       # "Move the arm to the middle of its range"
        hand(robot, middle)
        for n in NAMES:                                # set_half_turn_homings -> reset_calibration
            bus.write("Homing_Offset", ids[n], 0)
            bus.write("Min_Position_Limit", ids[n], 0)
            bus.write("Max_Position_Limit", ids[n], 4095)
        pos = {n: bus.read("Present_Position", ids[n]) for n in NAMES}
        homing = {n: (p - 2047 if protocol == "feetech" else 2047 - p) for n, p in pos.items()}
        for n in NAMES:
            bus.write("Homing_Offset", ids[n], homing[n])
        recorded = [n for n in NAMES if n not in FULL_TURN[robot_type]]
        start = {n: bus.read("Present_Position", ids[n]) for n in recorded}   # record_ranges_of_motion
        mins, maxes = dict(start), dict(start)
        q = middle.copy()
        for j, n in enumerate(NAMES):                  # "move all joints sequentially through their ranges"
            if n not in recorded:
                continue
            sweep = np.concatenate([np.linspace(middle[j], lower[j], 4), np.linspace(lower[j], upper[j], 7),
                                    np.linspace(upper[j], middle[j], 4)])
            for a in sweep:
                q[j] = a
                hand(robot, q)
                for m in recorded:
                    p = bus.read("Present_Position", ids[m])
                    mins[m], maxes[m] = min(mins[m], p), max(maxes[m], p)
            q[j] = middle[j]
        for n in FULL_TURN[robot_type]:
            mins[n], maxes[n] = 0, 4095
        cal = {n: {"id": ids[n], "drive_mode": 0, "homing_offset": homing[n],
                   "range_min": mins[n], "range_max": maxes[n]} for n in NAMES}
        for n in NAMES:                                # write_calibration
            if protocol == "dynamixel":
                bus.write("Drive_Mode", ids[n], 0)
            bus.write("Homing_Offset", ids[n], homing[n])
            bus.write("Min_Position_Limit", ids[n], mins[n])
            bus.write("Max_Position_Limit", ids[n], maxes[n])
    finally:
        bus.close()
    return cal, dict(zip(NAMES, eyeball))


def true_pose(robot, be, q, gripper=0.5, settle=1.2):
    be.robot.command(np.asarray(q, float), gripper)
    time.sleep(settle)
    return robot.emulator.plant.true_positions()


@pytest.mark.parametrize("protocol,robot_type", [("feetech", "so101"), ("dynamixel", "koch")])
def test_a_lerobot_calibration_drives_the_arm_to_the_stop_calibrations_angles(tmp_path, monkeypatch,
                                                                                protocol, robot_type):
    spec = default_arm_spec()
    with start_emulator("arm", reality=HORNS, cameras=False, mounting="scrambled", seed=3,
                        protocol=protocol) as robot:
        mounting = robot.emulator.calibration                 # the horns (hidden from the procedures)
        assert any(c.direction < 0 for c in mounting.servos.values())
        lr, eyeball = lerobot_calibrate(robot, protocol, robot_type, monkeypatch)
        lr_file = tmp_path / f"{robot_type}_follower.json"
        lr_file.write_text(json.dumps(lr, indent=4))
        out = tmp_path / "arm_calibration.json"
        dirs = [a for n, c in mounting.servos.items() if c.direction < 0 for a in ("--direction", f"{n}=-1")]
        p = subprocess.run([sys.executable, "-m", "robolearn.cli", "calibrate-arm", "--from-lerobot", str(lr_file),
                            "--protocol", protocol, "--out", str(out), *dirs],
                           capture_output=True, text=True, timeout=60, cwd=REPO)
        assert p.returncode == 0, p.stderr
        conv = Calibration.load(out, required=joint_names(spec))
        assert [conv[n].homing_offset for n in NAMES] == [lr[n]["homing_offset"] for n in NAMES]
        for n in FULL_TURN[robot_type]:
            assert f"{n}: LeRobot treats it as full-turn" in p.stderr
        proto = bus_protocol(protocol)
        with ServoBus(robot.port, timeout=0.1, protocol=proto) as bus:
            for sid in range(1, 7):                            # some other tool cleared the offsets
                bus.set_homing_offset(sid, 0)
            stop = calibrate_against_stops(bus, spec, initial=conv).calibration
            assert [bus.read_register(s, proto.HOMING_OFFSET) for s in range(1, 7)] == \
                [lr[n]["homing_offset"] for n in NAMES]        # the file's frame, written back
            # the horns' truth in the file's frame (present = raw -/+ homing offset), which only
            # the emulator knows: raw ticks at 0 rad = mounting offset + the reality's joint offset
            sign = -1 if protocol == "feetech" else 1
            truth = {n: mounting[n].offset + mounting[n].direction * HORNS["arm"]["joint_offsets_rad"][i] / RAD_PER_TICK
                     + sign * lr[n]["homing_offset"] for i, n in enumerate(NAMES)}
            for n in NAMES:
                assert (conv[n].direction, conv[n].id) == (stop[n].direction, stop[n].id)
                if n in FULL_TURN[robot_type]:
                    # no recorded range: the zero is the operator's "middle" pose, as exact as it was
                    err = conv[n].direction * (conv[n].offset - truth[n]) * RAD_PER_TICK
                    assert abs(err - eyeball[n]) <= 1.5 * RAD_PER_TICK, (n, err, eyeball[n])
                else:
                    assert abs(conv[n].offset - truth[n]) <= 1, (n, conv[n].offset, truth[n])
            if FULL_TURN[robot_type]:                          # the documented refinement of those joints
                conv = calibrate_against_stops(bus, spec, initial=conv, joints=FULL_TURN[robot_type]).calibration
            d_tick = {n: conv[n].offset - stop[n].offset for n in NAMES}
            # the arm's joints: the two calibrations within one encoder tick; the gripper: the stop
            # procedure reads its stop up to STOP_GRIPPER_TICKS into the fingers' contact
            assert all(abs(d_tick[n]) <= 1 for n in NAMES[:5]), d_tick
            assert abs(d_tick["gripper"]) <= STOP_GRIPPER_TICKS, d_tick
        # drive the arm with each calibration: the same joint angles, within one encoder tick
        conv_file = conv.save(tmp_path / "converted.json")
        poses = [np.array([0.3, 0.4, -0.3, 0.5, -0.4]), np.array([-0.5, -0.2, 0.6, -0.3, 0.8])]
        reached = {}
        for name, cal in (("lerobot", str(conv_file)), ("stop", stop)):
            be = make_arm_backend(robot.port, calibration=cal, timeout=0.1, protocol=protocol)
            try:
                reached[name] = [true_pose(robot, be, q) for q in poses]
            finally:
                be.robot.close()
        diff = np.abs(np.array(reached["lerobot"]) - np.array(reached["stop"])) / RAD_PER_TICK
        assert diff[:, :5].max() <= 1.5 and diff[:, 5].max() <= STOP_GRIPPER_TICKS + 0.5, diff


def _lerobot_file(tmp_path, **changes):
    cal = {n: {"id": i, "drive_mode": 0, "homing_offset": 100 * i - 300, "range_min": 900, "range_max": 3100}
           for i, n in enumerate(NAMES, start=1)}
    spec = default_arm_spec()
    names = joint_names(spec)
    lower = list(spec.lower) + [min(spec.gripper_closed, spec.gripper_open)]
    upper = list(spec.upper) + [max(spec.gripper_closed, spec.gripper_open)]
    for n, lo, hi in zip(names, lower, upper):          # ranges recorded stop to stop, centred
        half = int(round((hi - lo) / 2 / RAD_PER_TICK))
        cal[n]["range_min"], cal[n]["range_max"] = 2047 - half, 2047 + half
    for key, value in changes.items():
        motor, field = key.split("__")
        cal[motor][field] = value
    path = tmp_path / "lerobot.json"
    path.write_text(json.dumps(cal))
    return path


def test_the_sign_conventions_of_both_protocols(tmp_path):
    """Conversion arithmetic: ticks stay LeRobot's present positions (the frame its homing
    offset makes), the middle of the recorded range is the middle of the model's range, and a
    Dynamixel drive_mode 1 (the servo counts the other way) flips the direction."""
    spec = default_arm_spec()
    path = _lerobot_file(tmp_path, elbow_flex__drive_mode=1)
    cal, notes = calibration_from_lerobot(path, "dynamixel", spec)
    lo, hi = spec.lower[2], spec.upper[2]
    assert cal["elbow_flex"].direction == -1 and cal["shoulder_pan"].direction == 1
    assert abs(cal["elbow_flex"].to_rad(2047) - (lo + hi) / 2) <= RAD_PER_TICK
    assert cal["shoulder_lift"].homing_offset == -100 and notes == []
    with pytest.raises(ConfigError, match="drive_mode = 1 on a Feetech arm"):
        calibration_from_lerobot(path, "feetech", spec)
    full = _lerobot_file(tmp_path, wrist_roll__range_min=0, wrist_roll__range_max=4095)
    cal, notes = calibration_from_lerobot(full, "feetech", spec)
    assert len(notes) == 1 and "wrist_roll" in notes[0]
    assert abs(cal["wrist_roll"].to_rad(2047) - (spec.lower[4] + spec.upper[4]) / 2) <= RAD_PER_TICK
    short = _lerobot_file(tmp_path, elbow_flex__range_min=1500)
    with pytest.raises(ConfigError, match="elbow_flex was recorded over .* stops are"):
        calibration_from_lerobot(short, "feetech", spec)


def test_a_file_for_other_motor_ids_is_refused_and_nothing_is_written(tmp_path):
    bad = _lerobot_file(tmp_path, shoulder_pan__id=7, gripper__id=12)
    out = tmp_path / "arm_calibration.json"
    p = subprocess.run([sys.executable, "-m", "robolearn.cli", "calibrate-arm", "--from-lerobot", str(bad),
                        "--out", str(out)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 2, p.stderr
    assert "is for other motor IDs: shoulder_pan has id 7, this arm's shoulder_pan is servo id 1; " \
           "gripper has id 12, this arm's gripper is servo id 6" in p.stderr
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))
    missing = tmp_path / "few.json"
    missing.write_text(json.dumps({n: e for n, e in json.loads(_lerobot_file(tmp_path).read_text()).items()
                                   if n != "gripper"}))
    with pytest.raises(ConfigError, match=r"missing \['gripper'\]"):
        calibration_from_lerobot(missing, "feetech", default_arm_spec())


def test_make_arm_backend_reads_a_lerobot_file_as_calibration(tmp_path):
    """calibration=FILE takes LeRobot's file as it is (IDs 1..6, directions +1) and writes its
    homing offsets to the servos before anything moves."""
    path = _lerobot_file(tmp_path)
    lr = json.loads(path.read_text())
    with start_emulator("arm", cameras=False) as robot:
        be = make_arm_backend(robot.port, calibration=str(path), timeout=0.1)
        try:
            from robolearn.drivers import feetech as ft
            assert [robot.emulator.register(s, ft.HOMING_OFFSET) for s in range(1, 7)] == \
                [lr[n]["homing_offset"] for n in NAMES]
            assert be.robot.calibration["wrist_flex"].homing_offset == lr["wrist_flex"]["homing_offset"]
        finally:
            be.robot.close()
