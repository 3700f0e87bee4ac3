"""Env construction: launch-file options, CLI strings and folder paths become the objects a
`RobotEnv` is made of.

Why here, at the top: a reward model folder (`reward_source="models/x"`), a prompt named by a
string (`reset_prompt="operator:sim"`) or a cube finder folder needs model loading, teleop and
reset controllers, all layers above the env. `RobotEnv` and the tasks receive ready objects
(a reward source, a reset supervisor, a reset-controller factory) and import none of them.
These functions are the Gymnasium entry points of the arm and car IDs (robolearn/registry.py),
so `gymnasium.make("robolearn/ArmLift-v0", reward_source="models/x")` resolves the folder here.
"""
from __future__ import annotations

import math
import sys
from typing import Callable

from robolearn.checks import check_choice, check_control_hz, check_obs_mode
from robolearn.env import RobotEnv
from robolearn.errors import ConfigError
from robolearn.policies.cube_finder import CubeFinder
from robolearn.resets.car import RecoverOntoTrack
from robolearn.resets.cube import PlaceCube
from robolearn.resets.cube_camera import PlaceCubeByCamera
from robolearn.resets.modes import check_on_failure, resolve_reset_mode
from robolearn.resets.prompt import HumanPrompt
from robolearn.resets.scripted import ArmHome
from robolearn.resets.supervisor import ResetSupervisor
from robolearn.rewards.serving import make_reward_source
from robolearn.robot import Backend
from robolearn.sim.arm_workspace import CUBE_REGION_HIGH, CUBE_REGION_LOW
from robolearn.tasks.arm import (ACTION_MODES, BACKENDS, CUBE_TASKS, SIM_BACKEND_KWARGS, TASK_CLASSES,
                                 TASKS, ArmTask)
from robolearn.tasks.base import Task
from robolearn.tasks.car import SIM_KWARGS, CarLap, check_car_image_size
from robolearn.teleop.operator import make_prompt


def build_env(backend: Backend, make_task: Callable[[Backend], Task], *, obs: str = "state",
              render_mode: str | None = None, reward_source=None, privileged_obs: bool = False,
              reset_mode: str | None = None, reset_on_failure: str | None = None,
              reset_timeout: float = 60.0, reset_prompt=None, reset_attempts: int = 2) -> RobotEnv:
    """A `RobotEnv` on `make_task(backend)` with its reward source and reset supervisor built
    from options; closes the backend if anything fails, so a bad option never leaves a serial
    port, camera or emulator open."""
    try:
        task = make_task(backend)
        mode = resolve_reset_mode(reset_mode, backend.kind)
        resets = make_reset_supervisor(backend, reset_on_failure, reset_timeout, reset_prompt,
                                       reset_attempts)
        source = make_reward_source(reward_source) if reward_source is not None else None
        return RobotEnv(task, obs=obs, render_mode=render_mode, reward_source=source,
                        privileged_obs=privileged_obs, reset_mode=mode, resets=resets)
    except Exception:
        backend.close()
        raise


def make_reset_supervisor(backend: Backend, on_failure: str | None = None, timeout: float = 60.0,
                          prompt=None, attempts: int = 2) -> ResetSupervisor:
    """The supervisor physical resets run under. `prompt`: a prompt object, or a launch-file
    string ("terminal", "operator:URL", "operator:sim"); `on_failure` None asks an operator
    where there is one (a prompt, or a terminal on stdin) and raises otherwise."""
    if isinstance(prompt, str):
        prompt = make_prompt(prompt, sim=backend.privileged)
    if on_failure is None:
        on_failure = "prompt" if (prompt is not None or sys.stdin.isatty()) else "raise"
    check_on_failure(on_failure)
    if on_failure == "prompt" and prompt is None:
        prompt = HumanPrompt()
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        raise ConfigError(f"reset_timeout={timeout!r}: give seconds (a number > 0)") from None
    return ResetSupervisor(backend.robot, on_failure=on_failure, timeout_s=timeout,
                           wall_timeout_s=max(2.0 * timeout, 30.0), prompt=prompt, attempts=attempts,
                           teleports=lambda: int(getattr(backend.privileged, "teleports", 0)))


# ------------------------------------------------------------------------------ arm
#: what a camera cube reset does with a cube it finds (make_arm_env's `cube_reset`)
CUBE_RESETS = ("place", "keep_in_region")


def arm_reset_controller(task: ArmTask):
    """Physical reset: the cube back into its start region (push, lift), then the arm home.
    The cube's pose comes from the camera when the task has a `cube_finder` (the only way on
    hardware), else from the simulator; without either, only the arm goes home."""
    if task.needs_cube and task.cube_finder is not None:
        return PlaceCubeByCamera(task.cube_finder, tuple(CUBE_REGION_LOW), tuple(CUBE_REGION_HIGH),
                                 keep_in_region=task.cube_reset == "keep_in_region")
    if task.needs_cube and task.sim is not None:
        return PlaceCube(tuple(CUBE_REGION_LOW), tuple(CUBE_REGION_HIGH))
    return ArmHome()


def make_arm_env(task: str = "reach", backend: str = "sim", obs: str = "state",
                 control_hz: float = 10.0, action_mode: str = "ee_delta",
                 image_size: tuple[int, int] = (84, 84), port: str | None = None,
                 camera=None, reward_source=None, render_mode: str | None = None,
                 privileged_obs: bool = False, reset_mode: str | None = None,
                 reset_on_failure: str | None = None, reset_timeout: float = 60.0, reset_prompt=None,
                 cube_finder: str | None = None, cube_reset: str = "place", **backend_kwargs) -> RobotEnv:
    """Build an arm `RobotEnv`.

    `privileged_obs=True` (sim only) adds the `privileged` observation (see module docstring).

    backend="sim": `camera` picks the sim cameras for pixel observations (None: both `wrist`
    and `front`; or a name / list of names); extra kwargs: model_path, timestep.
    backend="real": `port` (serial port of the servo bus) and `camera` (OpenCV source, named
    `front`; or a dict {name: source} with names from the sim's cameras) go to
    `robolearn.drivers.real.make_arm_backend`, with any extra kwargs (e.g. calibration).
    reset_mode: "teleport" (sim default) or "physical" (hardware's only mode); reset_on_failure,
    reset_timeout, reset_prompt: see `make_reset_supervisor` and robolearn/resets.
    cube_finder: a cube finder folder (made by the camera calibration on the robot,
    policies/cube_finder.py): push/lift physical resets then find the cube with the camera
    (resets/cube_camera.py), as they must on hardware; its camera must be among the env's.
    cube_reset: "place" (the camera reset picks the cube up and places it at a random point of
    the start region every time) or "keep_in_region" (a cube the camera sees inside the start
    region stays where it lies, the arm only goes home: push draws its goal around the cube;
    it acts once a cube finder is attached, e.g. by a session's camera calibration).
    """
    check_choice("task", task, TASKS)
    check_choice("backend", backend, BACKENDS)
    resolve_reset_mode(reset_mode, backend)
    check_obs_mode(obs)
    hz = check_control_hz(control_hz, max_hz=500.0)
    check_choice("action_mode", action_mode, ACTION_MODES)
    check_choice("cube_reset", cube_reset, CUBE_RESETS)
    from robolearn.sim.arm import CAMERA_NAMES, check_image_size, make_arm_sim_backend

    image_size = check_image_size(image_size)
    if backend == "sim":
        unknown = sorted(set(backend_kwargs) - set(SIM_BACKEND_KWARGS))
        if unknown:
            raise ConfigError(f"unknown arm env option(s) {unknown} for backend='sim'; accepted extra "
                              f"options: {', '.join(SIM_BACKEND_KWARGS)}")
        if port is not None:
            raise ConfigError("port= is for backend='real' (the servo bus); the sim has no port")
        if camera is None:
            cams = CAMERA_NAMES
        else:
            cams = (camera,) if isinstance(camera, str) else tuple(camera)
            for c in cams:
                check_choice("camera", c, CAMERA_NAMES)
        be = make_arm_sim_backend(control_hz=hz, cameras=cams, image_size=image_size, **backend_kwargs)
    else:
        if privileged_obs:
            raise ConfigError("privileged_obs=True needs backend='sim': hardware cannot measure the "
                              "cube pose; train with privileged='critic' so the policy runs without it")
        if isinstance(camera, dict):
            for c in camera:
                check_choice("camera name", c, CAMERA_NAMES)  # the names a sim-trained policy knows
        if task in CUBE_TASKS and reward_source is None:
            raise ConfigError(f"task={task!r} on backend='real' needs reward_source= (a RewardSource, "
                              "e.g. a success classifier): hardware cannot measure the cube pose "
                              "(`robolearn record` labels with the recording device instead)")
        if port is None:
            raise ConfigError("backend='real' needs port= (the servo bus serial port, e.g. /dev/ttyACM0)")
        from robolearn.drivers.real import make_arm_backend

        be = make_arm_backend(port=port, camera=camera, image_size=image_size, **backend_kwargs)
    model_path = backend_kwargs.get("model_path") if backend == "sim" else None

    def make_task(b):
        t = TASK_CLASSES[task](b, control_hz=hz, action_mode=action_mode, model_path=model_path)
        if cube_finder:
            attach_cube_finder(t, cube_finder)
        t.cube_reset = cube_reset
        t.make_reset_controller = arm_reset_controller
        return t

    return build_env(
        be, make_task, obs=obs, render_mode=render_mode, reward_source=reward_source,
        privileged_obs=privileged_obs, reset_mode=reset_mode, reset_on_failure=reset_on_failure,
        reset_timeout=reset_timeout, reset_prompt=reset_prompt)


def attach_cube_finder(task: ArmTask, path) -> None:
    """Load the camera cube finder a physical cube reset looks with, checked against the env's cameras."""
    if not task.needs_cube:
        raise ConfigError(f"cube_finder is for the cube tasks (push, lift); {task.name} has no cube to reset")
    finder = CubeFinder.load(path)
    cam = task.backend.cameras.get(finder.camera)
    if cam is None:
        raise ConfigError(f"cube_finder {path} looks through camera {finder.camera!r}; this env has "
                          f"cameras {sorted(task.backend.cameras)}: add {finder.camera!r} to camera=")
    shape = tuple(finder.image_shape)
    if tuple(cam.shape) != shape:
        raise ConfigError(f"cube_finder {path} was trained on {shape} images, camera {finder.camera!r} "
                          f"gives {tuple(cam.shape)}; set image_size = {list(shape[:2])}")
    task.cube_finder = finder


# ------------------------------------------------------------------------------ car
def car_reset_controller(task: CarLap):
    """Physical reset: back off any wall and turn toward the track ahead (the FastRLAP-style
    recovery of `robolearn.resets.car`); the lap timer starts at the next start-line crossing."""
    return RecoverOntoTrack()


def make_car_env(backend: str = "sim", obs: str = "state", control_hz: float = 20.0,
                 image_size: tuple[int, int] = (84, 84), end_on_collision: bool = False,
                 port: str | None = None, camera: str | None = None, reward_source=None,
                 render_mode: str | None = None, collision_penalty: float = 0.0,
                 privileged_obs: bool = False, reset_mode: str | None = None,
                 reset_on_failure: str | None = None, reset_timeout: float = 60.0, reset_prompt=None,
                 reset_attempts: int = 2, practice: bool = False, **backend_kwargs) -> RobotEnv:
    """Build a CarLap env. `privileged_obs=True` (sim only) adds the `privileged` observation:
    the track-relative entries (lateral offset, heading error, curvature ahead) a real car
    cannot measure (module docstring).
    reset_mode: "teleport" (sim default: the car is put behind the start line) or "physical"
    (the only mode on hardware: the car recovers onto the track by driving, robolearn/resets).
    reset_attempts: recoveries tried before the operator is asked (reset_on_failure).
    practice: end episodes on a crash or a stall (`AutonomousPractice`, FastRLAP's practice; the
    physical reset recovers), as a robot session's actor drives.
    backend="real": `tracker` (URL of an external pose tracker's stream) gives lap progress,
    checkpoints and lap times on `track` (the track as laid out in the tracker's frame; default
    the sim's); without it, `reward_source` is required (docs/car.md)."""
    if isinstance(reset_attempts, bool) or not isinstance(reset_attempts, int) or reset_attempts < 1:
        raise ConfigError(f"reset_attempts={reset_attempts!r}: an int >= 1 (recoveries before the operator is asked)")
    if "privileged_state" in backend_kwargs:
        raise ConfigError("privileged_state was replaced: the track entries are no longer in `state` "
                          "(hardware cannot measure them); pass privileged_obs=True to get them as "
                          "obs['privileged'] in sim, e.g. for an asymmetric critic (privileged='critic')")
    check_choice("backend", backend, ("sim", "real"))
    resolve_reset_mode(reset_mode, backend)
    check_obs_mode(obs)
    hz = check_control_hz(control_hz, max_hz=250.0)
    check_car_image_size(image_size)
    if not isinstance(end_on_collision, bool):
        raise ConfigError(f"end_on_collision={end_on_collision!r}: pass True or False")
    try:
        collision_penalty = float(collision_penalty)
    except (TypeError, ValueError):
        raise ConfigError(f"collision_penalty={collision_penalty!r} is not a number") from None
    if not (math.isfinite(collision_penalty) and collision_penalty >= 0):
        raise ConfigError(f"collision_penalty={collision_penalty!r}: must be a finite number >= 0")
    track = None                     # real: the track in the tracker's frame (sim: its backend's)
    if backend == "sim":
        if port is not None:
            raise ConfigError(f"port={port!r} is only used with backend='real'")
        if camera not in (None, "front"):
            raise ConfigError(f"camera={camera!r}: the simulated car has one camera, 'front'")
        unknown = sorted(set(backend_kwargs) - set(SIM_KWARGS))
        if unknown:
            raise ConfigError(f"unknown CarLap option(s) {unknown}; the sim backend accepts "
                              f"{', '.join(SIM_KWARGS)}")
        from robolearn.sim.car import make_car_sim_backend

        be = make_car_sim_backend(image_size=tuple(image_size), camera="front", control_hz=hz,
                                  **backend_kwargs)
    else:
        track = backend_kwargs.pop("track", None)
        if reward_source is None and backend_kwargs.get("tracker") is None:
            raise ConfigError("backend='real' has no privileged track position: pass tracker=URL (an "
                              "external pose tracker's stream, docs/car.md) for lap progress, or "
                              "reward_source=... (e.g. a success classifier) for reward and success")
        if track is not None and backend_kwargs.get("tracker") is None:
            raise ConfigError("track= on backend='real' is the track laid out in the pose tracker's "
                              "frame: pass tracker=URL too")
        if port is None:
            raise ConfigError("backend='real' needs port=... (the car's serial port, e.g. /dev/ttyUSB0)")
        if privileged_obs:
            raise ConfigError("privileged_obs=True needs backend='sim' (no track position on hardware); "
                              "train with privileged='critic' so the policy runs without it")
        if isinstance(camera, dict) and set(camera) != {"front"}:
            raise ConfigError(f"camera names {sorted(camera)}: the car has one camera, 'front' "
                              "(the name its sim-trained policies know)")
        from robolearn.drivers.real import make_car_backend

        be = make_car_backend(port=port, camera=camera, image_size=tuple(image_size), **backend_kwargs)
    def make_task(b):
        t = CarLap(b, control_hz=hz, end_on_collision=end_on_collision, collision_penalty=collision_penalty,
                   track=track)
        t.make_reset_controller = car_reset_controller
        return t

    if not isinstance(practice, bool):
        raise ConfigError(f"practice={practice!r}: pass True or False")
    env = build_env(
        be, make_task,
        obs=obs, render_mode=render_mode, reward_source=reward_source, privileged_obs=privileged_obs,
        reset_mode=reset_mode, reset_on_failure=reset_on_failure, reset_timeout=reset_timeout,
        reset_prompt=reset_prompt, reset_attempts=reset_attempts)
    if practice:
        from robolearn.resets.practice import AutonomousPractice

        try:
            env = AutonomousPractice(env)
        except BaseException:
            env.close()
            raise
    return env
