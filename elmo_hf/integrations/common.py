"""What the front ends share: loading a checkpoint with the tokenizer it needs, and one-line checks of their settings.

A checkpoint converted from ELMoForManyLangs reads a character lexicon (`config.char_vocabulary == "lexicon"`): its
words become rows of lexicon ids, one more column for the word id when it has a word embedding, so only the
tokenizer saved beside it can encode text for it. Every other checkpoint takes bilm-tf's byte ids, which a tokenizer
built from `config.max_characters_per_token` gives.
"""

import math
import os
import reprlib
from numbers import Real
from typing import Any

from .. import DEFAULT_MODEL
from ..hub.shipped_models import shipped_model_path
from ..model.modeling_elmo import ElmoModel
from ..model.tokenization_elmo import ElmoTokenizer

SINGLE_VECTOR_LAYERS = ("average", "top", "mix")

_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60


def shown(value: object) -> str:
    """`repr(value)`, shortened to fit in a one-line message."""
    return _short.repr(value)


def load_checkpoint(
    name_or_path: str | os.PathLike[str] | None = None, **hub_kwargs: Any
) -> tuple[ElmoModel, ElmoTokenizer]:
    """(`ElmoModel`, its `ElmoTokenizer`) of a checkpoint folder or Hub name (None: `elmo_hf.DEFAULT_MODEL`);
    `hub_kwargs` go to `from_pretrained` (subfolder, token, cache_dir, revision, local_files_only). A value that is not
    a path or a name is a TypeError, a checkpoint that cannot be read an OSError, each one line naming it."""
    if name_or_path is None:
        name_or_path = DEFAULT_MODEL
    name_or_path = shipped_model_path(name_or_path)
    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path).strip():
        raise TypeError(f"model must be a checkpoint folder or a Hub model name, got {shown(name_or_path)}")
    try:
        model = ElmoModel.from_pretrained(name_or_path, **hub_kwargs)
        tokenizer = None
        if model.config.char_vocabulary == "lexicon":
            tokenizer = ElmoTokenizer.from_pretrained(name_or_path, **hub_kwargs)
    except OSError as error:
        reason = " ".join(str(error).split())  # transformers' messages can span lines
        raise OSError(f"model {str(name_or_path)!r} cannot be loaded: {reason}") from None
    return model, checkpoint_tokenizer(model, tokenizer)


def checkpoint_tokenizer(model: ElmoModel, tokenizer: ElmoTokenizer | None = None) -> ElmoTokenizer:
    """The tokenizer that encodes text for `model` (an `ElmoModel`): `tokenizer` when given; for a model that reads a
    character lexicon, the one saved with the checkpoint it was loaded from (`model.name_or_path`); else a byte
    tokenizer for its `max_characters_per_token`."""
    if tokenizer is not None:
        if not isinstance(tokenizer, ElmoTokenizer):
            raise TypeError(f"tokenizer must be an ElmoTokenizer, got {type(tokenizer).__name__}")
        return tokenizer
    if model.config.char_vocabulary != "lexicon":
        return ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    if not model.name_or_path:
        raise ValueError(
            "the model reads a character lexicon (converted from ELMoForManyLangs) but was not loaded from a "
            "checkpoint: pass tokenizer=ElmoTokenizer.from_pretrained(<its folder>)"
        )
    return ElmoTokenizer.from_pretrained(model.name_or_path)


def check_single_vector_layers(layers: object, mix_weights: object) -> None:
    """One-line ValueErrors for the `layers` and `mix_weights` of a front end that gives one vector per word. The
    number of weights is checked against the model by `ElmoEmbedder._layer_weights`."""
    if layers == "all":
        raise ValueError('layers="all" gives several vectors per word; use "average", "top" or "mix"')
    if not isinstance(layers, str) or layers not in SINGLE_VECTOR_LAYERS:
        raise ValueError(f'layers must be "average", "top" or "mix", got {shown(layers)}')
    if layers != "mix":
        if mix_weights is not None:
            raise ValueError(
                f'mix_weights go with layers="mix" only; got layers={layers!r}, mix_weights={shown(mix_weights)}'
            )
        return
    if (
        not isinstance(mix_weights, (list, tuple))
        or not mix_weights
        or not all(isinstance(w, Real) and not isinstance(w, bool) and math.isfinite(w) for w in mix_weights)
    ):
        raise ValueError(
            f'layers="mix" needs mix_weights, a list of finite numbers (one per layer), got {shown(mix_weights)}'
        )


def check_positive_int(name: str, value: object, allow_none: bool = False) -> None:
    """A ValueError naming `name` and `value` unless it is a positive int (or None when `allow_none`)."""
    if allow_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        expected = "a positive int or None" if allow_none else "a positive int"
        raise ValueError(f"{name} must be {expected}, got {shown(value)}")
