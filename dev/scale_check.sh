#!/usr/bin/env bash
# What CPU tests cannot check: engine=ray with vLLM actors on GPUs, a real verl main_ppo step with
# vLLM rollouts, and throughput (docs/scale.md, section 6). Run on a machine with GPUs; paste the
# output (every "RESULT {...}" line) into the issue.
#
#   dev/scale_check.sh --model /models/Qwen3-0.6B --gpus 8 --data /data/math_train12k/train.jsonl.gz \
#       --verl-python .venv-verl/bin/python [--device h200] [--out runs/scale-check] [--dry-run]
#
# --dry-run prints every command and runs only `coevolve plan` (with --device it needs no GPU), so it
# works on a CPU machine without GPU packages. The evaluation reads gsm8k from $COEVOLVE_DATA.
# Steps: 1 environment, 2 `coevolve plan` of the layout, 3 difficulty-style sampling with one
# in-process vLLM engine and then with engine=ray (start-up, per-call overhead, tokens/s), 4 a
# 2-step grpo run with backend=verl (and engine=ray for its evaluation), with its step times and
# rollout tokens/s. A multi-node variant follows at the end as commented steps.
set -euo pipefail

DRY=0
MODEL=""
GPUS=""
DATA=""
VERL_PY=""
DEVICE=""
OUT=""
PY="${PYTHON:-python}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --model) MODEL="$2"; shift ;;
    --gpus) GPUS="$2"; shift ;;
    --data) DATA="$2"; shift ;;
    --verl-python) VERL_PY="$2"; shift ;;
    --device) DEVICE="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "scale_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "$MODEL" ] || [ -z "$DATA" ]; then
  echo "scale_check.sh: --model and --data are required (see --help)" >&2; exit 2
fi
VERL_PY="${VERL_PY:-$PY}"
OUT="${OUT:-${TMPDIR:-/tmp}/coevolve-scale-check-$(date +%Y%m%d-%H%M%S)}"
if [ -z "$GPUS" ]; then
  if [ "$DRY" = 1 ]; then GPUS=8; else GPUS="$("$PY" -c 'import torch; print(torch.cuda.device_count())')"; fi
fi
DEV_ARGS=()
[ -n "$DEVICE" ] && DEV_ARGS=(--device "$DEVICE")

run() {  # print, then run unless --dry-run
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [ "$DRY" = 0 ]; then "$@"; fi
}
run_cpu() {  # print and run, also with --dry-run when --device names the GPU (no GPU needed then)
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [ "$DRY" = 0 ] || [ -n "$DEVICE" ]; then "$@"; fi
}
step() { printf '\n=== %s\n' "$*"; }

RAY=(engine=ray engine.ray.actor_engine=vllm engine.gpu_memory_utilization=0.7)
VERL=(backend=verl "backend.verl.n_gpus_per_node=$GPUS" "backend.verl.python=$VERL_PY")

step "1. environment"
run "$PY" -c 'import torch; n = torch.cuda.device_count(); print("torch", torch.__version__, "cuda", torch.version.cuda, "GPUs", n); assert n >= 1, "no CUDA GPU visible"'
run "$PY" -c 'import vllm, ray; print("vllm", vllm.__version__, "ray", ray.__version__)'
run "$VERL_PY" -c 'import verl, vllm, ray; print("verl", verl.__version__, "vllm", vllm.__version__, "ray", ray.__version__)'
run nvidia-smi --query-gpu=index,name,memory.total --format=csv

step "2. coevolve plan of this layout (exit 1 = something does not fit: read the advice)"
run_cpu "$PY" -m coevolve.cli plan grpo "model.path=$MODEL" "data.source=$DATA" "${RAY[@]}" "${VERL[@]}" \
  --gpus "$GPUS" "${DEV_ARGS[@]}" || echo "(plan exit $?)"

step "3. difficulty-style sampling: one in-process vLLM engine, then the Ray pool of vLLM actors"
SAMPLE=(dev/scale_check.py sample --model "$MODEL" --data "$DATA" --prompts 256 --n 8 --max-new-tokens 1024)
run "$PY" "${SAMPLE[@]}" engine=vllm engine.gpu_memory_utilization=0.7
run "$PY" "${SAMPLE[@]}" "${RAY[@]}"

step "4. grpo for 2 steps with backend=verl (evaluation through engine=ray)"
run "$PY" -m coevolve.cli run grpo "model.path=$MODEL" "data.source=$DATA" "${RAY[@]}" "${VERL[@]}" \
  solver.steps=2 solver.prompts_per_step=32 solver.group_size=8 sampling.max_new_tokens=1024 \
  "eval.benches=[gsm8k]" eval.limit=64 eval.max_new_tokens=1024 eval.every_round=false \
  --run-dir "$OUT/grpo-verl"
run "$PY" dev/scale_check.py run-summary "$OUT/grpo-verl"

step "done: paste the RESULT lines above (and $OUT/grpo-verl/summary.json) into the issue"

# ---- multi-node variant (two nodes; run by hand, in this order) --------------------------------
# Same environments, paths and Ray version on both nodes (docs/scale.md, sections 1 and 4).
#   head:   ray start --head --port=6379
#   node 2: ray start --address=HEAD_IP:6379
#   head:   python -c 'import ray; ray.init(address="auto"); print(ray.cluster_resources())'   # GPU: 16
# The pool keeps its GPUs through verl phases, so the two must share the cluster's GPUs:
#   head:   python -m coevolve.cli plan grpo model.path=$MODEL data.source=$DATA \
#             engine=ray engine.ray.actor_engine=vllm engine.ray.address=auto engine.ray.num_actors=8 \
#             backend=verl backend.verl.nnodes=2 backend.verl.n_gpus_per_node=4 engine.ray.address=auto \
#             backend.verl.python=$VERL_PY --gpus 8 --nodes 2
#   head:   python dev/scale_check.py sample --model $MODEL --data $DATA --prompts 256 --n 8 \
#             --max-new-tokens 1024 engine=ray engine.ray.actor_engine=vllm engine.ray.address=auto
#   head:   python -m coevolve.cli run grpo <the plan's arguments> solver.steps=2 solver.prompts_per_step=32 \
#             solver.group_size=8 sampling.max_new_tokens=1024 "eval.benches=[gsm8k]" eval.limit=64 \
#             eval.every_round=false --run-dir $OUT/grpo-verl-2nodes
#   head:   python dev/scale_check.py run-summary $OUT/grpo-verl-2nodes
#   both:   ray stop
