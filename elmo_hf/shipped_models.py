"""The models shipped inside the package, by path: `ElmoModel.from_pretrained(elmo_hf.DEFAULT_MODEL)` works offline."""

import os

_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained")

# The small English ELMo trained on 2.2M words of cased, punctuated English news (model card in its README.md). An
# ElmoForPreTraining checkpoint (biLM + softmax).
DEFAULT_MODEL = os.path.join(_FOLDER, "elmo-news-small")
# The earlier default, trained on the Penn Treebank language-model text (lowercase, no punctuation): kept as the
# training recipe's exact-reproduction check (its test perplexity is recomputed offline from the `treebank` package).
PTB_MODEL = os.path.join(_FOLDER, "elmo-ptb-small")
