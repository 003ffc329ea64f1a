#!/usr/bin/env bash
# The GPU work on a GPU machine without network and without a copy of the data (torch installed; jobs with a
# time limit, the machine possibly gone between jobs): the GPU test tier,
# experiments/grids/multi30k.yaml and the CUDA bench rows, in short steps that each leave their results in
# the folder $OUT names (default: .offline-out/ in the checkout).
#
#   here, with network, once:   bash experiments/gpu_offline.sh pack [--ct2]
#       .whl/  wheels of what such a machine usually lacks (sacremoses, submitit) for its Python; --ct2 adds
#              CTranslate2's (41 MB, which can make the copy too large to send; its 4.x wheel
#              needs CUDA 12's cuBLAS, which a CUDA-13-only machine lacks; without it the grid times no
#              CTranslate2 baseline). pack prints what the checkout, .whl and .data weigh together
#       .data/ a copy of the Multi30k files the grid reads (git-ignored; never committed)
#   there (with .whl and .data copied into the checkout; run the steps one after another on the same machine):
#       bash experiments/gpu_offline.sh start        # install, grid started in the background, then the GPU tier
#       bash experiments/gpu_offline.sh wait [SEC]   # until the grid ends or SEC (default 500) pass; packs results
#       bash experiments/gpu_offline.sh bench        # bench decode (sweep, CUDA graphs), bench train, auto's batch-1 latency
#       bash experiments/gpu_offline.sh train-forms  # the training step's forms (eager, fused, compiled), bf16, at the
#                                                    # GPU grid's size and Transformer-base's
#       bash experiments/gpu_offline.sh checks       # one step (its caps add up to 540 s): the GPU tier's CUDA-graph, step-form and
#                                                    # validation-RNG tests, a whole run's speed in each step form against
#                                                    # the bare step's, the compiled training step of CTC and the
#                                                    # DA-Transformer, speculative decoding's bounds under auto, the
#                                                    # DA-Transformer's rows of the decode bench under auto; every
#                                                    # step's output in one checks.log
#   here again: tar xzf multi30k.tgz -C results/   (results/multi30k/ without checkpoints or distilled targets)
#
# The grid's results live in .offline-results/ on the machine (git-ignored, never copied back), so a later
# step on the same machine finds them; every step copies what it has to $OUT, so a machine lost
# mid-grid loses only the checkpoints (a fresh machine starts the grid again). A step whose command fails
# makes the call exit 1 and is listed in $OUT/failed.txt.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/.offline-out}"  # made by the step that writes into it
results="${OFFLINE_RESULTS:-$root/.offline-results}"
grid_log="$results/grid.log"
grid_rc="$results/grid.rc"  # the grid's exit status, written when it ends
wheels="sacremoses==0.2.0 submitit==1.5.4"  # what such a machine lacked, at the versions CI installs
ct2_wheel="ctranslate2==4.8.5"  # only with pack --ct2

pack() {
  local py="${GPU_PYTHON_VERSION:-3.12}" want="$wheels"
  case "${1:-}" in
    "") ;;
    --ct2) want="$wheels $ct2_wheel" ;;
    *) echo "pack: unknown argument '$1' (only --ct2)" >&2; return 2 ;;
  esac
  rm -rf .whl && mkdir -p .whl .data
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl $want || { echo "pack: pip download failed" >&2; return 1; }
  local data="${MULTI30K:-$root/../shared/data/multi30k}"
  [ -f "$data/train.en" ] || { echo "pack: no Multi30k in $data (atnat data multi30k DIR fetches it)" >&2; return 1; }
  rm -rf .data/multi30k && cp -r "$data" .data/multi30k
  du -sh .whl .data
  local tracked; tracked=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  local carried; carried=$(du -sb .whl .data | awk '{s += $1} END {print s + 0}')
  echo "pack: the checkout's tracked files, .whl and .data weigh $(( (tracked + carried) >> 20 )) MiB together" \
    "(what is copied to the GPU machine)"
}

install() {
  [ -f "$results/.installed" ] && return 0
  python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl \
    || { echo "start: installing the carried wheels failed (carry .whl: bash experiments/gpu_offline.sh pack)" >&2; return 1; }
  python3 -m pip install --quiet --no-index --disable-pip-version-check --no-deps --no-build-isolation -e . \
    || { echo "start: pip install -e . failed" >&2; return 1; }
  # the grid files read ../shared/data/multi30k: point it at the carried copy
  [ -f .data/multi30k/train.en ] || { echo "start: no .data/multi30k (carry .data)" >&2; return 1; }
  [ -f ../shared/data/multi30k/train.en ] || { mkdir -p ../shared/data && ln -sfn "$root/.data/multi30k" ../shared/data/multi30k; }
  mkdir -p "$results" && touch "$results/.installed"
}

machine() {
  { date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import torch, pytorch_lightning as pl; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'lightning', pl.__version__)"
    nproc; } > "$out/machine.txt" 2>&1
}

atnat=(python3 -m atnat.experiments.cli)  # the machine's python3 holds torch; its bin may not be on PATH
# Why CTranslate2 cannot decode on this GPU (atnat's own check, a trial decode: its 4.x wheel needs
# CUDA 12's cuBLAS, which a CUDA-13-only machine lacks); prints nothing where it can
ct2_gpu_problem() {
  python3 -c "from atnat.experiments.modelfiles.ct2 import device_problem; print(device_problem('cuda') or '')"
}
lanes="${OFFLINE_DEVICES:-0,0,0}"  # the grid's lanes: three cells at once on GPU 0 (the timing phase runs alone after them)

grid_running() { pgrep -f "atnat.experiments.cli run experiments/grids/multi30k.yaml" >/dev/null; }

failures=()
note() {  # note STATUS WHAT: a step that failed is said at once and fails the whole call at its end
  [ "$1" = 0 ] || { failures+=("$2 (exit $1)"); echo "FAILED: $2 (exit $1)"; }
}
finish() {
  [ ${#failures[@]} = 0 ] && return 0
  printf 'failed: %s\n' "${failures[@]}" | tee "$out/failed.txt"
  return 1
}

pack_results() {  # results/multi30k/ without checkpoints or distilled targets (runs/*/distill/), plus the grid's log
  [ -d "$results/multi30k" ] || return 0
  tar czf "$out/multi30k.tgz" -C "$results" --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.pt' \
    --exclude='checkpoints' --exclude='distill' --exclude='distilled*' multi30k
  cp "$grid_log" "$out/grid.log" 2>/dev/null || true
  ls -la "$out"
}

start() {
  install || return 1
  machine
  local problem; problem="$(ct2_gpu_problem)"
  if [ -n "$problem" ]; then  # this copy of the tree only (it never comes back): the report records the setting
    echo "$problem: the grid runs with speed.ct2_baseline: false" | tee "$out/ct2.txt"
    sed -i 's/ct2_baseline: true/ct2_baseline: false/' experiments/grids/multi30k.yaml
  fi
  if ! grid_running && [ ! -f "$results/multi30k/report.md" ]; then
    rm -f "$grid_rc"
    setsid nohup bash -c 'log="$1" rc="$2"; shift 2; "$@" > "$log" 2>&1 < /dev/null; echo $? > "$rc"' _ "$grid_log" "$grid_rc" \
      "${atnat[@]}" run experiments/grids/multi30k.yaml --devices "$lanes" --results "$results" > /dev/null 2>&1 < /dev/null &
    echo "grid started in the background (log: $grid_log)"
  fi
  # the tier beside the grid: its tiny models load the GPU little; --timeout keeps the call inside its limit
  timeout "${TIER_TIMEOUT:-400}" python3 -m pytest -m gpu -p no:cacheprovider -n 4 -q -rs --junitxml="$out/gpu-tier.xml" 2>&1 \
    | tee "$out/gpu-tier.log" | tail -n 40
  note "${PIPESTATUS[0]}" "the GPU tier"
  wait_grid "${START_WAIT:-0}"
  finish
}

wait_grid() {
  local until=$((SECONDS + ${1:-500}))
  while grid_running && [ $SECONDS -lt $until ]; do sleep 10; done
  tail -n 5 "$grid_log"
  if grid_running; then
    echo "grid still running: call wait again"
  else  # a grid that failed (or left no status: killed) fails the call
    local rc; rc="$(cat "$grid_rc" 2>/dev/null || echo "none recorded")"
    echo "grid finished (exit $rc): $(tail -n 1 "$grid_log")"
    note "$rc" "the grid"
  fi
  pack_results
}

train_forms() {  # which training step form is fastest on this GPU (models/step_forms.py), bf16, MFU by name; 530 s
  install || return 1
  machine
  ! grid_running || { echo "train-forms: the grid is still running; time nothing beside it" >&2; return 1; }
  local size peer=()
  python3 -c "import transformers" 2>/dev/null && peer=(--peer) || echo "train-forms: no transformers here: no Marian rows"
  for size in grid base; do  # eager and fused (and the peer) first, compiled apart: a timeout loses one file only
    timeout 110 "${atnat[@]}" bench train --device cuda --precision bf16 --forms eager,fused "${peer[@]}" \
      --size "$size" --steps 10 --out "$out/train_forms_${size}_gpu.csv" 2>&1 | tail -n 12
    note "${PIPESTATUS[0]}" "bench train, eager and fused, $size size"
    timeout 155 "${atnat[@]}" bench train --device cuda --precision bf16 --forms eager,compiled --size "$size" \
      --steps 10 --out "$out/train_compiled_${size}_gpu.csv" 2>&1 | tail -n 6
    note "${PIPESTATUS[0]}" "bench train, compiled, $size size"
  done
  finish
}

bench() {  # its time limits add up to 530 s, inside a call's 600 with the install
  install || return 1
  machine
  ! grid_running || { echo "bench: the grid is still running; time nothing beside it" >&2; return 1; }
  # CTranslate2's rows are skipped, with the reason, where it cannot decode on the GPU
  timeout 250 "${atnat[@]}" bench decode --device cuda --compile reduce-overhead --sweep \
    --strategies greedy,beam5,parallel,mask-predict-4,mask-predict-10,ctc --out "$out/sweep_gpu.csv" 2>&1 | tail -n 30
  note "${PIPESTATUS[0]}" "bench decode sweep"
  timeout 150 "${atnat[@]}" bench train --device cuda --out "$out/train_gpu.csv" 2>&1 | tail -n 20
  note "${PIPESTATUS[0]}" "bench train"
  timeout 130 python3 results/bench/auto_gpu_latency.py "$out/auto_gpu_latency.csv" 50 4 2>&1 | tail -n 8
  note "${PIPESTATUS[0]}" "auto's batch-1 latency"
  finish
}

checks() {  # the newest GPU code's checks and measurements, most wanted first, in one step whose time
  # limits add up to 540 s; every step's output goes to one checks.log (one file to bring back)
  install || return 1
  machine
  ! grid_running || { echo "checks: the grid is still running; time nothing beside it" >&2; return 1; }
  local log="$out/checks.log"
  timeout 90 python3 -m pytest -m gpu -p no:cacheprovider -n 0 -q -rs tests/test_gpu.py \
    -k "graph or step_counters or validation" 2>&1 | tee -a "$log" | tail -n 15
  note "${PIPESTATUS[0]}" "the GPU tier's graph, step-counter and validation tests"
  # a whole run's speed against the bare step's, eager and compiled: the GPU grid's AT cell, 300 steps each, each
  # form's run and its bare step stopped at 60 s (2 forms x 2 x 60 s: within the step's 250 s, a slow eager form
  # leaves the compiled one its time); a SIGTERM from the timeout stops the run in progress too
  timeout -k 5 250 python3 results/bench/real_run_forms.py "$out/real_run_forms_gpu.csv" experiments/grids/multi30k.yaml \
    at-s1 300 eager,compiled grid 60 2>&1 | tee -a "$log" | tail -n 8
  note "${PIPESTATUS[0]}" "a real run's speed in each step form"
  # CTC's and the DA-Transformer's compiled step, their alignment loops now eager inside it: measured again
  timeout 110 "${atnat[@]}" bench train --device cuda --precision bf16 --forms eager,compiled --size base \
    --decoders ctc,dag --steps 10 --out "$out/train_compiled_base_ctc_dag_gpu.csv" 2>&1 | tee -a "$log" | tail -n 6
  note "${PIPESTATUS[0]}" "bench train, compiled, CTC and DA-Transformer"
  timeout 45 python3 results/multi30k-families/speculative_bounds.py "$out/speculative_bounds_auto_gpu.csv" auto 3 cuda bounds \
    2>&1 | tee -a "$log" | tail -n 6
  note "${PIPESTATUS[0]}" "speculative bounds under auto"
  timeout 45 "${atnat[@]}" bench decode --device cuda --engine auto --no-hf --no-ct2 --strategies greedy,dag-lookahead,dag-viterbi \
    --out "$out/decode_auto_dag_gpu.csv" 2>&1 | tee -a "$log" | tail -n 12
  note "${PIPESTATUS[0]}" "bench decode, auto, the DA-Transformer's rows"
  finish
}

case "${1:-}" in
  start | wait | bench | train-forms | checks) mkdir -p "$out" ;;
esac
case "${1:-}" in
  pack) pack "${2:-}" ;;
  start) start ;;
  wait) wait_grid "${2:-500}"; finish ;;
  bench) bench ;;
  train-forms) train_forms ;;
  checks) checks ;;
  *) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 2 ;;  # the header above
esac
