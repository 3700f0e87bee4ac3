#!/bin/bash
# Camera observations in `robolearn train` on CUDA: host batches vs the device mirror (drq, ArmReach pixels).
set -u
SRC=$PWD
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
E=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json; [ -f $E ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$E
export PYTHONUNBUFFERED=1 MUJOCO_GL=egl
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/rl "$SRC" || exit 1
cd /tmp
export PYTHONPATH=/tmp/rl:/tmp/site
timeout 60 python3 -c '
import time, gymnasium as gym, robolearn.sim
e = gym.make("robolearn/ArmReach-v0", obs="pixels"); o, _ = e.reset(seed=0)
t = time.perf_counter(); n = 200
for _ in range(n): o, *_ = e.step(e.action_space.sample())
print("render check:", {k: v.shape for k, v in o.items()}, f"{n / (time.perf_counter() - t):.0f} env steps/s")' 2>&1 | grep -v Warning | tee "$OUT/render.log" || exit 1
timeout 420 python3 "$SRC/docs/bench/gpu-train/measure.py" --label pixels --out "$OUT/train_pixels.json" \
  --env robolearn/ArmReach-v0 --obs pixels --algo drq --starts 1000 --steps-utd1 1000 --steps-utd20 100 \
  --replay both 2>&1 | grep -v Warning | tee "$OUT/measure.log"
