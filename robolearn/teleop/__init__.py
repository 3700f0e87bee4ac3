"""Teleoperation: input devices -> env actions, and intervention switching.

`make_device(name, env)` builds one of `DEVICES`; hardware libraries (evdev, hidapi, the servo
bus driver) are imported only by the device that needs them.
"""
from __future__ import annotations

from robolearn.errors import ConfigError
from robolearn.teleop.base import EVENTS, Device, DeviceCommand, DeviceNotFoundError

DEVICES = ("keyboard", "scripted", "gamepad", "spacemouse", "leader", "operator", "car_operator")

__all__ = ["DEVICES", "EVENTS", "Device", "DeviceCommand", "DeviceNotFoundError", "make_device"]


def make_device(name: str, env, **config) -> Device:
    """Build device `name` for `env`; keyword args go to that device's config dataclass."""
    import numpy as np

    dim = int(np.prod(env.action_space.shape))
    if name == "keyboard":
        from robolearn.teleop.keyboard import KeyboardConfig, KeyboardDevice
        if "absolute_dims" not in config and hasattr(getattr(env.unwrapped, "task", None), "action_mode"):
            config["absolute_dims"] = (dim - 1,)  # arm envs: the last dim is the absolute gripper
        if _is_car(env):
            config.setdefault("axes", ("ad", "ws"))  # car: a/d steer left/right, w/s throttle/brake
        return KeyboardDevice(dim, _config(KeyboardConfig, config, name))
    if name == "scripted":
        from robolearn.teleop.scripted import ScriptedConfig, ScriptedDevice
        return ScriptedDevice(env, _config(ScriptedConfig, config, name))
    if name == "gamepad":
        from robolearn.teleop.gamepad import GamepadConfig, GamepadDevice
        if _is_car(env):
            config.setdefault("axes", ("-ABS_X", "-ABS_RY"))  # car: left stick steers, right stick throttle
        return GamepadDevice(dim, _config(GamepadConfig, config, name))
    if name == "spacemouse":
        from robolearn.teleop.spacemouse import SpaceMouseConfig, SpaceMouseDevice
        return SpaceMouseDevice(dim, _config(SpaceMouseConfig, config, name))
    if name == "leader":
        from robolearn.teleop.leader import LeaderArmConfig, LeaderArmDevice
        return LeaderArmDevice(env, _config(LeaderArmConfig, config, name))
    if name == "operator":  # the emulated person at an emulated robot (teleop/operator.py)
        if config.get("mode") == "intervene":  # ... who takes over a stuck policy (HIL-SERL)
            from robolearn.teleop.intervening_operator import InterveneConfig, InterveningOperator
            config = {k: v for k, v in config.items() if k != "mode"}
            return InterveningOperator(env, _config(InterveneConfig, config, "operator (mode intervene)"))
        from robolearn.teleop.operator import OperatorConfig, OperatorDevice
        return OperatorDevice(env, _config(OperatorConfig, config, name))
    if name == "car_operator":  # the emulated person at the emulated car, on the gamepad
        from robolearn.teleop.car_operator import CarGamepadOperator, CarOperatorConfig
        return CarGamepadOperator(env, _config(CarOperatorConfig, config, name))
    raise ConfigError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)}")


def _is_car(env) -> bool:
    """Car envs: action = (steer + left, throttle + forward); keys/sticks are laid out for driving."""
    task = getattr(env.unwrapped, "task", None)
    return task is not None and type(task).__name__.lower().startswith("car")


def _config(cls, kwargs: dict, name: str):
    import dataclasses

    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        raise ConfigError(f"{name} device has no option(s) {unknown}; options: {sorted(fields)}")
    return cls(**kwargs)
