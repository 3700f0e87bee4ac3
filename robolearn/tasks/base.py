"""What a task is: reward source + success test + termination + reset controller over a backend.

A task never cares whether its backend is simulated: it reads `backend.robot` through the
`Arm`/`Car` protocols and uses `backend.privileged` (the simulator) only for ground-truth
rewards and resets, falling back to a `RewardSource` / reset controller on hardware.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from robolearn.robot import Backend


@dataclass
class Evaluation:
    """The task's verdict on the current state, computed once per step."""

    reward: float
    success: bool
    terminated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class Task(ABC):
    """Subclass per task. The env calls: reset -> (apply_action -> advance -> state/evaluate)*."""

    #: control rate used when the user does not pass `control_hz`
    default_control_hz: float = 10.0
    #: the episode ends exactly when the task succeeds, so with a `reward_source` the source's
    #: success (not the simulator's) ends it
    success_terminates: bool = False

    def __init__(self, backend: Backend, control_hz: float):
        self.backend = backend
        self.control_hz = float(control_hz)

    # Subclasses set both in __init__ (their shapes depend on options such as action_mode).
    _action_space: gym.spaces.Box
    _state_space: gym.spaces.Box
    # Set by tasks that can report simulator-only truth (cube pose, track position); None: none.
    _privileged_space: gym.spaces.Box | None = None

    @property
    def action_space(self) -> gym.spaces.Box:
        """Always Box(-1, 1): the env documents the mapping to physical commands."""
        return self._action_space

    @property
    def state_space(self) -> gym.spaces.Box:
        """float32 vector space of the `state` observation."""
        return self._state_space

    @property
    def privileged_space(self) -> gym.spaces.Box | None:
        """float32 vector space of the `privileged` observation (simulator-only truth), or None
        when the task has none or its backend is not a simulator."""
        return self._privileged_space if self.backend.privileged is not None else None

    def privileged_observation(self) -> np.ndarray:
        """The float32 `privileged` observation: simulator truth a critic may read in training
        but a deployed policy never sees (it does not exist on hardware)."""
        raise NotImplementedError(f"{type(self).__name__} has no privileged observation")

    @abstractmethod
    def reset(self, rng: np.random.Generator) -> dict[str, Any]:
        """Teleport reset (sim only): write the start state, sample the goal; return info."""

    #: builds this task's physical reset controller, `factory(task)`; handed in by the
    #: composition layer (robolearn/compose/envs.py), since the controllers live in
    #: robolearn/resets, a layer above the tasks
    make_reset_controller = None

    def reset_controller(self):
        """The physical reset controller (a `robolearn.resets.supervisor.ResetController`):
        what `reset_mode="physical"` runs before `start_episode`."""
        if self.make_reset_controller is None:
            raise NotImplementedError(f"{type(self).__name__} has no physical reset controller "
                                      "(make the env with gymnasium.make, which attaches one)")
        return self.make_reset_controller(self)

    def start_episode(self, rng: np.random.Generator) -> dict[str, Any]:
        """Physical reset, after the controller ran: begin an episode from the world as it is
        (re-read the robot, sample the goal, zero the counters); return info. Moves nothing."""
        raise NotImplementedError(f"{type(self).__name__} has no physical reset")

    @abstractmethod
    def apply_action(self, action: np.ndarray) -> dict[str, Any]:
        """Send the normalised action to the backend (no time passes); return info to report
        (e.g. whether a workspace bound was hit)."""

    @abstractmethod
    def state(self) -> np.ndarray:
        """The float32 `state` observation: only what hardware measures (joints, kinematics,
        odometry/IMU) and the task's own goal, identical on every backend."""

    @abstractmethod
    def evaluate(self) -> Evaluation:
        """Reward, success and termination for the state just reached."""

    def scripted_controller(self, env) -> "Controller":
        """A scripted policy that solves this task (used by tests, teleop and demo collection)."""
        raise NotImplementedError(f"{type(self).__name__} has no scripted controller")


class Controller(Protocol):
    """A scripted policy (IK reacher, pure pursuit, ...). Teleop and tests reuse these, so
    they act from the env itself (they may use privileged sim state) not only from obs."""

    def reset(self) -> None: ...
    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray: ...
