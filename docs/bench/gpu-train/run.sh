#!/bin/bash
# The GPU call behind results.json, in one run on one card (see README.md).
#   OLD: a checkout of the code before the Trainer drew on the device (main at 5236dc6)
#   NEW: a checkout of this change;  WHL: wheels of what the GPU image lacks;  OUT: results
# Both are installed side by side; measure.py runs against each in turn, then the GPU bench.
set -u
OLD=${OLD:?} NEW=${NEW:?} WHL=${WHL:?} OUT=${OUT:?}
# that image has no libEGL and nothing here renders (state observations, no video)
export PYTHONUNBUFFERED=1 MUJOCO_GL=disable
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHL"/*.whl || exit 1
for v in old new; do
    src=$OLD; [ $v = new ] && src=$NEW
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
        --target /tmp/$v "$src" || exit 1
done
python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))' | tee -a "$OUT/gpu.txt"
cd /tmp  # not a source folder: `robolearn` must come from the installed trees
# 1) the CUDA tests of this change (and the graph == eager tests beside them)
PYTHONPATH=/tmp/new:/tmp/site timeout 300 python3 -m pytest -q -p no:cacheprovider \
    -c "$NEW/pyproject.toml" --rootdir "$NEW" "$NEW/tests/test_device_training.py" \
    "$NEW/tests/test_speed_paths.py" -k "cuda or device" -s 2>&1 | tee "$OUT/tests.log"
# 2) the train loop's updates/s, old code then new code, same card, same call
for v in old new; do
    PYTHONPATH=/tmp/$v:/tmp/site timeout 240 python3 "$NEW/docs/bench/gpu-train/measure.py" \
        --label $v --out "$OUT/train_$v.json" 2>&1 | grep -v Warning | tee -a "$OUT/measure.log"
done
# 3) the update-speed bench (docs/bench/gpu): device replay + graph vs eager host replay vs SB3
[ "${SKIP_BENCH:-0}" = 1 ] && exit 0
PYTHONPATH=/tmp/new:/tmp/site timeout 240 python3 -c '
import json, sys
from robolearn.policies.speed_gpu import measure_gpu_speed
out = measure_gpu_speed(device="cuda", steps=600)
json.dump(out, open(sys.argv[1], "w"), indent=2)' "$OUT/bench_gpu.json" 2>&1 | tee -a "$OUT/measure.log"
