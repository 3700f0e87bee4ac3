"""`robolearn calibrate-arm --port PORT --out arm_calibration.json`: calibrate a servo arm's joint
offsets against its mechanical stops.

Each joint in turn is driven slowly against one stop whose angle the arm model knows (the MJCF
joint range), from a posture checked collision-free by forward kinematics; where it stalls
gives its offset (drivers/stop_calibration.py). The result is the calibration JSON that
`backend="real", calibration=FILE` reads. Works on Feetech (SO-100) and Dynamixel (Koch) arms
alike, and on the emulated arm (`robolearn emulate arm --reality hard`).
"""
from __future__ import annotations

import json
import sys

HELP = ("Calibrate a servo arm's joint offsets by driving each joint slowly against a mechanical "
        "stop (homing); writes the calibration JSON the drivers read (calibration=FILE).")


def add_arguments(parser) -> None:
    parser.add_argument("--port", required=True, help="servo bus port, e.g. /dev/ttyACM0 (or the "
                                                      "path `robolearn emulate arm` prints)")
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
