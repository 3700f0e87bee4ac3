"""A named MuJoCo camera as a `robolearn.robot.Camera`, generic over any model + data.

The GL context is created on the first `read()`, so envs that never look at pixels never pay
for one, and `close()` releases it (a `mujoco.Renderer` left to the garbage collector at exit
prints EGL errors). `new_renderer` is how every sim module makes one: the renderers still open
at interpreter exit are closed by an `atexit` hook while their GL context still exists, so a
script that never calls `env.close()` exits without EGL tracebacks either.
"""
from __future__ import annotations

import atexit
import weakref

import mujoco
import numpy as np

from robolearn.errors import ConfigError
from robolearn.robot import Frame


_LIVE: "weakref.WeakSet[mujoco.Renderer]" = weakref.WeakSet()


_HOOKED = False


def new_renderer(model: mujoco.MjModel, height: int, width: int) -> mujoco.Renderer:
    """A `mujoco.Renderer` that is closed at interpreter exit if nobody closed it before."""
    global _HOOKED
    r = mujoco.Renderer(model, height, width)
    _LIVE.add(r)
    if not _HOOKED:
        # registered after the first GL context exists, i.e. after mujoco.egl registers its own
        # eglTerminate: atexit runs hooks last-in first-out, so ours runs while EGL still works
        atexit.register(close_all_renderers)
        _HOOKED = True
    return r


def close_all_renderers() -> None:
    """Release every renderer still open (atexit runs before the GL/EGL modules are torn down)."""
    for r in list(_LIVE):
        try:
            r.close()
        except Exception:  # noqa: BLE001 - exiting anyway; never print at exit
            pass
    _LIVE.clear()


class SimCamera:
    """Renders camera `name` of `model` from `data` at `shape = (H, W, 3)`."""

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, name: str,
                 image_size: tuple[int, int] = (84, 84), shadows: bool = False):
        cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
        if cam_id < 0:
            names = [model.camera(i).name for i in range(model.ncam)]
            raise ConfigError(f"camera {name!r} is not in the model; it has {names}")
        try:
            h, w = (int(v) for v in image_size)
        except (TypeError, ValueError):
            raise ConfigError(f"image_size={image_size!r}: give (height, width) in pixels") from None
        if not (8 <= h <= model.vis.global_.offheight and 8 <= w <= model.vis.global_.offwidth):
            raise ConfigError(f"image_size={image_size!r}: height must be in [8, "
                              f"{model.vis.global_.offheight}] and width in [8, {model.vis.global_.offwidth}]")
        self.model, self.data, self.name = model, data, name
        self.shadows = bool(shadows)
        self.shape = (h, w, 3)
        self._cam_id = cam_id
        self._renderer: mujoco.Renderer | None = None

    def read(self) -> Frame:
        if self._renderer is None:
            self._renderer = new_renderer(self.model, self.shape[0], self.shape[1])
            # shadow maps carry state from the previous frame (EGL, MuJoCo 3.17): with them the
            # same sim state can render differently, which breaks seeded determinism
            self._renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self.shadows
            # the first frame of a new context differs by a grey level in a few pixels (GL
            # state warming up); throw it away so equal states always give equal images
            self._renderer.update_scene(self.data, camera=self._cam_id)
            self._renderer.render()
        self._renderer.update_scene(self.data, camera=self._cam_id)
        image = self._renderer.render()
        return Frame(image=np.ascontiguousarray(image), stamp=float(self.data.time))

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
