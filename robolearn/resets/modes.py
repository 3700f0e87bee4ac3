"""How an episode's start state is produced: `teleport` (sim writes the state) or `physical`.

Why two modes: teleporting is the fast, exact sim default, but a real robot can only be reset by
acting. `physical` makes the sim behave like hardware (the world carries over between episodes
and only the task's reset controller moves things), so a reset-free pipeline can be tested in
sim before it meets a robot. On a real backend `physical` is the only mode.
"""
from __future__ import annotations

from robolearn.errors import ConfigError

RESET_MODES = ("teleport", "physical")
#: what happens when a physical reset fails and no one fixes it
ON_FAILURE = ("prompt", "raise", "continue")


def resolve_reset_mode(reset_mode: str | None, backend_kind: str) -> str:
    """`None` -> the backend's default (teleport in sim, physical on hardware); check the rest."""
    if reset_mode is None:
        return "physical" if backend_kind == "real" else "teleport"
    if reset_mode not in RESET_MODES:
        raise ConfigError(f"reset_mode={reset_mode!r}: choose one of {', '.join(map(repr, RESET_MODES))} "
                          "(teleport: the simulator writes the start state; physical: a reset "
                          "controller drives the robot there)")
    if reset_mode == "teleport" and backend_kind != "sim":
        raise ConfigError("reset_mode='teleport' needs the simulator: a real robot cannot be "
                          "teleported. Use reset_mode='physical' (the default on hardware)")
    return reset_mode


def check_on_failure(on_failure: str) -> str:
    if on_failure not in ON_FAILURE:
        raise ConfigError(f"reset_on_failure={on_failure!r}: choose one of {', '.join(map(repr, ON_FAILURE))} "
                          "(prompt: hold the robot and ask the operator; raise: stop with an error; "
                          "continue: start the episode where the world is and count the failure)")
    return on_failure
