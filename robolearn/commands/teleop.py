"""`robolearn teleop ENV_ID --device D`: drive a sim or real env live, with a terminal readout.

Nothing is recorded (use `robolearn record` for that). The readout shows the step, the action
sent, the start of the state vector, reward/success and the measured loop rate against the
env's control rate. Enter/x/Backspace (or the device's buttons) end the episode and reset.
"""
from __future__ import annotations

HELP = ("Drive an env live from an input device (keyboard, gamepad, spacemouse, leader arm or the "
        "scripted controller) with a terminal readout of the state and the loop rate.")


def add_arguments(parser) -> None:
    from robolearn.commands.env_kwargs import add_env_kw_argument
    from robolearn.teleop.session import add_device_arguments

    parser.add_argument("env_id", help="env to drive, e.g. robolearn/ArmReach-v0 (see `robolearn envs`)")
    add_device_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="reset seed of the first episode (then +1 each)")
    parser.add_argument("--obs", choices=("state", "pixels", "both"), default="state",
                        help="observation mode of the env (default: state)")
    parser.add_argument("--rate", type=float, default=None,
                        help="loop rate in Hz (default: the env's control rate); 0 = as fast as possible")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: until quit)")
    add_env_kw_argument(parser)


def run(args) -> int:
    import numpy as np

    from robolearn.commands.env_kwargs import parse_env_kwargs
    from robolearn.env import env_control_hz
    from robolearn.teleop import make_device
    from robolearn.teleop.session import Pacer, Readout, device_config, fmt_vec, open_env

    env = open_env(args.env_id, args.obs, **parse_env_kwargs(args.env_kw))
    device = None
    try:
        hz = env_control_hz(env, 10.0)
        device = make_device(args.device, env, **device_config(args))
        pacer = Pacer(hz if args.rate is None else args.rate)
        out = Readout()
        out.line(f"teleop {args.env_id} at {hz:g} Hz control rate; {device.help()}")
        seed = args.seed
        total = 0
        episode = 0
        quit_ = False
        while not quit_:
            obs, info = env.reset(seed=seed)
            seed += 1
            episode += 1
            device.reset()
            pacer.restart()
            ret = 0.0
            steps = 0
            while True:
                cmd = device.read(obs)
                if "quit" in cmd.events:
                    quit_ = True
                    break
                label = cmd.events & {"success", "failure", "discard"}
                if label:
                    out.line(f"episode {episode}: marked {sorted(label)[0]} after {steps} steps; resetting")
                    break
                action = np.asarray(cmd.action, dtype=np.float32)
                obs, reward, terminated, truncated, info = env.step(action)
                steps += 1
                total += 1
                ret += float(reward)
                state = obs.get("state")
                out.update(f"ep {episode} step {steps} | action {fmt_vec(action)}"
                           + (f" | state {fmt_vec(state, 5)}" if state is not None else "")
                           + f" | reward {float(reward):+.3f} | success {'yes' if info.get('success') else 'no '}"
                           + f" | {pacer.measured_hz:5.1f}/{pacer.hz:g} Hz"
                           + (" | TAKEOVER" if cmd.engaged else ""))
                if args.steps is not None and total >= args.steps:
                    quit_ = True
                    break
                if terminated or truncated:
                    out.line(f"episode {episode}: {'success' if info.get('success') else 'ended'} after "
                             f"{steps} steps, return {ret:+.2f}")
                    break
                pacer.wait()
        out.line(f"teleop stopped after {total} steps ({episode} episode(s))")
        return 0
    finally:
        if device is not None:
            device.close()
        env.close()
