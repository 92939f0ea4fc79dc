#!/usr/bin/env bash
# Issue 16's GPU checks in one run, for a session lent a GPU machine (device tool): the CUDA tests (with
# issue 20's DDP and FSDP on one GPU with NCCL), the three models' bars and the cost per measured iteration
# against the number of layers. It uses the machine's own python3 (torch with CUDA, tensorboard, numpy,
# protobuf, werkzeug and pytest are there) with this checkout on PYTHONPATH, and logs to
# $OUT/gpu_checks.log when OUT is set. About 7 minutes on an H100; each part has its own time limit,
# so one slow part cannot eat the others.
#
#   bash bench/gpu_checks.sh              # on the GPU machine
#   DEVICE=cpu QUICK=1 bash bench/gpu_checks.sh   # a smoke run here: everything starts and prints
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
LOG=${OUT:-/tmp}/gpu_checks.log
if [ -n "${QUICK:-}" ]; then  # tiny shapes, one short round: checks that each part runs
    ROUNDS=1 CONV="--steps 2 --batch 2" RESNET="--steps 2 --batch 2 --image 64" GPT="--steps 2 --batch 1 --seq 32 --layers 2" LAYERS="--steps 2 --rounds 1"
else
    ROUNDS=3 CONV="--steps 100" RESNET="--steps 40" GPT="--steps 25" LAYERS="--steps 50 --rounds 5"
fi
run() {  # run LIMIT_SECONDS COMMAND...: one part, its exit status noted, the next part runs whatever it gave
    local limit=$1; shift
    echo "== $(date -u +%H:%M:%S) $*"
    timeout "$limit" "$@"
    echo "== exit $?"
}
{
    "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
    if [ "$DEVICE" != cpu ]; then
        run 180 "$PY" -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda.py tests/health/test_input_watch.py tests/integrations/test_fsdp.py tests/integrations/test_ddp.py
    fi
    run 60 "$PY" -m pytest -q -p no:cacheprovider tests/health/test_fixed_dispatch.py
    run 90 "$PY" bench/bench_gpu_health.py --device "$DEVICE" --model conv16 --rounds "$ROUNDS" $CONV
    run 150 "$PY" bench/bench_gpu_health.py --device "$DEVICE" --model resnet50 --rounds "$ROUNDS" $RESNET
    run 150 "$PY" bench/bench_gpu_health.py --device "$DEVICE" --model gpt2 --rounds "$ROUNDS" $GPT
    run 90 "$PY" bench/bench_health_layers.py --device "$DEVICE" $LAYERS
} 2>&1 | tee "$LOG"
# The verdicts in one place, for the note: each part's exit, the bars and the pace.
echo "== summary"
grep -E "^== (exit|[0-9])| passed| failed|vs own: |auto pace measures|held on the device|ops dispatched|Python calls per|cost per measured" "$LOG"
