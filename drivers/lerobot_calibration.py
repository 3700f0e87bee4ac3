"""Reuse the arm calibration LeRobot already made: a LeRobot `MotorCalibration` file -> robolearn's
`Calibration` (drivers/calibration.py).

Why: an arm that LeRobot has calibrated (`lerobot-calibrate`, SO-100 / SO-101 / Koch) holds its
homing offsets in the servos' EEPROM and has a JSON file under
`~/.cache/huggingface/lerobot/calibration/robots/<robot_type>/<id>.json`; making the user
re-calibrate for robolearn costs time and a second, different zero.

LeRobot's file, one entry per motor name (lerobot 0.4.x, `lerobot.motors.MotorCalibration`):

    {"shoulder_pan": {"id": 1, "drive_mode": 0, "homing_offset": -1137,
                      "range_min": 786, "range_max": 3322}, ...}

What LeRobot's procedure did (robots/so10x_follower, koch_follower `calibrate()`; motors_bus
`set_half_turn_homings`, `record_ranges_of_motion`, `write_calibration`):
1. torque off (Feetech: also `Lock` = 0), Homing_Offset = 0, position limits 0..4095;
2. the operator holds the arm "in the middle of its range"; present position `pos` is read and
   the homing offset that makes that pose read half a turn (int(4095 / 2) = 2047) is written:
   Feetech (STS3215, register 31, sign-magnitude, sign bit 11): Present = Actual - Homing_Offset,
   so homing_offset = pos - 2047; Dynamixel (X-series, register 20, int32):
   Present = Actual + Homing_Offset, so homing_offset = 2047 - pos;
3. the operator moves every joint through its whole range; the min / max *present* positions
   are `range_min` / `range_max` (also written as the servos' position limits). Joints LeRobot
   treats as full-turn are not recorded but set to 0 / 4095: wrist_roll on the SO-100,
   shoulder_pan and wrist_roll on the Koch (none on the SO-101);
4. `drive_mode` is 0 on every Feetech motor (LeRobot applies no drive mode to Feetech) and on
   the Koch follower; bit 0 set (Dynamixel register 10) makes the servo count the other way.

The conversion (robolearn ticks are the servo's present position with the homing offset LeRobot
wrote, which the calibration records in `homing_offset` and `ServoArm` re-writes when a servo
holds another one):

    direction d   = the joint's sign (present ticks per positive model radian), from
                    `directions` (default +1, as `Calibration.default`), negated for a
                    Dynamixel motor with drive_mode 1
    ranged joint  : range_min / range_max were pressed against the joint's two mechanical stops,
                    whose angles the arm model knows (lower, upper); so the middle of the
                    recorded range is the middle of the model's range:
                    offset = (range_min + range_max) / 2 - d * (lower + upper) / 2 / rad_per_tick
    full-turn     : (range 0..4095) the range says nothing; the homing pose read 2047 and is
                    assumed to be the middle of the model's range:
                    offset = 2047 - d * (lower + upper) / 2 / rad_per_tick
                    (as good as the operator's "middle" pose: refine with
                    `robolearn calibrate-arm --initial OUT --joints JOINT`)
    min / max     : the model's range plus `LIMIT_MARGIN_RAD` on both sides, as stop
                    calibration writes (not LeRobot's range, which is where the hand stopped)
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from robolearn.drivers.calibration import LIMIT_MARGIN_RAD, RAD_PER_TICK, Calibration, calibrate_zero_pose
from robolearn.errors import ConfigError
from robolearn.jsonfile import read_json

FIELDS = ("id", "drive_mode", "homing_offset", "range_min", "range_max")
#: int(max_res / 2) with max_res = 4096 - 1: the present position LeRobot's homing pose reads
HALF_TURN = 2047
FULL_TURN_RANGE = (0, 4095)
#: a recorded range may differ from the model's stop-to-stop range by this much (rad) before
#: the file is refused: LeRobot's hand-recorded ranges end where the person stopped pushing
RANGE_TOLERANCE_RAD = 0.15
HOMING_LIMITS = {"feetech": 2047, "dynamixel": 1_044_479}   # |Homing_Offset| the register holds


def is_lerobot_calibration(raw) -> bool:
    """A LeRobot calibration: a JSON object of motor name -> object with LeRobot's five fields."""
    return (isinstance(raw, dict) and "format" not in raw and bool(raw)
            and all(isinstance(v, dict) and set(FIELDS) <= set(v) for v in raw.values()))


def read_lerobot_calibration(path: str | Path) -> dict:
    path = Path(path)
    raw = read_json(path, ConfigError, f"LeRobot calibration {path} not found (LeRobot keeps them under "
                    "~/.cache/huggingface/lerobot/calibration/robots/<robot_type>/<id>.json)",
                    corrupt="run lerobot-calibrate again or restore the file")
    if not is_lerobot_calibration(raw):
        raise ConfigError(f"{path} is not a LeRobot calibration: expected an object of motor name -> "
                          f"{{{', '.join(FIELDS)}}}")
    return raw


def from_lerobot(source, protocol: str, names: list[str], lower, upper, ids: list[int] | None = None,
                 directions: dict[str, int] | None = None,
                 range_tolerance: float = RANGE_TOLERANCE_RAD) -> tuple[Calibration, list[str]]:
    """(robolearn calibration, notes) from a LeRobot calibration (a path or its dict).

    `names`: the arm's servos in joint order, gripper last; `lower` / `upper`: their model
    ranges (rad, the mechanical stops); `ids`: the servo ID each name must have (default
    1..n, LeRobot's and robolearn's default numbering); `directions`: name -> +1/-1 (default
    +1). Raises ConfigError naming every mismatch; nothing is written here."""
    if protocol not in HOMING_LIMITS:
        raise ConfigError(f"protocol={protocol!r}: choose feetech (SO-100 / SO-101) or dynamixel (Koch)")
    where = str(source) if isinstance(source, (str, Path)) else "<LeRobot calibration>"
    raw = read_lerobot_calibration(source) if isinstance(source, (str, Path)) else source
    if not is_lerobot_calibration(raw):
        raise ConfigError(f"{where}: not a LeRobot calibration (motor name -> {{{', '.join(FIELDS)}}})")
    ids = list(range(1, len(names) + 1)) if ids is None else list(ids)
    directions = dict(directions or {})
    unknown_dir = sorted(set(directions) - set(names))
    if unknown_dir:
        raise ConfigError(f"directions for unknown joint(s) {unknown_dir}; the arm's are {names}")
    missing = [n for n in names if n not in raw]
    extra = sorted(set(raw) - set(names))
    if missing or extra:
        raise ConfigError(f"LeRobot calibration {where} has motors {list(raw)}, the arm needs {names}"
                          + (f"; missing {missing}" if missing else "") + (f"; unknown {extra}" if extra else ""))
    for name in names:
        for k in FIELDS:
            v = raw[name][k]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"LeRobot calibration {where}: {name}.{k} must be an integer, got {v!r}")
    wrong = [f"{n} has id {raw[n]['id']}, this arm's {n} is servo id {i}" for n, i in zip(names, ids)
             if raw[n]["id"] != i]
    if wrong:
        raise ConfigError(f"LeRobot calibration {where} is for other motor IDs: {'; '.join(wrong)}. "
                          "Use the file of this arm, or give the arm's IDs (--initial FILE with them)")
    notes: list[str] = []
    zero: dict[str, int] = {}
    dirs: dict[str, int] = {}
    limit = HOMING_LIMITS[protocol]
    for name, lo, hi in zip(names, lower, upper):
        e = raw[name]
        if abs(e["homing_offset"]) > limit:
            raise ConfigError(f"LeRobot calibration {where}: {name}.homing_offset = {e['homing_offset']} does "
                              f"not fit the {protocol} Homing_Offset register (|value| <= {limit}); is "
                              "--protocol right?")
        if e["drive_mode"] not in (0, 1):
            raise ConfigError(f"LeRobot calibration {where}: {name}.drive_mode = {e['drive_mode']} must be 0 or 1")
        if e["drive_mode"] and protocol == "feetech":
            raise ConfigError(f"LeRobot calibration {where}: {name}.drive_mode = 1 on a Feetech arm, which "
                              "LeRobot never writes (it applies no drive mode to Feetech servos); is "
                              "--protocol right?")
        if not 0 <= e["range_min"] < e["range_max"] <= 4095:
            raise ConfigError(f"LeRobot calibration {where}: {name} range {e['range_min']}..{e['range_max']} "
                              "must satisfy 0 <= range_min < range_max <= 4095")
        d = int(directions.get(name, 1))
        if d not in (1, -1):
            raise ConfigError(f"direction of {name} = {d}: give 1 or -1")
        if protocol == "dynamixel" and e["drive_mode"]:
            d = -d
        mid = 0.5 * (lo + hi)
        if (e["range_min"], e["range_max"]) == FULL_TURN_RANGE:
            zero[name] = int(round(HALF_TURN - d * mid / RAD_PER_TICK))
            notes.append(f"{name}: LeRobot treats it as full-turn (range 0..4095, not recorded), so its "
                         "zero comes from LeRobot's homing pose, assumed to be the middle of the joint's "
                         f"range ({mid:+.3f} rad): as exact as that pose was; refine it against its stop "
                         f"with `robolearn calibrate-arm --initial OUT --joints {name}`")
        else:
            width = (e["range_max"] - e["range_min"]) * RAD_PER_TICK
            if abs(width - (hi - lo)) > range_tolerance:
                raise ConfigError(
                    f"LeRobot calibration {where}: {name} was recorded over {width:.3f} rad "
                    f"({e['range_min']}..{e['range_max']} ticks) but its stops are {hi - lo:.3f} rad apart "
                    f"({lo:+.3f}..{hi:+.3f}); the conversion needs the range recorded stop to stop. Run "
                    "`robolearn calibrate-arm --port PORT` (stop calibration) instead")
            zero[name] = int(round(0.5 * (e["range_min"] + e["range_max"]) - d * mid / RAD_PER_TICK))
        dirs[name] = d
    try:
        cal = calibrate_zero_pose(zero, dict(zip(names, ids)), dirs, dict(zip(names, lower)),
                                  dict(zip(names, upper)), margin=LIMIT_MARGIN_RAD)
    except ConfigError as exc:
        raise ConfigError(f"LeRobot calibration {where}: {exc}") from None
    cal = Calibration({n: replace(cal[n], homing_offset=int(raw[n]["homing_offset"])) for n in names})
    return cal, notes


def lerobot_present(raw_ticks: int, homing_offset: int, protocol: str) -> int:
    """Present_Position for a raw encoder reading under LeRobot's homing offset (the sign rule)."""
    return raw_ticks - homing_offset if protocol == "feetech" else raw_ticks + homing_offset


def model_ranges(spec) -> tuple[list[str], list[float], list[float]]:
    """(names, lower, upper) of every servo of `spec`, gripper last."""
    g_lo, g_hi = sorted((spec.gripper_closed, spec.gripper_open))
    names = list(spec.joint_names) + ["gripper"]
    return names, [float(x) for x in spec.lower] + [g_lo], [float(x) for x in spec.upper] + [g_hi]


def calibration_from_lerobot(source, protocol: str, spec, initial: Calibration | None = None,
                             directions: dict[str, int] | None = None) -> tuple[Calibration, list[str]]:
    """`from_lerobot` for the arm `spec` (`real.default_arm_spec()`: robolearn's SO-100-class
    arm); servo IDs and directions from `initial` (a robolearn calibration of this arm) when
    given; `directions` on top."""
    names, lower, upper = model_ranges(spec)
    ids = None
    dirs = {}
    if initial is not None:
        ids = [initial[n].id for n in names]
        dirs = {n: initial[n].direction for n in names}
    dirs.update(directions or {})
    return from_lerobot(source, protocol, names, lower, upper, ids=ids, directions=dirs)


__all__ = ["calibration_from_lerobot", "from_lerobot", "is_lerobot_calibration", "read_lerobot_calibration",
           "lerobot_present", "HALF_TURN"]
