#!/bin/bash
# GPU regression check of main's CUDA path (issue 25 item 4), one call.
set -u
SRC=$PWD
export PYTHONUNBUFFERED=1 MUJOCO_GL=disable
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/rl "$SRC" || exit 1
python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))' | tee -a "$OUT/gpu.txt"
git -C "$SRC" log -1 --oneline | tee -a "$OUT/gpu.txt"
cd /tmp
PYTHONPATH=/tmp/rl:/tmp/site timeout 330 python3 -m pytest -q -p no:cacheprovider -c "$SRC/pyproject.toml" --rootdir "$SRC" \
  "$SRC/tests/test_device_training.py" "$SRC/tests/test_speed_paths.py" -k "cuda or device" -s 2>&1 | grep -v Warning | tee "$OUT/tests.log"
PYTHONPATH=/tmp/rl:/tmp/site timeout 200 python3 -c '
import json, sys
from robolearn.policies.speed_gpu import measure_gpu_speed
out = measure_gpu_speed(device="cuda", steps=600)
json.dump(out, open(sys.argv[1], "w"), indent=2)' "$OUT/bench_gpu.json" 2>&1 | grep -v Warning | tee "$OUT/bench.log"
