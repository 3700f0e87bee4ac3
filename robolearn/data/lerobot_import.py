"""Import a LeRobot dataset (codebase v3.0, or v2.1) as a robolearn dataset of arm demonstrations.

Why: demos recorded with LeRobot (an SO-100/SO-101 leader driving the follower) become prior
data for RLPD (`--demos`), reward-model frames and calibrate-sim episodes: everything
downstream reads the robolearn dataset this writes with `DatasetWriter`.

What is read (the layout `lerobot_export.py` writes and LeRobot 0.4's `LeRobotDataset.save_episode`
writes): meta/info.json (version, fps, features with names), the frames of every
data/chunk-*/file-*.parquet (v2.1: data/chunk-*/episode_*.parquet), grouped by `episode_index`
and ordered by `frame_index`. Only `observation.state` and `action` (or the features named with
`state_feature` / `action_feature`) and an optional goal feature are used; cameras are not
imported (a state-only dataset; see docs/datasets.md).

Mapping (LeRobot SO-100 names -> the robolearn arm, `robolearn.sim.arm.JOINT_NAMES` order):
`shoulder_pan.pos`, `shoulder_lift.pos`, `elbow_flex.pos`, `wrist_flex.pos`, `wrist_roll.pos`
-> q (rad); `gripper.pos` -> the gripper servo angle. Names are matched, not positions, so any
order is accepted; other entries (e.g. `*.vel`) are ignored; a missing or extra `.pos` joint
is an error naming both lists. Units (`units`, the caller must say: LeRobot does not record it):
- "deg": joints in degrees about robolearn's zero (lerobot `use_degrees=True`); gripper 0..100
- "m100": joints -100..100 over the joint's range (lerobot's default `RANGE_M100_100`), mapped
  onto the arm model's range [lower, upper]; gripper 0..100
- "rad": joints and gripper in radians (robolearn's own units)
The gripper's 0..100 (lerobot's `RANGE_0_100`) is mapped linearly onto closed..open.
Assumption: the LeRobot calibration's zero (deg) or range (m100) is robolearn's; a dataset of an
arm calibrated otherwise needs its offsets applied first.

Per episode of N LeRobot frames (observation t paired with action t, the leader's absolute
joint targets) the import replays the frames through the task's own code (`ArmTask` over a
backend whose arm reports the recorded joints): state t = `task.state()` (q, dq by backward
differences at the dataset fps with dq_0 = 0, gripper, ee = `kin.fk(q)`, the task's goal
extras); action t = what moves the task's *commanded* target onto LeRobot's target t
(`joint`: (target - q_cmd) / 0.15 rad; `ee_delta`: (fk(target) - ee_cmd) / 0.025 m; gripper
absolute), clipped to [-1, 1] (clipped entries are counted and reported), applied with
`task.apply_action` so q_cmd integrates as in the env; reward / success / termination =
`task.evaluate()` at frame t+1. The episode ends at the first success (the env terminates
there) or after N-1 steps (the last frame's action has no next observation).

The goal of ArmReach is not in a LeRobot dataset: `goal="hindsight"` (default) takes the
episode's final grasp-point position (fk of the last frame: the reach the demonstrator made);
`goal=FEATURE` reads a 3-vector (m, world frame) from that feature of the episode's first frame.

Nothing is left behind on failure: episodes are written into a hidden sibling folder that is
renamed to `out` at the end, and removed if anything fails.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np

from robolearn.errors import ConfigError, DatasetError

UNITS = ("deg", "m100", "rad")
READ_VERSIONS = ("v3.0", "v2.1")
GRIPPER = "gripper"
#: env IDs the import can build states for, and their task names
TASK_OF_ENV = {"robolearn/ArmReach-v0": "reach"}
TASK_KWARGS = ("action_mode", "control_hz")
#: joint values may sit this far outside the model's range (rad) before the import refuses
RANGE_SLACK = 0.1


@dataclass
class ImportReport:
    out: str
    source_version: str
    fps: int
    units: str
    goal: str
    episodes: int = 0
    steps: int = 0
    successes: int = 0
    frames_read: int = 0
    clipped_entries: int = 0          # action entries outside [-1, 1] before clipping
    clipped_steps: int = 0            # steps with at least one such entry
    robot_type: str | None = None
    warnings: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"imported {self.episodes} episodes / {self.steps} steps ({self.successes} successful) from "
                f"LeRobot {self.source_version} at {self.fps} fps, units {self.units}, goal {self.goal}; "
                f"{self.clipped_steps} step(s) had actions clipped to [-1, 1] ({self.clipped_entries} "
                f"entries) -> {self.out}")


def is_lerobot_dataset(path: str | os.PathLike) -> bool:
    return (Path(path) / "meta" / "info.json").is_file()


# ------------------------------------------------------------------------------- reading
def read_info(root: Path) -> dict:
    path = root / "meta" / "info.json"
    if not path.is_file():
        raise DatasetError(f"{root}: not a LeRobot dataset (no meta/info.json)")
    try:
        info = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: unreadable ({exc})") from None
    version = info.get("codebase_version")
    if version not in READ_VERSIONS:
        raise DatasetError(f"{path}: codebase_version {version!r} is not one robolearn reads "
                           f"({list(READ_VERSIONS)}); convert it with lerobot's converter first")
    for key in ("fps", "features"):
        if key not in info:
            raise DatasetError(f"{path}: has no {key!r}")
    return info


def read_frames(root: Path, columns: list[str]) -> dict[str, np.ndarray]:
    """The named columns of every frame, in data-file path order (v3.0 and v2.1 alike)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted((root / "data").glob("*/*.parquet"))
    if not files:
        raise DatasetError(f"{root}: no data/chunk-*/*.parquet files")
    tables = []
    for f in files:
        try:
            t = pq.read_table(f)
        except Exception as exc:  # truncated file, not parquet
            raise DatasetError(f"{f}: unreadable parquet ({exc})") from None
        missing = [c for c in columns if c not in t.column_names]
        if missing:
            raise DatasetError(f"{f}: lacks columns {missing} (has {t.column_names})")
        tables.append(t.select(columns))
    table = pa.concat_tables(tables)
    out = {}
    for c in columns:
        col = table.column(c).combine_chunks()
        if pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type):
            out[c] = np.asarray(col.to_pylist(), np.float64)
        else:
            out[c] = col.to_numpy(zero_copy_only=False)
    return out


def _joint_columns(info: dict, feature: str, joint_names: tuple[str, ...], root: Path) -> list[int]:
    """Indices of the arm joints + gripper inside `feature`'s vector, by name."""
    ft = info["features"].get(feature)
    if ft is None:
        raise DatasetError(f"{root}: has no feature {feature!r} (features: {sorted(info['features'])}); "
                           "name the joint-position feature with --state-feature / --action-feature")
    names = ft.get("names")
    if isinstance(names, dict):  # older LeRobot: {"motors": [...]}
        names = next(iter(names.values()), None)
    shape = ft.get("shape") or [0]
    want = list(joint_names) + [GRIPPER]
    want_lr = [f"{n}.pos" for n in want]
    if not names:
        raise DatasetError(f"{root}: feature {feature!r} has no joint names (shape {shape}); robolearn "
                           f"needs them to map joints: expected {want_lr}")
    bare = [n[:-4] if n.endswith(".pos") else n for n in names]
    pos = [b for n, b in zip(names, bare) if n.endswith(".pos") or b in want]
    missing = [w for w in want if w not in bare]
    extra = [n for n, b in zip(names, bare) if (n.endswith(".pos") and b not in want)]
    if missing or extra or len(pos) != len(want):
        raise DatasetError(
            f"{root}: feature {feature!r} names {len(pos)} joint position(s) {names} but the "
            f"robolearn arm (SO-100, 5 joints + gripper) has {len(want)}: {want_lr}"
            + (f"; missing {[f'{m}.pos' for m in missing]}" if missing else "")
            + (f"; not on this arm {extra}" if extra else "")
            + ". This dataset is of another robot: import only SO-100/SO-101 arm datasets")
    return [bare.index(w) for w in want]


def _to_rad(values: np.ndarray, units: str, spec) -> tuple[np.ndarray, np.ndarray]:
    """(N, 6) LeRobot joint + gripper values -> q (N, 5) rad, gripper (N,) rad."""
    arm, grip = values[:, :5], values[:, 5]
    g_lo, g_hi = float(spec.gripper_closed), float(spec.gripper_open)
    if units == "rad":
        return arm.copy(), grip.copy()
    if units == "deg":
        q = np.deg2rad(arm)
    else:  # m100: -100..100 over [lower, upper]
        q = spec.lower + (arm + 100.0) / 200.0 * (spec.upper - spec.lower)
    return q, g_lo + grip / 100.0 * (g_hi - g_lo)


def _check_range(q: np.ndarray, g: np.ndarray, spec, units: str, what: str, root: Path) -> None:
    lo, hi = spec.lower - RANGE_SLACK, spec.upper + RANGE_SLACK
    bad = np.flatnonzero((q < lo).any(0) | (q > hi).any(0))
    problems = [f"{spec.joint_names[j]} reaches {np.rad2deg(q[:, j]).min():.1f}..{np.rad2deg(q[:, j]).max():.1f} "
                f"deg, range {np.rad2deg(spec.lower[j]):.1f}..{np.rad2deg(spec.upper[j]):.1f}" for j in bad]
    g_lo, g_hi = min(spec.gripper_closed, spec.gripper_open), max(spec.gripper_closed, spec.gripper_open)
    span = g_hi - g_lo
    if g.min() < g_lo - 0.1 * span or g.max() > g_hi + 0.1 * span:
        problems.append(f"gripper reaches {g.min():.3f}..{g.max():.3f} rad, range {g_lo:.3f}..{g_hi:.3f}")
    if problems:
        raise DatasetError(f"{root}: {what} read as --units {units} leaves the arm's joint range: "
                           + "; ".join(problems) + f". Check --units (one of {list(UNITS)}) and the "
                           "calibration the dataset was recorded with")


def _make_task(env_id: str, env_kwargs: dict):
    """The env's task over a replay arm (reports what `arm.state` holds)."""
    from robolearn.robot import Backend
    from robolearn.sim.arm import arm_spec, load_arm_model
    from robolearn.tasks.arm import TASK_CLASSES

    if env_id not in TASK_OF_ENV:
        raise ConfigError(f"--env {env_id}: importing LeRobot demos is supported for {sorted(TASK_OF_ENV)} "
                          "(the cube tasks need the cube pose, which a LeRobot dataset does not hold)")
    unknown = sorted(set(env_kwargs) - set(TASK_KWARGS))
    if unknown:
        raise ConfigError(f"env keywords {unknown} do not apply to a LeRobot import; it takes {list(TASK_KWARGS)}")

    class ReplayArm:
        spec = arm_spec(load_arm_model())
        state = None

        def read(self):
            return self.state

        def command(self, q, gripper):
            pass

        def advance(self, dt):
            return 0.0

        def safe_stop(self):
            pass

        def close(self):
            pass

    arm = ReplayArm()
    task = TASK_CLASSES[TASK_OF_ENV[env_id]](Backend(robot=arm, kind="real"), **env_kwargs)
    return task, arm


# ------------------------------------------------------------------------------- import
def import_lerobot(src: str | os.PathLike, out: str | os.PathLike, *, units: str,
                   env_id: str = "robolearn/ArmReach-v0", env_kwargs: dict | None = None,
                   goal: str = "hindsight", state_feature: str = "observation.state",
                   action_feature: str = "action", overwrite: bool = False) -> ImportReport:
    """Write the robolearn dataset of LeRobot dataset `src` to `out`; return the report."""
    from robolearn.data.dataset_writer import DatasetWriter
    from robolearn.robot import ArmState
    from robolearn.sim.arm_workspace import EE_STEP, JOINT_STEP

    root = Path(src)
    out = Path(out)
    if units not in UNITS:
        raise ConfigError(f"--units {units!r}: say which units the dataset's joint positions are in: "
                          f"{list(UNITS)} (LeRobot does not record it)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise DatasetError(f"{out}: exists and is not empty; choose another --out or pass --overwrite")
    info = read_info(root)
    task, arm = _make_task(env_id, dict(env_kwargs or {}))
    spec = arm.spec
    fps = info["fps"]
    if abs(float(fps) - task.control_hz) > 1e-6:
        raise DatasetError(f"{root}: recorded at {fps} fps but {env_id} runs at control_hz={task.control_hz:g}; "
                           f"record at {task.control_hz:g} fps or import with --env-kw control_hz={fps} "
                           "(and train with the same)")
    s_idx = _joint_columns(info, state_feature, spec.joint_names, root)
    a_idx = _joint_columns(info, action_feature, spec.joint_names, root)
    cols = [state_feature, action_feature, "episode_index", "frame_index"]
    if goal != "hindsight":
        ft = info["features"].get(goal)
        if ft is None:
            raise DatasetError(f"{root}: --goal {goal!r} is not a feature (features: {sorted(info['features'])}); "
                               "use --goal hindsight or name a 3-vector feature holding the target (m)")
        if list(ft.get("shape", [])) != [3]:
            raise DatasetError(f"{root}: --goal feature {goal!r} has shape {ft.get('shape')}, expected [3] (x, y, z in m)")
        cols.append(goal)
    frames = read_frames(root, cols)
    n_state = frames[state_feature].shape[1] if frames[state_feature].ndim == 2 else 0
    for feat, idx in ((state_feature, s_idx), (action_feature, a_idx)):
        if frames[feat].ndim != 2 or frames[feat].shape[1] <= max(idx):
            raise DatasetError(f"{root}: column {feat!r} has shape {frames[feat].shape[1:]}, fewer entries than "
                               f"its {len(info['features'][feat].get('names') or [])} names")
    del n_state
    ep_ids = frames["episode_index"].astype(np.int64)
    episodes = sorted(set(ep_ids.tolist()))
    if not episodes:
        raise DatasetError(f"{root}: has no frames")

    report = ImportReport(out=str(out), source_version=info["codebase_version"], fps=int(fps), units=units,
                          goal=goal, frames_read=int(len(ep_ids)), robot_type=info.get("robot_type"))
    rt = str(info.get("robot_type") or "")
    if rt and not rt.lower().startswith(("so100", "so101", "so-100", "so-101", "so_10", "robolearn", "arm")):
        report.warnings.append(f"robot_type {rt!r} is not an SO-100/SO-101: the joint names match, so the import "
                               "goes on, assuming the same kinematics")

    # Compute every episode before writing anything.
    g_lo, g_span = float(spec.gripper_closed), float(spec.gripper_open - spec.gripper_closed)
    rng = np.random.default_rng(0)
    built = []
    for e in episodes:
        sel = np.flatnonzero(ep_ids == e)
        sel = sel[np.argsort(frames["frame_index"][sel], kind="stable")]
        if len(sel) < 2:
            report.warnings.append(f"episode {e}: {len(sel)} frame(s), skipped (a step needs two)")
            continue
        q, g = _to_rad(frames[state_feature][sel][:, s_idx], units, spec)
        qt, gt = _to_rad(frames[action_feature][sel][:, a_idx], units, spec)
        _check_range(q, g, spec, units, f"episode {e} {state_feature}", root)
        _check_range(qt, gt, spec, units, f"episode {e} {action_feature}", root)
        dq = np.zeros_like(q)
        dq[1:] = np.diff(q, axis=0) * float(fps)
        if goal == "hindsight":
            target = task.kin.fk(q[-1]).copy()
        else:
            target = np.asarray(frames[goal][sel[0]], np.float64)
        arm.state = ArmState(q=q[0], dq=dq[0], gripper=float(g[0]), stamp=0.0)
        task.start_episode(rng)
        task.goal = target
        obs = [task.state().copy()]
        acts, rew, succ, term = [], [], [], []
        for t in range(len(sel) - 1):
            a = np.empty(task.action_space.shape, np.float64)
            if task.action_mode == "joint":
                a[:5] = (qt[t] - task.q_cmd) / JOINT_STEP
            else:
                a[:3] = (task.kin.fk(qt[t]) - task.ee_cmd) / EE_STEP
            a[-1] = 2.0 * (gt[t] - g_lo) / g_span - 1.0
            over = np.abs(a) > 1.0 + 1e-6
            report.clipped_entries += int(over.sum())
            report.clipped_steps += int(over.any())
            a = np.clip(a, -1.0, 1.0).astype(np.float32)
            task.apply_action(a)
            arm.state = ArmState(q=q[t + 1], dq=dq[t + 1], gripper=float(g[t + 1]), stamp=(t + 1) / fps)
            st = task.state().copy()
            ev = task.evaluate()
            acts.append(a)
            obs.append(st)
            rew.append(float(ev.reward))
            succ.append(bool(ev.success))
            term.append(bool(ev.terminated))
            if ev.terminated:
                break
        built.append((e, target, obs, acts, rew, succ, term))
    if not built:
        raise DatasetError(f"{root}: no episode has two or more frames")

    # Write into a hidden sibling, then rename: `out` is absent or complete.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.import-", dir=out.parent))
    obs_space = gym.spaces.Dict({"state": task.state_space})
    try:
        with DatasetWriter(tmp, env_id=env_id, control_hz=task.control_hz, observation_space=obs_space,
                           action_space=task.action_space, obs_mode="state",
                           extra={"source": {"format": "lerobot", "path": str(root.resolve()),
                                             "codebase_version": info["codebase_version"], "units": units,
                                             "goal": goal, "robot_type": info.get("robot_type"),
                                             "action_mode": task.action_mode}}) as w:
            for e, target, obs, acts, rew, succ, term in built:
                with w.start_episode(seed=None, device="lerobot", task=env_id, backend="lerobot",
                                     reset_info={"goal": target},
                                     extra={"lerobot_episode": int(e), "goal": target}) as ep:
                    ep.add_reset({"state": obs[0]})
                    for t, a in enumerate(acts):
                        ep.add_step(a, {"state": obs[t + 1]}, rew[t], term[t], False, info={"success": succ[t]})
                    ep.finish()
                report.episodes += 1
                report.steps += len(acts)
                report.successes += int(succ[-1])
        (tmp / ".lock").unlink(missing_ok=True)
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report
