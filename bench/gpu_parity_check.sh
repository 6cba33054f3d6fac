#!/usr/bin/env bash
# Parity per dtype on a GPU: the tolerances of workers/evaluation/parity_tolerances.py were measured
# on vLLM on CPU; this measures them where GPUs run vLLM's own kernels. Run it on a machine with an
# NVIDIA GPU, from the repository root, after `./dev test --fast` (or any command that made .venv)
# and with vLLM for CUDA in $VLLM_PYTHON's environment:
#
#   VLLM_PYTHON=/path/to/cuda-vllm-venv/bin/python bash bench/gpu_parity_check.sh
#
# For each of bfloat16, float16 and float32 it starts vLLM on the GPU serving the task kit's base
# (--max-loras 4, runtime LoRA updating on), runs bench/parity_dtypes.py against it with the
# reference on cuda, and stops it. Results: bench/results/parity_dtypes_gpu_<dtype>.json. Compare
# parity_max_logprob_diff_<dtype> and parity_token_mismatch_rate_<dtype> with the tolerances
# beside them (tolerance_headroom_<dtype> under about 2 means the default is too tight there).
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_PYTHON=${VLLM_PYTHON:?set VLLM_PYTHON to the python of an environment with vLLM for CUDA}
PORT=${PORT:-8765}
KIT=.cache/task-kit
.venv/bin/python -m devkit.task_kit "$KIT" >/dev/null  # built once, then only loaded
python_ok=$(.venv/bin/python -c "import torch; print(torch.cuda.is_available())")
[ "$python_ok" = "True" ] || { echo "torch in .venv sees no GPU: the reference would run on the CPU" >&2; exit 1; }

for dtype in bfloat16 float16 float32; do
  log=$(mktemp)
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "$VLLM_PYTHON" -m vllm.entrypoints.openai.api_server \
    --model "$KIT/base" --served-model-name kit --dtype "$dtype" --enable-lora --max-loras 4 \
    --max-lora-rank 16 --max-model-len 512 --host 127.0.0.1 --port "$PORT" >"$log" 2>&1 &
  engine=$!
  trap 'kill $engine 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    kill -0 $engine 2>/dev/null || { echo "vLLM exited in $dtype:"; tail -20 "$log"; break; }
    sleep 1
  done
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then
    .venv/bin/python -m bench.parity_dtypes --engine-url "http://127.0.0.1:$PORT" --dtype "$dtype" \
      --device cuda --results "parity_dtypes_gpu_$dtype"
  fi
  kill $engine 2>/dev/null || true
  wait $engine 2>/dev/null || true
done
