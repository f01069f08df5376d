"""elmo-hf: ELMo (Peters et al., 2018) as a Hugging Face transformers model.

Importing this package registers the ELMo classes with the transformers Auto classes, and marks them so that
`save_pretrained` also writes their code (`trust_remote_code=True` then works without this package).
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)
from transformers.pipelines import PIPELINE_REGISTRY

from .hub.shipped_models import DEFAULT_MODEL, SHIPPED_MODELS
from .inference.embedder import ElmoEmbedder, ElmoTokenCache
from .inference.pipelines import ELMO_TOKEN_CLASSIFICATION_TASK, ElmoTokenClassificationPipeline
from .model.configuration_elmo import ElmoConfig
from .model.modeling_elmo import (
    ElmoForPreTraining,
    ElmoForPreTrainingOutput,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoModelOutput,
    ElmoPreTrainedModel,
    ElmoScalarMix,
)
from .model.tokenization_elmo import ElmoTokenizer
from .training.word_vocabulary import ElmoPreTrainingCollator, ElmoWordVocabulary

__version__ = "0.1.0"

AutoConfig.register(ElmoConfig.model_type, ElmoConfig, exist_ok=True)
AutoModel.register(ElmoConfig, ElmoModel, exist_ok=True)
AutoTokenizer.register(ElmoConfig, ElmoTokenizer, exist_ok=True)
AutoModelForPreTraining.register(ElmoConfig, ElmoForPreTraining, exist_ok=True)

ElmoConfig.register_for_auto_class()
ElmoModel.register_for_auto_class("AutoModel")
ElmoTokenizer.register_for_auto_class("AutoTokenizer")
ElmoForPreTraining.register_for_auto_class("AutoModelForPreTraining")
AutoModelForTokenClassification.register(ElmoConfig, ElmoForTokenClassification, exist_ok=True)
AutoModelForSequenceClassification.register(ElmoConfig, ElmoForSequenceClassification, exist_ok=True)
ElmoForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
ElmoForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")

# Our own task name for the ELMo tagging pipeline: pipeline("elmo-token-classification", model=...), or
# pipeline("token-classification", model=..., pipeline_class=ElmoTokenClassificationPipeline). The stock
# "token-classification" task is left as transformers defines it, for every other model in the process.
PIPELINE_REGISTRY.register_pipeline(
    ELMO_TOKEN_CLASSIFICATION_TASK,
    pipeline_class=ElmoTokenClassificationPipeline,
    pt_model=AutoModelForTokenClassification,
    type="text",
)

__all__ = [
    "DEFAULT_MODEL",
    "SHIPPED_MODELS",
    "ElmoConfig",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoTokenizer",
    "ElmoWordVocabulary",
    "ElmoPreTrainingCollator",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoEmbedder",
    "ElmoTokenCache",
    "ElmoScalarMix",
    "ElmoForTokenClassification",
    "ElmoForSequenceClassification",
    "ElmoTokenClassificationPipeline",
    "ELMO_TOKEN_CLASSIFICATION_TASK",
]
