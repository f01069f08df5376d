"""ELMo as a sentence-transformers input module: sentence-transformers' own `encode` (batching, progress bar,
normalization, similarity) runs on ELMo's word vectors.

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    elmo = ElmoSentenceTransformerModule("./elmo-original")
    model = SentenceTransformer(modules=[elmo, Pooling(elmo.get_embedding_dimension(), "mean")])
    vectors = model.encode(["The cat sat .", "A dog barked ."], batch_size=64, show_progress_bar=True)

The module is built from this package at run time, so no `trust_remote_code` is involved. With mean pooling the
vectors equal `ElmoEmbedder.embed_sentences(words, layers="average", sentence_vectors=True)`: the mean over each
sentence's words (the `<S>`/`</S>` positions left out) of the average of the layers. The words are those of
`ElmoTokenizer.tokenize(sentence)` (words and punctuation split apart, for raw text), or `sentence.split()` with
`whitespace_split=True` (for text tokenized already, as allennlp's `elmo` command read it).

`model.save(folder)` writes the biLM, its tokenizer and this module's settings at the top of the folder (where
sentence-transformers keeps its input module). sentence-transformers 6 imports a module class from outside its own
package only with `trust_remote_code=True`, even an installed one like this: reload with
`SentenceTransformer(folder, trust_remote_code=True)`, or without the flag by rebuilding the pipeline from
`ElmoSentenceTransformerModule.load(folder)` and `Pooling.load(folder + "/1_Pooling")`.
"""

import math

import torch

try:
    from sentence_transformers.base.modules import InputModule
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "elmo_hf.integrations.sentence_transformers needs sentence-transformers>=6: "
        'pip install "elmo-hf[sentence-transformers]"'
    ) from error

from ..embedder import ElmoEmbedder
from ..modeling_elmo import ElmoModel
from ..tokenization_elmo import ElmoTokenizer


class ElmoSentenceTransformerModule(InputModule):
    r"""
    Turns raw sentences into ELMo word vectors for the modules that follow (usually `Pooling`).

    Args:
        model (str or `ElmoModel`, optional): a checkpoint folder, a Hub name or a loaded `ElmoModel`; defaults to
            the small English model shipped in the package (`elmo_hf.DEFAULT_MODEL`).
        layers (str, defaults to "average"): how the layers become one vector per word: "average" (their mean),
            "top" (the last LSTM layer) or "mix" (their sum weighted by `mix_weights`), as in `ElmoEmbedder`.
        mix_weights (list of floats, one per layer): the weights for `layers="mix"`, token layer first.
        whitespace_split (bool, defaults to False): split sentences on whitespace only, instead of into words and
            punctuation (`ElmoTokenizer.tokenize`).

    `preprocess` splits each sentence into words; `forward` returns
    `token_embeddings` (batch, words, 2 * projection_dim) and `attention_mask` (batch, words), 1 on words and 0 on
    padding, without the sentence boundaries.
    """

    config_file_name = "elmo_sentence_transformer.json"
    config_keys = ["layers", "mix_weights", "whitespace_split"]

    def __init__(self, model=None, layers="average", mix_weights=None, whitespace_split=False):
        super().__init__()
        if layers == "all":
            raise ValueError('layers="all" gives several vectors per word; use "average", "top" or "mix"')
        if not isinstance(model, ElmoModel):
            model = ElmoEmbedder.from_pretrained(model).model
        # The embedder checks `layers` and `mix_weights` and turns them into one weight per layer.
        weights = ElmoEmbedder(model)._layer_weights(layers, mix_weights)
        self.layers, self.mix_weights, self.whitespace_split = layers, mix_weights, whitespace_split
        self.model = model
        self.tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
        self.register_buffer("layer_weights", weights, persistent=False)  # (layers,)

    @property
    def max_seq_length(self):
        return math.inf  # ELMo has no length limit

    def get_embedding_dimension(self):
        return 2 * self.model.config.projection_dim

    def preprocess(self, inputs, prompt=None, **kwargs):
        if prompt:
            inputs = self._prepend_prompt(inputs, prompt)
        if self.whitespace_split:
            words = [sentence.split() for sentence in inputs]
            return dict(self.tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt"))
        return dict(self.tokenizer(list(inputs), padding=True, return_tensors="pt"))

    def forward(self, features, **kwargs):
        attention_mask = features["attention_mask"]  # (batch, words + 2), the boundaries included
        output = self.model(input_ids=features["input_ids"], attention_mask=attention_mask, output_hidden_states=True)
        hidden = torch.stack(output.hidden_states, dim=1)[:, :, 1:-1]  # (batch, layers, longest, dim): <S> dropped
        mixed = torch.einsum("l,blwd->bwd", self.layer_weights.to(hidden.dtype), hidden)  # (batch, longest, dim)
        lengths = attention_mask.sum(dim=1) - 2  # (batch,) words per sentence
        words = torch.arange(mixed.shape[1], device=mixed.device) < lengths.unsqueeze(1)  # (batch, longest)
        # A shorter sentence's </S> and padding fall inside `longest`: zeroed and masked out.
        features["token_embeddings"] = mixed.masked_fill(~words.unsqueeze(-1), 0.0)
        features["attention_mask"] = words.long()
        return features

    def save(self, output_path, *args, safe_serialization=True, **kwargs):
        self.model.save_pretrained(output_path)  # always safetensors, whatever `safe_serialization` says
        self.tokenizer.save_pretrained(output_path)
        self.save_config(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path,
        subfolder="",
        token=None,
        cache_folder=None,
        revision=None,
        local_files_only=False,
        **kwargs,
    ):
        hub = {"token": token, "cache_dir": cache_folder, "revision": revision, "local_files_only": local_files_only}
        config = cls.load_config(
            model_name_or_path,
            subfolder=subfolder,
            token=token,
            cache_folder=cache_folder,
            revision=revision,
            local_files_only=local_files_only,
        )
        model = ElmoModel.from_pretrained(model_name_or_path, subfolder=subfolder, **hub)
        return cls(model, **config)
