#!/bin/bash
# After the device-replay default change: CUDA tests + `robolearn train --device cuda` on camera obs.
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
timeout 200 python3 -m pytest -q -p no:cacheprovider -c "$SRC/pyproject.toml" --rootdir "$SRC" \
  "$SRC/tests/test_device_training.py" "$SRC/tests/test_speed_paths.py" -k "cuda or device" 2>&1 | grep -v Warning | tail -4 | tee "$OUT/tests.log"
for mode in default --no-device-replay; do
  flag=$mode; [ $mode = default ] && flag=
  timeout 150 python3 -m robolearn.cli train --env robolearn/ArmReach-v0 --obs pixels --algo drq --device cuda $flag \
    --steps 3000 --learning-starts 1000 --eval-every 0 --eval-episodes 2 --no-video --no-progress --out /tmp/px_$mode > /tmp/px_$mode.log 2>&1
  python3 -c "import json,sys; s=json.load(open('/tmp/px_$mode/summary.json')); print('$mode', {k: s[k] for k in ('batches','updates','updates_per_s','wall_s')})" 2>&1 | tee -a "$OUT/train.log" || tail -5 /tmp/px_$mode.log
done
