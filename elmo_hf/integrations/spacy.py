"""ELMo in a spaCy pipeline: the "elmo_hf" component sets `doc.tensor` to each token's ELMo vector and makes the
vectors and similarities of tokens, spans and docs use them.

    import spacy
    import elmo_hf.integrations.spacy  # registers the factory (installed packages find it by entry point too)

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")  # optional: ELMo then reads each sentence on its own
    nlp.add_pipe("elmo_hf", config={"model": "./elmo-original"})
    doc = nlp("The bank raised its rates. We sat on the river bank.")
    doc[1].similarity(doc[10]), doc.vector.shape  # ELMo's (2 * projection_dim,) vectors

Each sentence is read by the biLM on its own when the pipeline marks sentences, else the whole doc is one
sentence. A token's vector is its row of `doc.tensor`: the average of the layers (or the top layer, or a weighted
mix, as `layers` says), `(2 * projection_dim,)`. Whitespace tokens get zeros and are left out of span and doc
vectors, which are the mean of their tokens' vectors. `similarity` is the cosine of two such vectors.
`nlp.pipe` embeds the sentences of `batch_size` docs together.

- `add_pipe` checks every setting and raises a one-line ValueError naming a bad one. The weights are read when the
  component first runs, at `nlp.initialize()`, or, in a pipeline loaded with `spacy.load`, from the pipeline's own
  folder; so `model` may name a folder that exists only where the pipeline was saved.
- `nlp.to_disk(folder)` writes the weights and the tokenizer into `folder/<component name>`, and `nlp.to_bytes()`
  carries them too: `spacy.load(folder)` reads nothing else, and works offline from a copy anywhere.
- ELMoForManyLangs conversions work as any checkpoint: their tokenizer is read with them.
- `nlp.pipe(texts, n_process=2)` raises a ValueError: spaCy hands the docs of its worker processes back through
  `Doc.to_bytes`, which keeps `doc.tensor` but drops the vector and similarity hooks. Run ELMo in the main process
  instead: `component.pipe(nlp.pipe(texts, n_process=2, disable=[name]))`.
"""

import multiprocessing
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

try:
    import srsly
    from spacy import language as spacy_language
    from spacy.language import Language
    from spacy.tokens import Doc, Span, Token
    from spacy.training import Example
    from spacy.util import minibatch
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError('elmo_hf.integrations.spacy needs spaCy 3: pip install "elmo-hf[spacy]"') from error

from .. import DEFAULT_MODEL
from ..inference.embedder import ElmoEmbedder
from ..model.configuration_elmo import ElmoConfig
from ..model.modeling_elmo import ElmoModel
from ..model.tokenization_elmo import ElmoTokenizer
from .common import check_positive_int, check_single_vector_layers, load_checkpoint, shown


class ElmoSpacyComponent:
    r"""
    Args:
        model (str, optional): a checkpoint folder or Hub name; defaults to `elmo_hf.DEFAULT_MODEL`.
        layers (str, defaults to "average"), mix_weights (list of floats): as for `ElmoEmbedder.embed_sentences`,
            except "all".
        batch_size (int, defaults to 64): sentences per model call at most.
        device (str, optional): where the biLM runs (default: where it loads, the CPU).
        name (str, defaults to "elmo_hf"): the component's name in the pipeline, for messages.
    """

    def __init__(
        self,
        model: str | None = None,
        layers: str = "average",
        mix_weights: Sequence[float] | None = None,
        batch_size: int = 64,
        device: str | torch.device | None = None,
        name: str = "elmo_hf",
    ) -> None:
        check_single_vector_layers(layers, mix_weights)
        check_positive_int("batch_size", batch_size)
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise ValueError(f"model must be a checkpoint folder or a Hub model name, got {shown(model)}")
        self.model_name, self.layers, self.mix_weights, self.batch_size = model, layers, mix_weights, batch_size
        self.device, self.name = _checked_device(device), name
        self._embedder: ElmoEmbedder | None = None
        # A folder here is checked now (its config only: the weights are read later, see the module's docstring).
        folder = model if model is not None else DEFAULT_MODEL
        if os.path.isdir(folder):
            if not os.path.isfile(os.path.join(folder, "config.json")):
                raise ValueError(f"model {model!r} is a folder without config.json, not an elmo-hf checkpoint")
            try:
                config = ElmoConfig.from_pretrained(folder)
            except (OSError, ValueError) as error:
                reason = " ".join(str(error).split())
                raise ValueError(f"model {model!r}: its config.json cannot be read: {reason}") from None
            self._check_mix_weights(config.num_lstm_layers + 1)

    @property
    def embedder(self) -> ElmoEmbedder:
        """The `ElmoEmbedder`, loaded from the `model` setting on first use unless `from_disk` gave it."""
        if self._embedder is None:
            self._use(*load_checkpoint(self.model_name))
            assert self._embedder is not None  # set by _use
        return self._embedder

    def _use(self, model: ElmoModel, tokenizer: ElmoTokenizer) -> None:
        self._check_mix_weights(model.config.num_lstm_layers + 1)
        self._embedder = ElmoEmbedder(model, tokenizer=tokenizer, device=self.device)

    def _check_mix_weights(self, num_layers: int) -> None:
        if self.mix_weights is not None and len(self.mix_weights) != num_layers:
            model = self.model_name or DEFAULT_MODEL
            raise ValueError(
                f"mix_weights needs {num_layers} values for model {model!r} (the token layer and {num_layers - 1} "
                f"LSTM layers), got {len(self.mix_weights)}: {shown(self.mix_weights)}"
            )

    def initialize(
        self, get_examples: Callable[[], Iterable[Example]] | None = None, *, nlp: Language | None = None
    ) -> None:
        """spaCy's `nlp.initialize()`: read the weights now rather than at the first doc."""
        self.embedder  # noqa: B018 - loads them

    def __call__(self, doc: Doc) -> Doc:
        self._set_vectors([doc])
        return doc

    def pipe(self, docs: Iterable[Doc], batch_size: int | None = None) -> Iterator[Doc]:
        if _in_spacy_worker():
            raise ValueError(
                f"the {self.name} component does not run under nlp.pipe(n_process > 1): spaCy returns the docs of its "
                "worker processes through Doc.to_bytes, which keeps doc.tensor but drops the vector and similarity "
                f"hooks; use n_process=1, or run ELMo in the main process: nlp.get_pipe({self.name!r}).pipe("
                f"nlp.pipe(texts, n_process=2, disable=[{self.name!r}]))"
            )
        for batch in minibatch(docs, size=batch_size or self.batch_size):
            self._set_vectors(batch)
            yield from batch

    # ---- serialization: the weights and the tokenizer, as `save_pretrained` writes them ----

    def to_disk(self, path: str | os.PathLike[str], *, exclude: Iterable[str] = ()) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.embedder.model.save_pretrained(path)
        self.embedder.tokenizer.save_pretrained(path)

    def from_disk(self, path: str | os.PathLike[str], *, exclude: Iterable[str] = ()) -> "ElmoSpacyComponent":
        if Path(path).is_dir():  # else a pipeline saved without the weights, by an older elmo-hf: `model` is read
            self._use(*load_checkpoint(str(path)))
        return self

    def to_bytes(self, *, exclude: Iterable[str] = ()) -> bytes:
        with tempfile.TemporaryDirectory() as folder:
            self.to_disk(folder)
            files = {name: (Path(folder) / name).read_bytes() for name in sorted(os.listdir(folder))}
        return srsly.msgpack_dumps(files)

    def from_bytes(self, data: bytes, *, exclude: Iterable[str] = ()) -> "ElmoSpacyComponent":
        with tempfile.TemporaryDirectory() as folder:
            for name, content in srsly.msgpack_loads(data).items():
                (Path(folder) / Path(name).name).write_bytes(content)
            return self.from_disk(folder)

    def _set_vectors(self, docs: Sequence[Doc]) -> None:
        """Embed the sentences of `docs` in one go and give each doc its tensor and hooks."""
        sentences: list[list[str]] = []
        places: list[tuple[int, list[int]]] = []  # (doc index, token indices of the sentence's words)
        for index, doc in enumerate(docs):
            spans = doc.sents if doc.has_annotation("SENT_START") else [doc[:]]
            for span in spans:
                tokens = [token.i for token in span if not token.is_space]
                if tokens:
                    sentences.append([doc[i].text for i in tokens])
                    places.append((index, tokens))
        vectors = self.embedder.embed_sentences(
            sentences, layers=self.layers, mix_weights=self.mix_weights, batch_size=self.batch_size
        )  # one (words, dim) array per sentence
        dim = 2 * self.embedder.model.config.projection_dim
        tensors = [np.zeros((len(doc), dim), dtype=np.float32) for doc in docs]
        for (index, tokens), array in zip(places, vectors):
            tensors[index][tokens] = array
        for doc, tensor in zip(docs, tensors):
            doc.tensor = tensor  # (tokens, dim)
            doc.user_hooks.update(vector=doc_vector, has_vector=has_vector, similarity=similarity)
            doc.user_span_hooks.update(vector=span_vector, has_vector=has_vector, similarity=similarity)
            doc.user_token_hooks.update(vector=token_vector, has_vector=has_vector, similarity=similarity)


def _checked_device(device: str | torch.device | None) -> str | None:
    """`device` as a string torch accepts, or None; a ValueError naming it when it is malformed or absent here."""
    if device is None:
        return None
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f'device must be a torch device such as "cpu" or "cuda:0", got {shown(device)}') from None
    if parsed.type == "cuda" and not (torch.cuda.is_available() and (parsed.index or 0) < torch.cuda.device_count()):
        raise ValueError(
            f"device {device!r} is not available here ({torch.cuda.device_count()} CUDA devices); for a saved "
            'pipeline: spacy.load(path, config={"components.<name>.device": "cpu"})'
        )
    return str(device)


def _in_spacy_worker() -> bool:
    """True in a worker process of spaCy's `nlp.pipe(n_process > 1)` (a process started on spaCy's worker loop)."""
    target = getattr(multiprocessing.current_process(), "_target", None)
    return target is not None and target is getattr(spacy_language, "_apply_pipes", None)


# The hooks are module-level functions so that docs stay picklable.


def token_vector(token: Token) -> np.ndarray:
    return token.doc.tensor[token.i]


def span_vector(span: Span | Doc) -> np.ndarray:
    words = [token.i for token in span if not token.is_space]
    if not words:
        return np.zeros(span.doc.tensor.shape[1], dtype=np.float32)
    return span.doc.tensor[words].mean(axis=0)


def doc_vector(doc: Doc) -> np.ndarray:
    return span_vector(doc[:])


def has_vector(_: object) -> bool:
    return True


def similarity(this: Token | Span | Doc, other: Token | Span | Doc) -> float:
    """The cosine of the two ELMo vectors (0.0 when either is all zeros)."""
    a, b = cast(np.ndarray, this.vector), cast(np.ndarray, other.vector)  # the arrays of the hooks above
    if a.shape != b.shape:
        raise ValueError(
            f"similarity: {type(other).__name__} {other.text!r} has a vector of shape {b.shape}, not ELMo's "
            f"{a.shape}; compare with tokens, spans or docs of a pipeline with the elmo_hf component"
        )
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / norms) if norms else 0.0


@Language.factory(
    "elmo_hf",
    default_config={"model": None, "layers": "average", "mix_weights": None, "batch_size": 64, "device": None},
)
def make_elmo_component(
    nlp: Language, name: str, model: Any, layers: Any, mix_weights: Any, batch_size: Any, device: Any
) -> ElmoSpacyComponent:
    """spaCy's factory for `ElmoSpacyComponent` (`nlp.add_pipe("elmo_hf", config={...})`). The settings are `Any`:
    spaCy validates annotated factory arguments by its own rules, and `ElmoSpacyComponent` checks them instead."""
    return ElmoSpacyComponent(model, layers, mix_weights, batch_size, device, name=name)
