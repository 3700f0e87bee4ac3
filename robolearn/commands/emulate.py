"""`robolearn emulate arm|car [--reality FILE.toml]`: emulated hardware until Ctrl-C.

Prints the device path (first stdout line), then one JSON line {"cameras": {NAME: URL}, "tracker":
URL of the car's external pose tracker (NDJSON poses, drivers/tracker_emulator.py), "truth":
URL of the plant's true poses (for reports, like a lab's motion capture), "hand": URL the
emulated operator POSTs to when it puts the cube back by hand (drivers/emulated_hand.py)} with
the model's cameras served as MJPEG over HTTP on 127.0.0.1. Point a driver at them exactly
as at real hardware, e.g. `gymnasium.make("robolearn/ArmReach-v0", backend="real", port=PATH,
camera="http://127.0.0.1:PORT/front.mjpg")`. `--reality` makes the physics differ from the
training sim (launch/reality/mild.toml, hard.toml; see drivers/reality.py).
"""
from __future__ import annotations

import signal
import sys
import time

from robolearn.errors import ConfigError

HELP = ("start an emulated servo-bus arm or car controller on a pseudo-terminal (with --reality: "
        "physics that differ from the training sim; cameras as MJPEG over HTTP), print its path, "
        "run until Ctrl-C (fault injection: --drop-rate, --corrupt-rate, --delay-ms, --silent-id, "
        "--unplug-after)")


def add_arguments(parser) -> None:
    parser.add_argument("device", choices=("arm", "car"), help="which device to emulate")
    parser.add_argument("--plant", default="auto",
                        help="physics behind the wire: auto (MuJoCo sim), sim, or the stand-in "
                             "(arm: first_order, car: bicycle)")
    parser.add_argument("--baud", type=int, default=None,
                        help="emulated UART rate for wire timing (arm default 1000000, car 115200)")
    parser.add_argument("--calibration-out", metavar="PATH",
                        help="arm: write the emulated arm's calibration JSON here")
    parser.add_argument("--scrambled", action="store_true",
                        help="arm: mount servo horns at random offsets/directions (needs the "
                             "matching --calibration-out file to drive it)")
    parser.add_argument("--protocol", choices=("feetech", "dynamixel"), default="feetech",
                        help="arm: servo bus protocol: feetech (STS3215, SO-100 class) or dynamixel "
                             "(Protocol 2.0 X-series, Koch class); drive it with the same protocol=")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reality", metavar="FILE.toml", default=None,
                        help="physics/camera differences from the training sim: a TOML file with "
                             "[arm]/[car]/[camera] tables, or mild / hard (launch/reality/)")
    parser.add_argument("--camera-port", type=int, default=0,
                        help="HTTP port of the MJPEG camera streams (default: a free port)")
    parser.add_argument("--no-cameras", action="store_true", help="do not serve camera streams")
    parser.add_argument("--tracker-port", type=int, default=0,
                        help="car: HTTP port of the external pose tracker (default: a free port)")
    parser.add_argument("--no-tracker", action="store_true",
                        help="car: no external pose tracker (motion capture / overhead camera)")
    parser.add_argument("--timeout-ms", type=int, default=None, help="car: initial failsafe timeout")
    faults = parser.add_argument_group("fault injection")
    faults.add_argument("--drop-rate", type=float, default=0.0, help="probability each sent byte is lost")
    faults.add_argument("--corrupt-rate", type=float, default=0.0,
                        help="probability a reply/frame is sent with a bad checksum")
    faults.add_argument("--delay-ms", type=float, default=0.0, help="extra delay before every reply")
    faults.add_argument("--silent-id", type=int, action="append", default=[],
                        help="arm: servo ID that never answers (repeatable)")
    faults.add_argument("--silent-after", type=float, default=None,
                        help="arm: --silent-id servos stop answering only after this many seconds")
    faults.add_argument("--unplug-after", type=float, default=None,
                        help="close the pty (cable pulled) after this many seconds")
    faults.add_argument("--cut-servo-power", action="store_true",
                        help="arm: unplugging also removes servo power (torque off)")
    parser.add_argument("--duration", type=float, default=None,
                        help="exit after this many seconds (default: until Ctrl-C)")


def _check(args) -> None:
    for name in ("drop_rate", "corrupt_rate"):
        v = getattr(args, name)
        if not 0.0 <= v <= 1.0:
            raise ConfigError(f"--{name.replace('_', '-')}={v}: a probability in [0, 1]")
    if args.delay_ms < 0:
        raise ConfigError(f"--delay-ms={args.delay_ms}: must be >= 0")
    if args.device == "car" and (args.silent_id or args.calibration_out or args.scrambled
                                 or args.protocol != "feetech"):
        raise ConfigError("--silent-id, --calibration-out, --scrambled and --protocol are for the arm emulator")
    if args.baud is not None and args.baud <= 0:
        raise ConfigError(f"--baud={args.baud}: must be positive")
    if args.device != "car" and (args.no_tracker or args.tracker_port):
        raise ConfigError("--tracker-port and --no-tracker are for the car emulator")
    if not 0 <= args.tracker_port <= 65535:
        raise ConfigError(f"--tracker-port={args.tracker_port}: a TCP port in 0..65535 (0: any free one)")
    if not 0 <= args.camera_port <= 65535:
        raise ConfigError(f"--camera-port={args.camera_port}: a TCP port in 0..65535 (0: any free one)")


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def run(args) -> int:
    from robolearn.drivers.ptylink import Faults

    _check(args)
    silent_now = set(args.silent_id) if args.silent_after is None else set()
    faults = Faults(drop_rate=args.drop_rate, corrupt_rate=args.corrupt_rate,
                    delay_s=args.delay_ms / 1000.0, silent_ids=silent_now, seed=args.seed)
    from robolearn.drivers.emulation import CameraStreamer, make_emulator, plant_model_data
    from robolearn.drivers.reality import load_reality

    reality = load_reality(args.reality)
    if args.device == "arm":
        emu = make_emulator("arm", reality if args.reality else None, seed=args.seed, plant=args.plant,
                            protocol=args.protocol,
                            mounting="scrambled" if args.scrambled else None, faults=faults,
                            baudrate=args.baud or 1_000_000)
        if args.calibration_out:
            emu.calibration.save(args.calibration_out)
    else:
        from robolearn.drivers import car_protocol as cp

        emu = make_emulator("car", reality if args.reality else None, seed=args.seed, plant=args.plant,
                            faults=faults, baudrate=args.baud or 115_200,
                            timeout_ms=args.timeout_ms or cp.DEFAULT_TIMEOUT_MS)
    streamer = None
    model, data = plant_model_data(emu)
    if not args.no_cameras and model is not None:
        streamer = CameraStreamer(model, data, emu.physics_lock, reality.camera, port=args.camera_port,
                                  seed=args.seed)
    tracker = None
    if args.device == "car" and not args.no_tracker:   # the lab's pose tracker watching the car
        from robolearn.drivers.emulation import start_tracker

        tracker = start_tracker(emu, reality, seed=args.seed, port=args.tracker_port)
    if streamer is not None or tracker is not None:  # faults from outside (bench soak): POST /faults
        from robolearn.drivers.fault_control import FaultControl

        FaultControl(emu, streamer, tracker).install(streamer.server if streamer else tracker)
    # Installed before the port is printed: a parent that reads the port and stops us at once
    # must get the clean Ctrl-C path, not the default SIGTERM death.
    signal.signal(signal.SIGTERM, _interrupt)          # `kill` stops it as cleanly as Ctrl-C
    try:
        _announce_and_serve(args, emu, streamer, reality, tracker)
    except KeyboardInterrupt:
        pass
    finally:
        if tracker is not None:
            tracker.close()
        if streamer is not None:
            streamer.close()
        emu.close()
    return 0


def _announce_and_serve(args, emu, streamer, reality, tracker=None) -> None:
    """Start serving, print where (port, then camera URLs as JSON), run until the duration or a signal."""
    import json

    emu.start()
    print(emu.path, flush=True)
    fault_server = streamer.server if streamer else tracker
    print(json.dumps({"cameras": streamer.urls if streamer else {},
                      "truth": streamer.truth_url if streamer else None,
                      "faults": (f"http://{fault_server.host}:{fault_server.port}/faults"
                                 if fault_server is not None else None),
                      "tracker": tracker.url if tracker is not None else None,
                      "hand": streamer.hand_url if streamer else None}), flush=True)
    print(f"emulating {args.device} ({type(emu.plant).__name__}, reality: {reality.source}) on "
          f"{emu.path}; Ctrl-C to stop", file=sys.stderr, flush=True)
    if streamer:
        for name, url in streamer.urls.items():
            print(f"camera {name}: {url}", file=sys.stderr, flush=True)
    if tracker is not None:
        print(f"pose tracker: {tracker.url}", file=sys.stderr, flush=True)
    if args.device == "arm" and args.calibration_out:
        print(f"calibration written to {args.calibration_out}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    unplugged = False
    while args.duration is None or time.monotonic() - t0 < args.duration:
        elapsed = time.monotonic() - t0
        if args.silent_after is not None and elapsed >= args.silent_after:
            emu.faults.silent_ids |= set(args.silent_id)
        if args.unplug_after is not None and not unplugged and elapsed >= args.unplug_after:
            if args.device == "arm":
                emu.unplug(servo_power=args.cut_servo_power)
            else:
                emu.unplug()
            unplugged = True
            print("unplugged", file=sys.stderr, flush=True)
        time.sleep(0.05)
