"""Checkpoints for the car's recovery from one slow demonstration lap (a dataset episode).

Why dead reckoning: a real car has no track pose, but its state carries wheel speed and the
IMU's yaw rate; integrating them over one slow lap gives the lap's shape in the car's start
frame, and points every `spacing` metres along it are the checkpoints the recovery heads for
(FastRLAP uses GPS waypoints the same way). Slow laps keep wheel slip, and so drift, small.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from robolearn.errors import DatasetError

#: CarLap state entries used (see robolearn.tasks.car.STATE_LABELS)
SPEED, GYRO_Z = 0, 7


def dead_reckon(state: np.ndarray, control_hz: float, x0: float = 0.0, y0: float = 0.0,
                yaw0: float = 0.0) -> np.ndarray:
    """(N, 3) poses (x, y, yaw) from CarLap `state` rows (speed, yaw rate) at `control_hz`."""
    state = np.asarray(state, dtype=np.float64)
    if state.ndim != 2 or state.shape[1] <= GYRO_Z:
        raise DatasetError(f"car states of shape {state.shape}: need CarLap `state` rows "
                           f"(at least {GYRO_Z + 1} entries: speed ... gyro_z)")
    dt = 1.0 / float(control_hz)
    yaw = yaw0 + np.concatenate(([0.0], np.cumsum(state[:-1, GYRO_Z] * dt)))
    v = state[:, SPEED]
    x = x0 + np.concatenate(([0.0], np.cumsum(v[:-1] * np.cos(yaw[:-1]) * dt)))
    y = y0 + np.concatenate(([0.0], np.cumsum(v[:-1] * np.sin(yaw[:-1]) * dt)))
    return np.stack([x, y, yaw], axis=1)


def checkpoints_from_path(xy: np.ndarray, spacing: float = 1.0) -> np.ndarray:
    """Points every `spacing` metres of arclength along a driven path, (M, 2)."""
    xy = np.asarray(xy, dtype=np.float64)[:, :2]
    seg = np.hypot(*np.diff(xy, axis=0).T)
    s = np.concatenate(([0.0], np.cumsum(seg)))
    if s[-1] < 2 * spacing:
        raise DatasetError(f"the demonstration path is {s[-1]:.2f} m long: drive at least one lap")
    marks = np.arange(0.0, s[-1], spacing)
    return np.stack([np.interp(marks, s, xy[:, 0]), np.interp(marks, s, xy[:, 1])], axis=1)


def checkpoints_from_dataset(root: str | Path, episode: int = 0, spacing: float = 1.0,
                             start_pose: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> np.ndarray:
    """Checkpoints from episode `episode` of a recorded CarLap dataset (`robolearn record`),
    expressed in the frame where the recording started at `start_pose` (x, y, yaw)."""
    from robolearn.data.dataset import Dataset

    ds = Dataset(root)
    if "state" not in ds.observation_space.spaces:
        raise DatasetError(f"{root}: the dataset has no `state` observations (record with obs=state or both)")
    states = ds.episode(episode).observations(["state"])["state"]
    poses = dead_reckon(states, ds.control_hz, *start_pose)
    return checkpoints_from_path(poses[:, :2], spacing)
