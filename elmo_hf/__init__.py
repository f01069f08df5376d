"""elmo-hf: ELMo (Peters et al., 2018) as a Hugging Face transformers model.

Importing this package registers the ELMo classes with the transformers Auto classes, and marks them so that
`save_pretrained` also writes their code (`trust_remote_code=True` then works without this package).

The names below are loaded on first use (PEP 562), so that a module of the package costs only what it imports
itself. One process skips the registration at import: the `elmo-hf` command (its console script, or
`python -m elmo_hf.cli`), whose help and argument errors answer before torch is imported; it registers the classes
before any command runs (`elmo_hf.cli.main`).
"""

import importlib
import os
import sys
from typing import Any

__version__ = "0.1.0"

# Each public name and the module that defines it.
_EXPORTS = {
    "DEFAULT_MODEL": "hub.shipped_models",
    "SHIPPED_MODELS": "hub.shipped_models",
    "ElmoConfig": "model.configuration_elmo",
    "ElmoModel": "model.modeling_elmo",
    "ElmoModelOutput": "model.modeling_elmo",
    "ElmoPreTrainedModel": "model.modeling_elmo",
    "ElmoTokenizer": "model.tokenization_elmo",
    "ElmoWordVocabulary": "training.word_vocabulary",
    "ElmoPreTrainingCollator": "training.word_vocabulary",
    "ElmoForPreTraining": "model.modeling_elmo",
    "ElmoForPreTrainingOutput": "model.modeling_elmo",
    "ElmoEmbedder": "inference.embedder",
    "ElmoTokenCache": "inference.embedder",
    "ElmoScalarMix": "model.modeling_elmo",
    "ElmoForTokenClassification": "model.modeling_elmo",
    "ElmoForSequenceClassification": "model.modeling_elmo",
    "ElmoTokenClassificationPipeline": "inference.pipelines",
    "ELMO_TOKEN_CLASSIFICATION_TASK": "inference.pipelines",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _register_auto_classes() -> None:
    """Register the ELMo classes with the Auto classes and for `save_pretrained`'s code copy, and the pipeline task
    "elmo-token-classification". Idempotent."""
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForPreTraining,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    from .model.configuration_elmo import ElmoConfig
    from .model.modeling_elmo import (
        ElmoForPreTraining,
        ElmoForSequenceClassification,
        ElmoForTokenClassification,
        ElmoModel,
    )
    from .model.tokenization_elmo import ElmoTokenizer

    AutoConfig.register(ElmoConfig.model_type, ElmoConfig, exist_ok=True)
    AutoTokenizer.register(ElmoConfig, ElmoTokenizer, exist_ok=True)
    ElmoConfig.register_for_auto_class()
    ElmoTokenizer.register_for_auto_class("AutoTokenizer")
    for auto_class, model_class in (
        (AutoModel, ElmoModel),
        (AutoModelForPreTraining, ElmoForPreTraining),
        (AutoModelForTokenClassification, ElmoForTokenClassification),
        (AutoModelForSequenceClassification, ElmoForSequenceClassification),
    ):
        auto_class.register(ElmoConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class.__name__)
    importlib.import_module(".inference.pipelines", __name__)  # registers the task "elmo-token-classification"


def _started_as_the_command() -> bool:
    """Whether this process is the `elmo-hf` command: its console script, or `python -m elmo_hf.cli` (while the
    package is imported for it, sys.argv[0] is still "-m" and sys.orig_argv holds the module's name)."""
    if not sys.argv:
        return False
    if sys.argv[0] == "-m":
        return sys.orig_argv[-len(sys.argv)] == "elmo_hf.cli"
    script = os.path.basename(sys.argv[0]).lower()
    return script in ("elmo-hf", "elmo-hf.exe", "elmo-hf-script.py")


if not _started_as_the_command():
    _register_auto_classes()
