"""The model shipped inside the package, by path: `ElmoModel.from_pretrained(elmo_hf.DEFAULT_MODEL)` works offline."""

import os

_FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pretrained")

# The small English ELMo trained on 7.4M words of cased, punctuated English from seven registry packages (speeches,
# news, novels, technical prose, commentary and scripture; the recipe in the repository's recipes/english-bilm/, data
# statement in its README.md). An ElmoForPreTraining checkpoint (biLM + softmax).
DEFAULT_MODEL = os.path.join(_FOLDER, "elmo-english-small")

# The shipped models by name, for `elmo-hf ... --model NAME` and `ElmoEmbedder.from_pretrained(NAME)`.
SHIPPED_MODELS = {"elmo-english-small": DEFAULT_MODEL}


def shipped_model_path(name_or_path: str | os.PathLike[str]) -> str | os.PathLike[str]:
    """The folder of the shipped model named `name_or_path` (a key of `SHIPPED_MODELS`) unless a folder of that name
    exists here; any other value unchanged."""
    if isinstance(name_or_path, str) and name_or_path in SHIPPED_MODELS and not os.path.exists(name_or_path):
        return SHIPPED_MODELS[name_or_path]
    return name_or_path
