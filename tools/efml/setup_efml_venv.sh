#!/bin/bash
# Build a venv holding ELMoForManyLangs 0.0.4.post2, unmodified, next to torch 2.13.0 CPU (the reference for
# tests/data/efml/, made by make_efml_reference.py; efml_shim.py makes it import on this stack).
# usage: tools/efml/setup_efml_venv.sh [VENV_DIR]   (default: ${TMPDIR:-/tmp}/efml-venv)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
V=${1:-${TMPDIR:-/tmp}/efml-venv}
python3 -m venv "$V"
"$V/bin/pip" install -q torch==2.13.0
# Its requirements are torch, h5py, numpy, overrides (unpinned); overrides is installed but replaced by the shim.
"$V/bin/pip" install -q numpy h5py overrides
"$V/bin/pip" install -q --no-deps elmoformanylangs==0.0.4.post2
"$V/bin/python" -c "import sys; sys.path.insert(0, '$HERE'); import efml_shim; \
from elmoformanylangs import Embedder; import torch, importlib.metadata as m; \
print('ok elmoformanylangs', m.version('elmoformanylangs'), 'torch', torch.__version__)"
echo "$V"
