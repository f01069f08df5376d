"""TensorFlow Hub's ELMo calling style on `ElmoModel`: its two signatures and its five outputs, in PyTorch.

    from elmo_hf import ElmoModel
    from elmo_hf.integrations.tf_hub import tf_hub_elmo

    model = ElmoModel.from_pretrained("./elmo-original")
    # The "tokens" signature: words padded with "" to one length, and each sentence's length.
    outputs = tf_hub_elmo(model, [["the", "cat", "is", "on", "the", "mat"], ["dogs", "are", "in", "the", "fog", ""]],
                          sequence_len=[6, 5])
    # The "default" signature: untokenized sentences, split on spaces.
    outputs = tf_hub_elmo(model, ["the cat is on the mat", "dogs are in the fog"])
    outputs["elmo"]  # (2, 6, 1024)

The outputs, as TF Hub's module documents them (`D = projection_dim`, 512 for the original model):
    word_emb (batch, max_length, D): the character-based word representations (the char-CNN's output, once: the
        model's layer 0 is it twice, one copy per direction).
    lstm_outputs1, lstm_outputs2 (batch, max_length, 2 * D): the first and second biLSTM layers.
    elmo (batch, max_length, 2 * D): `gamma * sum_k softmax(layer_weights)_k * layer_k` over the three layers. In
        TF Hub those four scalars are the module's trainable variables; their initial values (weights 0, gamma 1)
        make it the average of the layers, which is the default here.
    default (batch, 2 * D): a fixed mean-pooling: the mean over each sentence's words of the average of the layers.
Positions past a sentence's length are zero. The `<S>`/`</S>` boundaries are added inside and not returned, as in
TF Hub. A model converted from ELMoForManyLangs needs no `tokenizer=`: the one saved with its checkpoint is read.
Malformed input (an empty batch, a bare string, a word that is not a string, a length outside the row) is a
one-line ValueError or TypeError naming the value and its place.
"""

from collections.abc import Sequence
from numbers import Real

import numpy as np
import torch

from ..model.modeling_elmo import ElmoModel
from ..model.tokenization_elmo import ElmoTokenizer
from .common import checkpoint_tokenizer, shown


def tf_hub_elmo(
    model: ElmoModel,
    tokens: Sequence[str] | Sequence[Sequence[str]] | np.ndarray,
    sequence_len: Sequence[int] | np.ndarray | torch.Tensor | None = None,
    layer_weights: Sequence[float] | torch.Tensor | None = None,
    gamma: float | torch.Tensor = 1.0,
    tokenizer: ElmoTokenizer | None = None,
) -> dict[str, torch.Tensor]:
    r"""
    Args:
        model (`ElmoModel`): the biLM (run as it is: put it in eval mode for inference).
        tokens (list of str, or list of lists of str): with `sequence_len`, sentences of words padded with anything
            (TF Hub: "") to one length; without it, untokenized sentences, split on spaces.
        sequence_len (list of ints, optional): each sentence's number of words.
        layer_weights (sequence of `num_lstm_layers + 1` floats or a tensor, optional): the scalars softmax-normalized
            into the `elmo` mix; default zeros (equal weights).
        gamma (float or tensor, defaults to 1.0): the scale of the `elmo` mix.
        tokenizer (`ElmoTokenizer`, optional): defaults to the one the model's checkpoint needs (for a model converted
            from ELMoForManyLangs, the one saved with it).

    Returns:
        a dict of tensors: word_emb, lstm_outputs1 ... lstm_outputsN (one per LSTM layer), elmo, default.
    """
    if not isinstance(model, ElmoModel):
        raise TypeError(f"model must be an ElmoModel, got {type(model).__name__}")
    sentences = _sentences(tokens, sequence_len)
    parameter = next(model.parameters())
    num_layers = model.config.num_lstm_layers + 1
    mix = torch.softmax(_layer_weights(layer_weights, num_layers, parameter), dim=0)  # (layers,)
    if not (isinstance(gamma, Real) or (isinstance(gamma, torch.Tensor) and gamma.numel() == 1)):
        raise TypeError(f"gamma must be a number or a one-element tensor, got {shown(gamma)}")
    tokenizer = checkpoint_tokenizer(model, tokenizer)
    encoded = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    device = parameter.device
    output = model(
        input_ids=encoded["input_ids"].to(device),
        attention_mask=encoded["attention_mask"].to(device),
        output_hidden_states=True,
    )
    layers = torch.stack(output.hidden_states, dim=1)[:, :, 1:-1]  # (batch, layers, longest, 2 * D): no <S>
    lengths = torch.tensor([len(words) for words in sentences], device=device)  # (batch,)
    max_length = max(len(row) for row in tokens) if sequence_len is not None else layers.shape[2]
    words = torch.arange(max_length, device=device) < lengths.unsqueeze(1)  # (batch, max_length)
    if max_length > layers.shape[2]:  # padded to a longer length than the longest sentence
        layers = torch.nn.functional.pad(layers, (0, 0, 0, max_length - layers.shape[2]))
    layers = layers.masked_fill(~words[:, None, :, None], 0.0)  # a shorter sentence's </S> and padding zeroed
    average = layers.mean(dim=1)  # (batch, max_length, 2 * D)
    outputs = {"word_emb": layers[:, 0, :, : model.config.projection_dim]}
    for layer in range(1, num_layers):
        outputs[f"lstm_outputs{layer}"] = layers[:, layer]
    outputs["elmo"] = gamma * torch.einsum("l,blwd->bwd", mix.to(layers.dtype), layers)
    outputs["default"] = average.sum(dim=1) / lengths.unsqueeze(1).to(average.dtype)  # (batch, 2 * D)
    return outputs


def _sentences(
    tokens: Sequence[str] | Sequence[Sequence[str]] | np.ndarray,
    sequence_len: Sequence[int] | np.ndarray | torch.Tensor | None,
) -> list[list[str]]:
    """The words of each sentence, from either signature's input; one-line errors naming the bad value."""
    if isinstance(tokens, str):
        raise TypeError(f"tokens must be a list of sentences, got the string {shown(tokens)}; wrap it: [sentence]")
    if isinstance(tokens, np.ndarray):  # TF users' string arrays
        tokens = tokens.tolist()
    if not isinstance(tokens, (list, tuple)):
        raise TypeError(f"tokens must be a list of sentences, got {type(tokens).__name__}: {shown(tokens)}")
    if not tokens:
        raise ValueError("tokens is empty: give at least one sentence")
    if sequence_len is None:
        sentences = []
        for index, sentence in enumerate(tokens):
            if not isinstance(sentence, str):
                raise TypeError(
                    f"tokens[{index}] must be a string (without sequence_len, tokens are untokenized sentences), "
                    f"got {type(sentence).__name__}: {shown(sentence)}"
                )
            words = [word for word in sentence.split(" ") if word]
            if not words:
                raise ValueError(f"tokens[{index}] has no words: {shown(sentence)}")
            sentences.append(words)
        return sentences
    if isinstance(sequence_len, (np.ndarray, torch.Tensor)):
        sequence_len = sequence_len.tolist()
    if not isinstance(sequence_len, (list, tuple)):
        raise TypeError(f"sequence_len must be a list of ints, got {shown(sequence_len)}")
    if len(sequence_len) != len(tokens):
        raise ValueError(f"sequence_len has {len(sequence_len)} lengths for {len(tokens)} sentences")
    sentences = []
    for index, (row, length) in enumerate(zip(tokens, sequence_len)):
        if isinstance(row, str) or not isinstance(row, (list, tuple)):
            raise TypeError(f"tokens[{index}] must be a list of words, got {type(row).__name__}: {shown(row)}")
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
            raise TypeError(f"sequence_len[{index}] must be an int, got {shown(length)}")
        if not 1 <= length <= len(row):
            raise ValueError(f"sequence_len[{index}] is {length}, expected 1..{len(row)} (the padded length)")
        for position, word in enumerate(row[:length]):
            if not isinstance(word, str):
                kind = type(word).__name__
                raise TypeError(f"tokens[{index}][{position}] must be a string, got {kind}: {shown(word)}")
            if not word.strip():
                raise ValueError(
                    f"tokens[{index}][{position}] is {word!r}, a padding word inside sequence_len[{index}]={length}"
                )
        sentences.append(list(row[:length]))
    return sentences


def _layer_weights(
    layer_weights: Sequence[float] | torch.Tensor | None, num_layers: int, like: torch.Tensor
) -> torch.Tensor:
    """`layer_weights` as a (num_layers,) tensor of `like`'s dtype and device (zeros when None); one-line errors."""
    if layer_weights is None:
        return torch.zeros(num_layers, dtype=like.dtype, device=like.device)
    try:
        weights = torch.as_tensor(layer_weights, dtype=like.dtype, device=like.device)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"layer_weights must be {num_layers} numbers, got {shown(layer_weights)}") from None
    if weights.shape != (num_layers,):
        raise ValueError(f"layer_weights needs {num_layers} values, got shape {tuple(weights.shape)}")
    return weights
