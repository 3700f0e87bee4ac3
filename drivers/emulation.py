"""Emulated hardware in one call: device emulator + reality + cameras as MJPEG over HTTP.

Why: tests, benches and fine-tuning sessions need "a robot" to point `backend="real"` at:

    with start_emulator("arm", reality="hard") as robot:
        env = gym.make("robolearn/ArmReach-v0", backend="real", port=robot.port,
                       camera=robot.camera_urls["front"], obs="pixels")

`start_emulator(..., subprocess=True)` runs `robolearn emulate` in its own process instead
(a real device is another CPU, not threads of the learner). `CameraStreamer` renders the
plant's cameras from a private copy of its state (taken under the emulator's physics lock)
at a fixed rate, only while someone watches the stream (plus one frame per camera at
start-up, so a client's first frame never waits for the GL context).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess as sp
import sys
import threading
import time
from dataclasses import dataclass, field

from robolearn.drivers.mjpeg_server import MjpegServer
from robolearn.drivers.reality import CameraReality, Reality, load_reality
from robolearn.errors import ConfigError, DeviceError

TRUTH_ROUTE = "/truth.json"


def model_cameras(model) -> tuple[str, ...]:
    """Named cameras of a MuJoCo model (the sim's camera keys)."""
    return tuple(model.camera(i).name for i in range(model.ncam) if model.camera(i).name)


class CameraStreamer:
    """Render `names` of (model, data) at cfg.fps / cfg.size and publish them on `server`.
    Also serves /truth.json and, for a model with a cube, the operator's hand
    (POST /hand/place_cube, drivers/emulated_hand.py)."""

    def __init__(self, model, data, lock: threading.Lock, cfg: CameraReality, names=None,
                 host: str = "127.0.0.1", port: int = 0, seed: int = 0):
        from robolearn.drivers.emulated_hand import HAND_ROUTE, EmulatedHand

        self.model, self.data, self.lock, self.cfg = model, data, lock, cfg
        self.names = tuple(names) if names is not None else model_cameras(model)
        if not self.names:
            raise ConfigError("the emulated robot's model has no named camera to stream")
        has_cube = any(model.joint(i).name == "cube" for i in range(model.njnt))
        self.hand = EmulatedHand(model, data, lock, seed=seed) if has_cube else None
        self.server = MjpegServer(self.names, host=host, port=port, quality=cfg.quality,
                                  json_routes={TRUTH_ROUTE: self.truth},
                                  post_routes={HAND_ROUTE: self.hand.place_cube} if self.hand else None)
        self.frames = 0
        self.truth_stalls = 0                    # fault: /truth.json answered late this often
        self._truth_late_until = -1.0
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="camera-streamer", daemon=True)
        self._thread.start()

    @property
    def urls(self) -> dict[str, str]:
        return self.server.urls()

    @property
    def truth_url(self) -> str:
        return f"http://{self.server.host}:{self.server.port}{TRUTH_ROUTE}"

    @property
    def hand_url(self) -> str | None:
        """POST here to have the operator's hand put the cube back (None: no cube)."""
        from robolearn.drivers.emulated_hand import HAND_ROUTE

        return f"http://{self.server.host}:{self.server.port}{HAND_ROUTE}" if self.hand else None

    def truth(self) -> dict:
        """The plant's true poses (every named body and site), as a motion-capture system in a
        lab would give them: for session reports only, never for a learner or a policy."""
        late = self._truth_late_until - time.monotonic()
        if late > 0:                              # fault: answer late (then the poses of now)
            self._stop.wait(late)
        m, d = self.model, self.data
        with self.lock:
            bodies = {m.body(i).name: [*map(float, d.xpos[i]), *map(float, d.xquat[i])]
                      for i in range(m.nbody) if m.body(i).name}
            sites = {m.site(i).name: list(map(float, d.site_xpos[i]))
                     for i in range(m.nsite) if m.site(i).name}
            t = float(d.time)
        out = {"time": t, "bodies": bodies, "sites": sites}
        if self.hand is not None:  # every move of the operator's hand is on the record
            out["hand_moves"] = self.hand.moves
        return out

    def _run(self):
        import mujoco

        try:
            h, w = self.cfg.size
            g = self.model.vis.global_
            g.offheight, g.offwidth = max(g.offheight, h), max(g.offwidth, w)
            d = mujoco.MjData(self.model)
            renderer = mujoco.Renderer(self.model, h, w)
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
            period = 1.0 / self.cfg.fps
            first = True                         # every stream gets one frame at start-up, so a
            t_next = time.monotonic()            # client's first read never waits on GL set-up
            while not self._stop.is_set():
                watched = [n for n in self.names if first or self.server.clients(n) > 0]
                first = False
                if watched:
                    with self.lock:              # a consistent physics state, copied fast
                        mujoco.mj_copyData(d, self.model, self.data)
                    mujoco.mj_forward(self.model, d)
                    for name in watched:
                        renderer.update_scene(d, camera=name)
                        self.server.publish(name, renderer.render())
                    self.frames += 1
                t_next += period
                now = time.monotonic()
                if now > t_next:                 # rendering slower than fps: no catch-up burst
                    t_next = now
                self._stop.wait(t_next - now if t_next > now else 0.0)
            renderer.close()
        except Exception as exc:  # noqa: BLE001 - surfaced by close()
            self.error = exc

    def stall(self, stalled: bool = True) -> None:
        """Fault injection: the camera keeps its connections but stops sending frames."""
        self.server.stall(stalled)

    def stall_truth(self, seconds: float) -> None:
        """Fault injection: /truth.json answers nothing for `seconds` (0 ends it), then answers,
        as a starved emulator or a loaded machine does (requests made meanwhile are answered late)."""
        seconds = float(seconds)
        self.truth_stalls += int(seconds > 0)
        self._truth_late_until = time.monotonic() + seconds if seconds > 0 else -1.0

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.server.close()
        if self.error is not None:
            raise RuntimeError(f"camera streamer crashed: {self.error!r}") from self.error


def make_emulator(kind: str, reality=None, seed: int = 0, plant: str = "sim", protocol: str = "feetech",
                  **kwargs):
    """The arm or car emulator (not started) on the MuJoCo plant with `reality` applied.

    `protocol` picks the arm's servo bus: feetech (STS/SCS) or dynamixel (Protocol 2.0)."""
    from robolearn.drivers.reality import RealArmPlant, RealCarPlant

    r = load_reality(reality)
    if kind == "arm":
        from robolearn.drivers.emulator_arm import ArmEmulator, make_plant

        inner = make_plant(plant, kwargs.pop("physics_hz", 200.0))
        if not hasattr(inner, "sim") and reality is not None:
            raise ConfigError("a reality needs the MuJoCo plant (--plant sim)")
        p = RealArmPlant(inner, r, seed=seed) if hasattr(inner, "sim") else inner
        if protocol == "dynamixel":
            from robolearn.drivers.dynamixel_emulator import DynamixelArmEmulator as ArmEmulator
        elif protocol != "feetech":
            raise ConfigError(f"protocol {protocol!r}: choose feetech or dynamixel")
        return ArmEmulator(plant=p, seed=seed, **kwargs)
    if kind == "car":
        from robolearn.drivers.emulator_car import CarEmulator, make_plant

        inner = make_plant(plant)
        if not hasattr(inner, "model") and reality is not None:
            raise ConfigError("a reality needs the MuJoCo plant (--plant sim)")
        p = RealCarPlant(inner, r, seed=seed) if hasattr(inner, "model") else inner
        return CarEmulator(plant=p, seed=seed, **kwargs)
    raise ConfigError(f"emulator kind {kind!r}: choose arm or car")


def plant_model_data(emu):
    """(model, data) of the MuJoCo plant behind an emulator ((None, None) for a stand-in)."""
    p = emu.plant
    sim = getattr(p, "sim", p)   # arm plants keep the ArmSim in .sim; car plants are/wrap CarSim
    return getattr(sim, "model", None), getattr(sim, "data", None)


@dataclass
class EmulatedRobot:
    """A running emulated robot: `port` for the driver, `camera_urls` {sim camera name: URL}."""

    kind: str
    port: str
    camera_urls: dict = field(default_factory=dict)
    truth_url: str | None = None      # the plant's true poses (reports only; see CameraStreamer.truth)
    hand_url: str | None = None       # the operator's hand (emulated human prompts only)
    tracker_url: str | None = None    # car: the external pose tracker's stream (drivers/tracker_emulator.py)
    faults_url: str | None = None     # POST /faults, GET /faults.json (drivers/fault_control.py)
    reality: Reality | None = None
    emulator: object = None           # in-process: the ArmEmulator / CarEmulator
    streamer: CameraStreamer | None = None
    tracker: object = None            # in-process: the EmulatedTracker
    process: sp.Popen | None = None   # subprocess mode

    def close(self) -> None:
        errors = []
        if self.tracker is not None:
            self.tracker.close()
        if self.streamer is not None:
            try:
                self.streamer.close()
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
        if self.emulator is not None:
            self.emulator.close()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except sp.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if errors:
            raise errors[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def start_tracker(emu, reality: Reality, seed: int = 0, port: int = 0):
    """The car's external pose tracker (drivers/tracker_emulator.py), watching `emu`'s plant."""
    from robolearn.drivers.tracker_emulator import EmulatedTracker

    if not hasattr(emu.plant, "pose"):
        raise ConfigError("the pose tracker watches a car plant with a pose (sim or bicycle)")
    return EmulatedTracker(emu.plant, emu.physics_lock, reality.tracker, port=port, seed=seed)


def start_emulator(kind: str, reality=None, cameras: bool = True, seed: int = 0,
                   camera_port: int = 0, subprocess: bool = False, startup_timeout: float = 30.0,
                   tracker: bool = True, **emulator_kwargs) -> EmulatedRobot:
    """Start an emulated arm/car with `reality` (None, "mild", "hard", a TOML path, a dict or
    a Reality) and, with `cameras`, its model's cameras on http://127.0.0.1:PORT/NAME.mjpg.
    A car also gets its external pose tracker (`tracker_url`; reality `[tracker]` table), and
    `faults_url` (POST /faults) on the camera server, or on the tracker's without cameras."""
    if subprocess:
        if emulator_kwargs:
            raise ConfigError(f"options {sorted(emulator_kwargs)} only work in-process")
        return _start_subprocess(kind, reality, cameras, seed, camera_port, startup_timeout)
    from robolearn.drivers.fault_control import FAULTS_ROUTE, FaultControl

    r = load_reality(reality)
    emu = make_emulator(kind, r, seed=seed, **emulator_kwargs)
    streamer = trk = None
    try:
        if cameras:
            model, data = plant_model_data(emu)
            if model is None:
                raise ConfigError("cameras need the MuJoCo plant (plant='sim')")
            streamer = CameraStreamer(model, data, emu.physics_lock, r.camera, port=camera_port, seed=seed)
        if kind == "car" and tracker:
            trk = start_tracker(emu, r, seed=seed)
        emu.start()
    except BaseException:
        for part in (streamer, trk):
            if part is not None:
                part.close()
        emu.plant.close()
        emu.dev.close()
        raise
    server = streamer.server if streamer is not None else trk
    faults_url = None
    if server is not None:
        FaultControl(emu, streamer, trk).install(server)
        faults_url = f"http://{server.host}:{server.port}{FAULTS_ROUTE}"
    return EmulatedRobot(kind=kind, port=emu.path, camera_urls=streamer.urls if streamer else {},
                         truth_url=streamer.truth_url if streamer else None,
                         hand_url=streamer.hand_url if streamer else None,
                         tracker_url=trk.url if trk is not None else None, faults_url=faults_url,
                         reality=r, emulator=emu, streamer=streamer, tracker=trk)


def _start_subprocess(kind, reality, cameras, seed, camera_port, timeout) -> EmulatedRobot:
    argv = [sys.executable, "-m", "robolearn.cli", "emulate", kind, "--seed", str(seed)]
    if reality is not None:
        if not isinstance(reality, (str, os.PathLike)):
            raise ConfigError("subprocess=True takes reality as a TOML path or 'mild' / 'hard'")
        argv += ["--reality", str(reality)]
    argv += ["--camera-port", str(camera_port)] if cameras else ["--no-cameras"]
    from robolearn.processes import die_with_parent

    p = sp.Popen(argv, stdout=sp.PIPE, stderr=sp.PIPE, text=True,
                 env=dict(os.environ, PYTHONUNBUFFERED="1"), preexec_fn=die_with_parent())
    lines: list[str] = []

    def read_two():
        for _ in range(2):
            line = p.stdout.readline()
            if not line:
                return
            lines.append(line.strip())

    t = threading.Thread(target=read_two, daemon=True)
    t.start()
    t.join(timeout)
    if len(lines) < 2 or not lines[0].startswith("/dev/"):
        p.kill()
        _, err = p.communicate(timeout=5)
        raise DeviceError(f"`{' '.join(argv[2:])}` did not start within {timeout:.0f} s: "
                          f"{(err or '').strip()[-500:]}")
    info = json.loads(lines[1])
    return EmulatedRobot(kind=kind, port=lines[0], camera_urls=info.get("cameras", {}),
                         truth_url=info.get("truth"), hand_url=info.get("hand"),
                         faults_url=info.get("faults"), tracker_url=info.get("tracker"),
                         reality=load_reality(reality), process=p)
