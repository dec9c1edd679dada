#!/usr/bin/env bash
# The GPU check, run on a machine with a CUDA GPU, JAX and PyTorch but no
# TensorFlow, from the repository root (Keras and what it needs travel as
# wheels in .whl/). Logs go to $OUT (default: ./gpu_check_logs).
#   1. the kernel and layer tests on JAX and on PyTorch, on the GPU;
#   2. benchmarks/gpu.py on both backends, float32 and bfloat16 (one pass
#      of processes per length, `--repeats 1`: a check, not the measurement).
set -u
OUT=${OUT:-gpu_check_logs}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi -L 2>&1 | tee "$OUT/device.txt"
tests="tests/test_attention.py tests/test_attention_chunked.py tests/layers"
# float32 parity needs full-precision matmuls: JAX uses TF32 on GPUs by default.
for backend in jax torch; do
  KERAS_BACKEND=$backend JAX_DEFAULT_MATMUL_PRECISION=highest timeout 200 \
    python3 -m pytest $tests -q -x -p no:cacheprovider -m "not slow" \
    2>&1 | tail -25 > "$OUT/tests_$backend.txt"
  tail -3 "$OUT/tests_$backend.txt"
done
for backend in jax torch; do
  for dtype in float32 bfloat16; do
    KERAS_BACKEND=$backend timeout 120 python3 benchmarks/gpu.py \
      --lengths 2048,8192 --dtype "$dtype" --steps 5 --repeats 1 \
      2>&1 | grep -v "^[IWE]0000" | tail -12 > "$OUT/bench_${backend}_$dtype.txt"
    cat "$OUT/bench_${backend}_$dtype.txt"
  done
done
