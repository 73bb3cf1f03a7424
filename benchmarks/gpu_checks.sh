#!/usr/bin/env bash
# The GPU checks of one lent CUDA machine, in order of what they tell that nothing else does; each step bounded (its
# own limit and what is left of BUDGET_S, the whole script's), none stops the next, each writes its log into LOG_DIR
# as it goes, so a run cut short leaves what it measured:
#   1. staged: P = 2 and 4 ranks sharing one GPU, collectives staged through the host over gloo — every algorithm
#      with GCN, GAT and SAGE, every --overlap case, a narrowed wire per family — against the CPU's serial reference;
#   2. pytest_kernels: the kernels' part of the rest of `pytest -m gpu` — the Triton kernels (strict: no fallback),
#      the lean backward's ReLU and product giving torch's bits on the device, a product's input recomputed by blocks
#      of rows, the fused attention in float32 too;
#   3. epochs_gpu: bench_local's epochs on the GPU, gridgnn serial (eager and --cuda-graph; GCN and GraphSAGE also
#      --cuda-graph --layer-order lean) next to PyG (GCN, GraphSAGE, GAT, AGNN; peak memory), each row printed as
#      its run ends (the issue's goal: before the remaining tests);
#   4. pytest_device: the rest — every model's step recorded as a CUDA graph (--cuda-graph, node classification and
#      link prediction) training as its eager step does, a training step with CUDA's synchronization check set to
#      raise (nothing read back from the device), a run with the fused AdamW interrupted and resumed as the
#      uninterrupted one, the memory functions and the device branch of the memory model against four ranks
#      sharing the GPU, a selection's backward memory against the model (its sorted index_put_), every
#      tests/parallel case at P = 1..(visible GPUs) through NCCL, the serial path on a GPU against the CPU's;
#   5. cora_gcn: the Cora table with --device cuda (every algorithm, P = number of GPUs, 1 when one).
# Usage: bash benchmarks/gpu_checks.sh CORA_DIR LOG_DIR  (PYTHON defaults to python3; BUDGET_S to 480; the package
# is read from src/; step 3 writes torch.profiler tables of gridgnn's runs and PyG's CSR run, where the time goes,
# into PROFILE_DIR, by default a temporary folder whose tables end as one file, LOG_DIR/profiles.txt: LOG_DIR then
# holds 7 files, and a lent machine gives back 8 at most; PROFILE_DIR set empty: none). CORA_DIR may be "-" or a
# missing folder (no Cora files on the machine): step 5 is then skipped. LOG_DIR is made if missing. A step past its
# limit is interrupted as by Ctrl-C (SIGINT, then SIGKILL 20 s later, which a step may take beyond the budget):
# pytest then still prints the failures it met and what ran, a benchmark the rows it printed (timeout sets SIGINT's
# default in its command, so this holds in a background job too, whose shell ignores SIGINT). pytest names each
# test as it starts (-v) and prints where a test running past 30 s is (a hang in the device's code never sees the
# SIGINT: its step ends at the SIGKILL, the log naming the test that hung and, where it hung 30 s before the kill,
# where).
# The environment's versions go to LOG_DIR/env.log first. The device tool's call that runs it, with Cora:
# docs/benchmarks.md ("The next lease's call").
set -u
CORA=${1:?CORA_DIR}; LOG=${2:?LOG_DIR}; PY=${PYTHON:-python3}; BUDGET=${BUDGET_S:-480}; SHORTEST=${SHORTEST_S:-20}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
END=$(( $(date +%s) + BUDGET ))
mkdir -p "$LOG"
step() {  # step NAME LIMIT_S COMMAND...: bounded by LIMIT_S and by what is left of the budget
  local name=$1 limit=$2; shift 2
  local left=$(( END - $(date +%s) )); [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt "$SHORTEST" ]; then
    echo "=== $name skipped: ${left}s of the budget left" | tee "$LOG/$name.log"; return
  fi
  echo "=== $name ($(date +%T), up to ${limit}s)"
  timeout -s INT -k 20 "$limit" "$@" > "$LOG/$name.log" 2>&1; local rc=$?
  tail -n 40 "$LOG/$name.log"; echo "=== $name exit $rc ($(date +%T))" | tee -a "$LOG/$name.log"
}
PYTEST="$PY -m pytest -p no:cacheprovider -o addopts= -v -m gpu --durations=8 -o faulthandler_timeout=30"
[ -n "${GPU_CHECKS_STEP_ONLY:-}" ] && { return 0 2>/dev/null || exit 0; }  # (its test sources it: the step alone)
PROFILES=${PROFILE_DIR-$(mktemp -d)}
NGPU=$($PY -c "import torch; print(torch.cuda.device_count())")
P=1; for p in 2 4 8; do [ "$NGPU" -ge $p ] && P=$p; done
{ nvidia-smi -L; $PY - <<'PYEOF'
import importlib, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())
for name in ("torch_geometric", "triton", "numba", "matplotlib", "pytest", "xdist"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "present"))
    except ImportError:
        print(name, "absent")
PYEOF
} 2>&1 | tee "$LOG/env.log"
step staged 120 $PYTEST tests/parallel/test_cuda.py -k sharing
step pytest_kernels 70 $PYTEST tests/ops/test_triton_kernels.py tests/ops/test_kernels.py tests/ops/test_lean_backward.py tests/ops/test_recompute_blocks.py
step epochs_gpu 200 $PY benchmarks/bench_local.py --device cuda --skip kernels,bytes --models gcn,sage,gat,agnn --epochs 5 --warmup 2 ${PROFILES:+--profile "$PROFILES"}
if [ -z "${PROFILE_DIR+set}" ]; then  # (the temporary folder's tables as one file)
  awk 'FNR == 1 { print "=== " FILENAME } 1' "$PROFILES"/profile-*.txt > "$LOG/profiles.txt" 2> /dev/null
  rm -rf "$PROFILES"
fi
step pytest_device 100 $PYTEST tests/train/test_graphed.py tests/train/test_no_read_back.py tests/train/test_optimizers.py tests/planner/test_memory.py tests/parallel/test_cuda.py -k "not sharing"
[ -d "$CORA" ] || echo "=== cora_gcn skipped: no Cora folder ($CORA)" | tee "$LOG/cora_gcn.log"
[ -d "$CORA" ] && step cora_gcn 60 $PY benchmarks/cora_accuracy.py "$CORA" --device cuda --nproc $P --seeds 1
exit 0
