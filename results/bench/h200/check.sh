#!/usr/bin/env bash
# The GPU check of 2026-11-26 (results/bench/README.md, "GPU: one H200"): the GPU test tier on the current main, then auto's batch-1 latency on cuda.
# Run on a GPU machine without network from the repository root with .whl copied there (bash experiments/gpu_offline.sh pack makes it); writes under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, pytorch_lightning as pl; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'lightning', pl.__version__)"
  nproc; git log -1 --format='commit %H' 2>/dev/null; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
SECONDS=0
timeout 300 python3 -m pytest -m gpu -p no:cacheprovider -n 4 -q -rs --junitxml="$OUT/gpu-tier.xml" > "$OUT/gpu-tier.log" 2>&1
echo "tier exit: $? after ${SECONDS}s"; tail -n 25 "$OUT/gpu-tier.log"
left=$((400 - SECONDS))
if [ $left -gt 90 ]; then
  timeout $((left - 20)) python3 results/bench/auto_gpu_latency.py "$OUT/auto_gpu_latency_h200.csv" 50 4 > "$OUT/auto_gpu_latency.log" 2>&1
  echo "latency exit: $?"; tail -n 10 "$OUT/auto_gpu_latency.log"
fi
