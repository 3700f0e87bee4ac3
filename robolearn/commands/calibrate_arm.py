"""`robolearn calibrate-arm --port PORT --out arm_calibration.json`: calibrate a servo arm's joint
offsets against its mechanical stops.

Each joint in turn is driven slowly against one stop whose angle the arm model knows (the MJCF
joint range), from a posture checked collision-free by forward kinematics; where it stalls
gives its offset (drivers/stop_calibration.py). The result is the calibration JSON that
`backend="real", calibration=FILE` reads. Works on Feetech (SO-100) and Dynamixel (Koch) arms
alike, and on the emulated arm (`robolearn emulate arm --reality hard`).

`robolearn calibrate-arm --from-lerobot FILE.json --out arm_calibration.json` instead converts
the calibration LeRobot already made for this arm (SO-100 / SO-101 / Koch `MotorCalibration`
JSON; drivers/lerobot_calibration.py, conventions in docs/drivers.md): no bus, nothing moves.
"""
from __future__ import annotations

import json
import sys

HELP = ("Calibrate a servo arm's joint offsets by driving each joint slowly against a mechanical "
        "stop (homing), or convert a LeRobot calibration (--from-lerobot); writes the calibration "
        "JSON the drivers read (calibration=FILE).")


def add_arguments(parser) -> None:
    parser.add_argument("--port", help="servo bus port, e.g. /dev/ttyACM0 (or the path `robolearn "
                                       "emulate arm` prints); required unless --from-lerobot")
    parser.add_argument("--from-lerobot", metavar="FILE", dest="from_lerobot",
                        help="convert this LeRobot calibration (~/.cache/huggingface/lerobot/calibration/"
                             "robots/<type>/<id>.json) instead of calibrating; --protocol says whose "
                             "homing-offset sign applies (feetech: SO-100/SO-101, dynamixel: Koch)")
    parser.add_argument("--direction", action="append", default=[], metavar="JOINT=-1",
                        help="with --from-lerobot: a joint whose servo counts against the model's positive "
                             "angle (repeatable; default +1, or --initial's directions)")
    parser.add_argument("--out", required=True, help="calibration JSON to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    parser.add_argument("--protocol", choices=("feetech", "dynamixel"), default="feetech",
                        help="servo bus protocol: feetech (STS3215, SO-100) or dynamixel (X-series, Koch)")
    parser.add_argument("--baudrate", type=int, default=1_000_000)
    parser.add_argument("--timeout", type=float, default=0.05, help="seconds to wait for a servo reply")
    parser.add_argument("--initial", metavar="FILE",
                        help="a rough calibration (servo IDs, directions, offsets within --max-offset), "
                             "e.g. from calibrate_zero_pose; default: IDs 1..6, horns at the centre "
                             "tick, positive directions (what calibration=None assumes)")
    parser.add_argument("--joints", help="comma-separated joints to calibrate (default: all, gripper "
                                         "included); the others keep their --initial entry")
    parser.add_argument("--stop", action="append", default=[], metavar="JOINT=RAD",
                        help="the angle of a joint's stop on your arm when it differs from the model's "
                             "joint range (repeatable)")
    parser.add_argument("--max-offset", type=float, default=None,
                        help="rad a horn may be off its believed angle (default 0.25): the search window")
    parser.add_argument("--speed", type=float, default=None, help="approach speed, rad/s (default 0.2)")


def _stops(items: list[str]) -> dict[str, float]:
    from robolearn.errors import ConfigError

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"--stop {item!r}: give JOINT=RADIANS, e.g. --stop elbow_flex=-1.62") from None
    return out


def _directions(items: list[str]) -> dict[str, int]:
    from robolearn.errors import ConfigError

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or value.strip() not in ("1", "+1", "-1"):
            raise ConfigError(f"--direction {item!r}: give JOINT=1 or JOINT=-1, e.g. --direction elbow_flex=-1")
        out[name.strip()] = int(value)
    return out


def _from_lerobot(args, out) -> int:
    from robolearn.drivers.calibration import Calibration
    from robolearn.drivers.lerobot_calibration import calibration_from_lerobot
    from robolearn.drivers.real import default_arm_spec
    from robolearn.drivers.stop_calibration import joint_names

    spec = default_arm_spec()
    names = joint_names(spec)
    initial = Calibration.load(args.initial, required=names) if args.initial else None
    cal, notes = calibration_from_lerobot(args.from_lerobot, args.protocol, spec, initial=initial,
                                          directions=_directions(args.direction))
    cal.save(out)                          # only after every check passed; atomic
    for line in notes:
        print(f"note: {line}", file=sys.stderr)
    print(json.dumps({"out": str(out), "from_lerobot": str(args.from_lerobot), "protocol": args.protocol,
                      "notes": notes, **cal.to_dict()}, indent=2))
    print(f"wrote {out}; use it with backend=\"real\", protocol=\"{args.protocol}\", calibration=\"{out}\"",
          file=sys.stderr)
    return 0


def run(args) -> int:
    from pathlib import Path

    from robolearn.drivers.calibration import Calibration
    from robolearn.drivers.real import bus_protocol, default_arm_spec
    from robolearn.drivers.servo_bus import ServoBus
    from robolearn.drivers.stop_calibration import calibrate_against_stops, joint_names
    from robolearn.errors import ConfigError

    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise ConfigError(f"{out} exists; pass --overwrite to replace it (or choose another --out)")
    if args.from_lerobot:
        if args.port or args.joints or args.stop:
            raise ConfigError("--from-lerobot converts a file: it takes no --port, --joints or --stop")
        return _from_lerobot(args, out)
    if not args.port:
        raise ConfigError("give --port PORT (stop calibration) or --from-lerobot FILE (conversion)")
    if args.direction:
        raise ConfigError("--direction goes with --from-lerobot (stop calibration takes directions "
                          "from --initial)")
    if not 0 < args.timeout <= 2:
        raise ConfigError(f"--timeout {args.timeout}: choose (0, 2] seconds")
    spec = default_arm_spec()
    names = joint_names(spec)
    initial = Calibration.load(args.initial, required=names) if args.initial else None
    joints = [j.strip() for j in args.joints.split(",") if j.strip()] if args.joints else None
    options = {}
    if args.max_offset is not None:
        options["max_offset"] = args.max_offset
    if args.speed is not None:
        options["approach_speed"] = args.speed
    stops = _stops(args.stop)
    with ServoBus(args.port, baudrate=args.baudrate, timeout=args.timeout, retries=2,
                  protocol=bus_protocol(args.protocol)) as bus:
        res = calibrate_against_stops(bus, spec, initial, joints=joints, stops=stops,
                                      log=lambda line: print(line, file=sys.stderr, flush=True), **options)
    res.calibration.save(out)
    print(json.dumps({"out": str(out), **res.summary()}, indent=2))
    print(f"wrote {out} ({res.seconds:.0f} s); use it with backend=\"real\", calibration=\"{out}\"",
          file=sys.stderr)
    return 0
