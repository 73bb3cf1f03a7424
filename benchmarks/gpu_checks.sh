#!/usr/bin/env bash
# The GPU checks of one lent CUDA machine, in order of what matters most; each step bounded, none stops the next.
#   1. pytest -m gpu: CUDA kernels and memory functions, every tests/parallel case on the GPUs (NCCL) against the
#      serial reference on the CPU, the serial path on a GPU against the CPU's;
#   2. the Cora tables with --device cuda (every algorithm, P = number of GPUs, 1 when one);
#   3. bench_local's epochs on the GPU: gridgnn serial next to PyG on the same GPU.
# Usage: bash benchmarks/gpu_checks.sh CORA_DIR LOG_DIR  (PYTHON defaults to python3; the package is read from src/)
set -u
CORA=${1:?CORA_DIR}; LOG=${2:?LOG_DIR}; PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
NGPU=$($PY -c "import torch; print(torch.cuda.device_count())")
P=1; for p in 2 4 8; do [ "$NGPU" -ge $p ] && P=$p; done
step() { local name=$1 limit=$2; shift 2; echo "=== $name ($(date +%T))"; timeout "$limit" "$@" 2>&1 | tee "$LOG/$name.log"; echo "=== $name exit ${PIPESTATUS[0]}"; }
nvidia-smi -L; $PY -c "import torch, torch_geometric as g; print('torch', torch.__version__, 'pyg', g.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
step pytest_gpu 150 $PY -m pytest -p no:cacheprovider -q -m gpu --durations=5 tests/ops/test_kernels.py tests/planner/test_memory.py tests/parallel/test_cuda.py
step cora_gcn 130 $PY benchmarks/cora_accuracy.py "$CORA" --device cuda --nproc $P --seeds 2
step cora_gat 90 $PY benchmarks/cora_accuracy.py "$CORA" --device cuda --nproc $P --seeds 1 --model gat
step epochs_gpu 150 $PY benchmarks/bench_local.py --device cuda --skip kernels,bytes --epochs 10 --warmup 2
