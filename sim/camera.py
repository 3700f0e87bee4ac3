"""A named MuJoCo camera as a `robolearn.robot.Camera`, generic over any model + data.

The GL context is created on the first `read()`, so envs that never look at pixels never pay
for one, and `close()` releases it (a `mujoco.Renderer` left to the garbage collector at exit
prints EGL errors).
"""
from __future__ import annotations

import mujoco
import numpy as np

from robolearn.errors import ConfigError
from robolearn.robot import Frame


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
            self._renderer = mujoco.Renderer(self.model, self.shape[0], self.shape[1])
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
