"""Run ELMoForManyLangs 0.0.4.post2 (PyPI `elmoformanylangs`), unmodified, on torch 2.13.

Import this module before `elmoformanylangs`. The package's own files stay as installed; the only thing it cannot
run with on a modern stack is its `overrides` import: `modules/highway.py` decorates `Highway.forward` with
`@overrides`, and overrides >= 4 checks signatures, rejecting the method (its return annotation `torch.Tensor`
against `nn.Module.forward`'s missing one) at import time. The package was written against overrides < 4, whose
decorator only returned the function; that behaviour is restored here by a one-function placeholder module.

Everything else it uses works on torch 2.13 as it is: `torch.autograd.Variable` (an identity now), `torch.load` of
its state dicts (plain tensors: the default `weights_only=True` reads them), `F.tanh`. It moves the model to CUDA by
itself when one is visible, so run it with `CUDA_VISIBLE_DEVICES=` for CPU results.
"""

import importlib.machinery
import sys
import types


def _overrides(method):
    """overrides < 4's decorator: marks nothing, checks nothing."""
    return method


def _install():
    if "elmoformanylangs" in sys.modules:
        raise RuntimeError("import efml_shim before elmoformanylangs")
    module = types.ModuleType("overrides")
    module.__spec__ = importlib.machinery.ModuleSpec("overrides", None)
    module.overrides = _overrides
    module.__version__ = "0.0-efml-shim"
    sys.modules["overrides"] = module


_install()
