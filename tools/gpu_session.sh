#!/bin/bash
# The GPU checks of one device-machine session, in one call (the lease is short): the CUDA tests with the paths'
# differential harness, inference against allennlp on the same GPU (medium in float32 and bfloat16, original), and
# the biLM's training step with a profile.
#
#   bash tools/gpu_session.sh [OUT_DIR]
#
# Expects, in the ignored folder .gpu/ (made on a machine with the registries and ../shared):
#   .gpu/trainwork/ptb/train.txt  Penn Treebank text for the training benchmark (run_bilm_pretraining.write_ptb);
#   .gpu/whl/       allennlp 2.10.1, base58, dill, more-itertools and lmdb wheels for the device's Python;
#   .gpu/peer/      a "venv" whose bin/python is python3 with those wheels on its path (/tmp/peersite);
#   .gpu/peer-dir/  a copy of ../shared/peer; .gpu/fixtures/ a copy of ../shared/fixtures;
# Each stage has its own time limit, so one that hangs leaves the others' results.
set -u
OUT=${1:-${OUT:-/tmp/gpu-session}}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1  # one log (a device call returns at most 8 files)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD ELMO_FIXTURES=$PWD/.gpu/fixtures
stage() { echo "== $1 ($(date +%T))"; }

stage "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/peersite .gpu/whl/*.whl

stage "tests: the CUDA paths, the differential harness and the weight freshness checks"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/model/test_cuda.py tests/model/test_cuda_graphs.py \
    tests/model/test_cuda_kernels.py tests/model/test_paths_differential.py tests/model/test_lstm_paths.py \
    tests/model/test_weight_freshness.py 2>&1 | tail -25

stage "inference, medium: CUDA graphs with the fused step, and allennlp"
timeout 150 python3 benchmarks/benchmark_elmo.py --device cuda --sizes medium --reps 3 --peer-venv .gpu/peer \
    --peer-dir .gpu/peer-dir --work-dir /tmp/eb 2>&1
cp /tmp/eb/results.json "$OUT/inference-medium.json"

stage "inference, medium: bfloat16, CUDA graphs with the fused step"
timeout 90 python3 benchmarks/benchmark_elmo.py --device cuda --sizes medium --reps 3 --peer-dir .gpu/peer-dir \
    --work-dir /tmp/eb --variant bf16 2>&1
cp /tmp/eb/results.json "$OUT/inference-medium-bf16.json"

stage "training step: shipped and larger LSTM, file-order batches of 64, with a profile"
timeout 100 python3 benchmarks/benchmark_training.py --revisions . --configs shipped larger --device cuda \
    --steps 20 --warmup 5 --batch-size 64 --rounds 1 --profile --work-dir .gpu/trainwork \
    --json "$OUT/training.json" 2>&1 | tail -60

stage "inference, original: CUDA graphs with the fused step, and allennlp"
timeout 100 python3 benchmarks/benchmark_elmo.py --device cuda --sizes original --reps 2 --peer-venv .gpu/peer \
    --peer-dir .gpu/peer-dir --work-dir /tmp/eb 2>&1
cp /tmp/eb/results.json "$OUT/inference-original.json"
stage "done"
