"""Servo calibration: where each joint's zero is, which way it turns, how far it may go.

Why: servos report raw ticks (0..4095 per turn) that depend on how each horn was mounted;
the `Arm` protocol speaks radians with the sim arm's zero and sign. This file is the only
place that knows the mapping, so a re-assembled arm needs a new JSON file, not new code.

    rad   = direction * (ticks - offset) * 2*pi / 4096
    ticks = offset + direction * rad * 4096 / (2*pi)

File format (JSON, one entry per servo, the gripper included, keyed by joint name):

    {"format": "robolearn.servo_calibration/1",
     "servos": {"shoulder_pan": {"id": 1, "offset": 2048, "direction": 1,
                                 "min": 1024, "max": 3072}, ...}}

Optional per servo: "homing_offset": the value of the servo's Homing_Offset register (Feetech
address 31: present = raw - value; Dynamixel address 20: present = raw + value) the ticks above
are relative to, e.g. the one LeRobot's calibration wrote (drivers/lerobot_calibration.py).
Ticks are always the servo's *present position*; without the field the register is left as it is.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from robolearn.drivers.feetech import MAX_TICK, TICK_CENTER, TICKS_PER_REV
from robolearn.errors import ConfigError
from robolearn.jsonfile import read_json

FORMAT = "robolearn.servo_calibration/1"
RAD_PER_TICK = 2 * math.pi / TICKS_PER_REV
LIMIT_MARGIN_RAD = 0.05     # calibrated tick range = joint range + this on both sides


@dataclass(frozen=True)
class JointCalibration:
    id: int                 # servo bus ID
    offset: int             # ticks at 0 rad
    direction: int          # +1 or -1: sign of ticks per positive radian
    min: int                # lowest allowed tick (also written to the servo's angle limit)
    max: int                # highest allowed tick
    homing_offset: int | None = None   # the servo's own Homing_Offset register these ticks were read
                                       # with (None: whatever it holds); ServoArm writes it when it differs

    def to_rad(self, ticks) -> np.ndarray:
        return self.direction * (np.asarray(ticks, dtype=np.float64) - self.offset) * RAD_PER_TICK

    def to_ticks(self, rad) -> np.ndarray:
        return np.rint(self.offset + self.direction * np.asarray(rad, dtype=np.float64) / RAD_PER_TICK).astype(np.int64)

    @property
    def rad_range(self) -> tuple[float, float]:
        a, b = float(self.to_rad(self.min)), float(self.to_rad(self.max))
        return (min(a, b), max(a, b))


def calibrate_zero_pose(zero_ticks: dict[str, int], ids: dict[str, int], directions: dict[str, int],
                        lower: dict[str, float], upper: dict[str, float],
                        margin: float = 0.05) -> "Calibration":
    """The calibration procedure's arithmetic: with the arm held in the sim's zero pose, the
    present ticks are the offsets; `directions` come from moving each joint by hand in its
    positive sense; the tick range is the joint range (rad) plus `margin` rad on both sides.
    Names are in joint order (gripper last)."""
    servos = {}
    for name, zero in zero_ticks.items():
        d = int(directions[name])
        a = zero + d * (lower[name] - margin) / RAD_PER_TICK
        b = zero + d * (upper[name] + margin) / RAD_PER_TICK
        lo, hi = int(math.floor(min(a, b))), int(math.ceil(max(a, b)))
        if lo < 0 or hi > MAX_TICK:
            raise ConfigError(f"joint {name!r}: its range needs ticks {lo}..{hi}, outside 0..{MAX_TICK}; "
                              "re-mount the horn nearer the middle of its travel (or set the "
                              "servo's homing offset) and calibrate again")
        servos[name] = JointCalibration(id=int(ids[name]), offset=int(zero), direction=d, min=lo, max=hi)
    return Calibration(servos)


@dataclass(frozen=True)
class Calibration:
    servos: dict[str, JointCalibration]     # insertion order = joint order, gripper last

    @property
    def names(self) -> list[str]:
        return list(self.servos)

    @property
    def ids(self) -> list[int]:
        return [c.id for c in self.servos.values()]

    def __getitem__(self, name: str) -> JointCalibration:
        return self.servos[name]

    @classmethod
    def default(cls, names, lower, upper, first_id: int = 1) -> "Calibration":
        """Horns mounted at the centre tick, positive direction, range from the given limits."""
        servos = {}
        for i, (name, lo, hi) in enumerate(zip(names, lower, upper)):
            lo_t = max(0, int(math.floor(TICK_CENTER + lo / RAD_PER_TICK)))
            hi_t = min(MAX_TICK, int(math.ceil(TICK_CENTER + hi / RAD_PER_TICK)))
            servos[name] = JointCalibration(id=first_id + i, offset=TICK_CENTER, direction=1,
                                            min=lo_t, max=hi_t)
        return cls(servos)

    # ------------------------------------------------------------------------- file I/O
    def to_dict(self) -> dict:
        def entry(c: JointCalibration) -> dict:
            d = asdict(c)
            if d["homing_offset"] is None:
                del d["homing_offset"]
            return d
        return {"format": FORMAT, "servos": {n: entry(c) for n, c in self.servos.items()}}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(path)                      # never leave a half-written calibration
        return path

    @classmethod
    def load(cls, path: str | Path, required: list[str] | None = None) -> "Calibration":
        path = Path(path)
        raw = read_json(path, ConfigError,
                        f"calibration file {path} not found: run the calibration procedure "
                        "(docs/drivers.md) or pass calibration=None for defaults",
                        corrupt="run the calibration again or restore the file")
        return cls.from_dict(raw, source=str(path), required=required)

    @classmethod
    def from_dict(cls, raw, source: str = "<dict>", required: list[str] | None = None) -> "Calibration":
        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"calibration {source}: key {key!r} {why}")

        if not isinstance(raw, dict):
            raise bad("<root>", "must be a JSON object")
        if raw.get("format") != FORMAT:
            raise bad("format", f"is {raw.get('format')!r}, expected {FORMAT!r}")
        servos_raw = raw.get("servos")
        if not isinstance(servos_raw, dict) or not servos_raw:
            raise bad("servos", "must be a non-empty object of joint name -> servo entry")
        servos: dict[str, JointCalibration] = {}
        for name, entry in servos_raw.items():
            where = f"servos.{name}"
            if not isinstance(entry, dict):
                raise bad(where, "must be an object with id, offset, direction, min, max")
            vals = {}
            for k in ("id", "offset", "direction", "min", "max"):
                v = entry.get(k)
                if isinstance(v, bool) or not isinstance(v, int):
                    raise bad(f"{where}.{k}", f"must be an integer, got {v!r}")
                vals[k] = v
            if entry.get("homing_offset") is not None:
                h = entry["homing_offset"]
                if isinstance(h, bool) or not isinstance(h, int) or abs(h) > 1_044_479:
                    raise bad(f"{where}.homing_offset", f"must be an integer register value, got {h!r}")
                vals["homing_offset"] = h
            extra = set(entry) - set(vals) - {"homing_offset"}
            if extra:
                raise bad(f"{where}", f"has unknown field(s) {sorted(extra)}")
            if not 0 <= vals["id"] <= 253:
                raise bad(f"{where}.id", f"= {vals['id']} must be in 0..253")
            if vals["direction"] not in (1, -1):
                raise bad(f"{where}.direction", f"= {vals['direction']} must be 1 or -1")
            for k in ("offset", "min", "max"):
                if not 0 <= vals[k] <= MAX_TICK:
                    raise bad(f"{where}.{k}", f"= {vals[k]} must be in 0..{MAX_TICK} ticks")
            if vals["min"] >= vals["max"]:
                raise bad(f"{where}.min", f"= {vals['min']} must be below max = {vals['max']}")
            servos[name] = JointCalibration(**vals)
        ids = [c.id for c in servos.values()]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise bad("servos", f"uses servo ID(s) {dup} more than once")
        if required is not None:
            missing = [n for n in required if n not in servos]
            if missing:
                raise bad("servos", f"lacks joint(s) {missing} (needed: {list(required)})")
            servos = {n: servos[n] for n in required}   # joint order of the arm spec
        return cls(servos)
