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
"""

import numpy as np

try:
    from spacy.language import Language
    from spacy.util import minibatch
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError('elmo_hf.integrations.spacy needs spaCy 3: pip install "elmo-hf[spacy]"') from error

from ..embedder import ElmoEmbedder


class ElmoSpacyComponent:
    r"""
    Args:
        model (str, optional): a checkpoint folder or Hub name; defaults to `elmo_hf.DEFAULT_MODEL`.
        layers (str, defaults to "average"), mix_weights (list of floats): as for `ElmoEmbedder.embed_sentences`,
            except "all".
        batch_size (int, defaults to 64): sentences per model call at most.
        device (str, optional): where the biLM runs (default: where it loads, the CPU).
    """

    def __init__(self, model=None, layers="average", mix_weights=None, batch_size=64, device=None):
        if layers == "all":
            raise ValueError('layers="all" gives several vectors per word; use "average", "top" or "mix"')
        self.embedder = ElmoEmbedder.from_pretrained(model, device=device)
        self.embedder._layer_weights(layers, mix_weights)  # checks them now rather than at the first doc
        self.layers, self.mix_weights, self.batch_size = layers, mix_weights, batch_size

    def __call__(self, doc):
        self._set_vectors([doc])
        return doc

    def pipe(self, docs, batch_size=None):
        for batch in minibatch(docs, size=batch_size or self.batch_size):
            self._set_vectors(batch)
            yield from batch

    def _set_vectors(self, docs):
        """Embed the sentences of `docs` in one go and give each doc its tensor and hooks."""
        sentences, places = [], []  # places: (doc index, token indices of the sentence's words)
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


# The hooks are module-level functions so that docs stay picklable (nlp.pipe with n_process > 1).


def token_vector(token):
    return token.doc.tensor[token.i]


def span_vector(span):
    words = [token.i for token in span if not token.is_space]
    if not words:
        return np.zeros(span.doc.tensor.shape[1], dtype=np.float32)
    return span.doc.tensor[words].mean(axis=0)


def doc_vector(doc):
    return span_vector(doc[:])


def has_vector(_):
    return True


def similarity(this, other):
    """The cosine of the two ELMo vectors (0.0 when either is all zeros)."""
    a, b = this.vector, other.vector
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
def make_elmo_component(nlp, name, model, layers, mix_weights, batch_size, device):
    """spaCy's factory for `ElmoSpacyComponent` (`nlp.add_pipe("elmo_hf", config={...})`)."""
    return ElmoSpacyComponent(model, layers, mix_weights, batch_size, device)
