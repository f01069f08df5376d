#!/bin/bash
# The GPU checks of one device-machine session, in one call (the lease is short): CUDA tests, inference against
# allennlp on the same GPU with and without CUDA graphs, bfloat16, and biLM training on the GPU with a profile.
#
#   bash tools/gpu_session.sh [OUT_DIR]
#
# Expects, in the ignored folder .gpu/ (made on a machine with the registries and ../shared):
#   .gpu/whl/       allennlp 2.10.1, base58, dill, more-itertools and lmdb wheels for the device's Python;
#   .gpu/peer/      a "venv" whose bin/python is python3 with those wheels on its path (/tmp/peersite);
#   .gpu/peer-dir/  a copy of ../shared/peer; .gpu/fixtures/ a copy of ../shared/fixtures;
#   .gpu/ptb/       the PTB text (train.txt), written by examples/run_bilm_pretraining.write_ptb.
# Each stage has its own time limit, so one that hangs leaves the others' results.
set -u
OUT=${1:-${OUT:-/tmp/gpu-session}}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1  # one log (a device call returns at most 8 files)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD ELMO_FIXTURES=$PWD/.gpu/fixtures
stage() { echo "== $1 ($(date +%T))"; }

stage "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/peersite .gpu/whl/*.whl

stage "tests"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_cuda_graphs.py 2>&1 | tail -15

stage "inference, medium: CUDA graphs and allennlp"
timeout 180 python3 benchmarks/benchmark_elmo.py --device cuda --sizes medium --reps 3 --peer-venv .gpu/peer \
    --peer-dir .gpu/peer-dir --work-dir /tmp/eb 2>&1
cp /tmp/eb/results.json "$OUT/inference-graphs.json"

stage "training on the GPU"
mkdir -p /tmp/tb && cp -r .gpu/ptb /tmp/tb/
for batching in file-order length-grouped; do
    timeout 80 python3 benchmarks/benchmark_training.py --device cuda --configs shipped medium --steps 30 \
        --rounds 1 --batching "$batching" --work-dir /tmp/tb --json "$OUT/training-$batching.json" 2>&1
done
stage "inference, medium: the plain loop (no graphs), then bfloat16 with graphs"
timeout 100 python3 benchmarks/benchmark_elmo.py --device cuda --sizes medium --reps 3 --peer-dir .gpu/peer-dir \
    --work-dir /tmp/eb --lstm-implementation reference 2>&1
cp /tmp/eb/results.json "$OUT/inference-reference.json"
timeout 100 python3 benchmarks/benchmark_elmo.py --device cuda --sizes medium --reps 3 --peer-dir .gpu/peer-dir \
    --work-dir /tmp/eb --variant bf16 2>&1
cp /tmp/eb/results.json "$OUT/inference-bf16.json"

stage "where a training step's time goes on the GPU (medium)"

timeout 45 python3 benchmarks/benchmark_training.py --device cuda --configs medium --steps 3 --profile \
    --work-dir /tmp/tb 2>&1
stage "done"
