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
TF Hub.
"""

import torch

from ..tokenization_elmo import ElmoTokenizer


def tf_hub_elmo(model, tokens, sequence_len=None, layer_weights=None, gamma=1.0, tokenizer=None):
    r"""
    Args:
        model (`ElmoModel`): the biLM (run as it is: put it in eval mode for inference).
        tokens (list of str, or list of lists of str): with `sequence_len`, sentences of words padded with anything
            (TF Hub: "") to one length; without it, untokenized sentences, split on spaces.
        sequence_len (list of ints, optional): each sentence's number of words.
        layer_weights (sequence of `num_lstm_layers + 1` floats or a tensor, optional): the scalars softmax-normalized
            into the `elmo` mix; default zeros (equal weights).
        gamma (float or tensor, defaults to 1.0): the scale of the `elmo` mix.
        tokenizer (`ElmoTokenizer`, optional): defaults to one for the model's config.

    Returns:
        a dict of tensors: word_emb, lstm_outputs1 ... lstm_outputsN (one per LSTM layer), elmo, default.
    """
    if sequence_len is None:
        sentences = [sentence.split(" ") for sentence in tokens]
        sentences = [[word for word in sentence if word] for sentence in sentences]
    else:
        if len(sequence_len) != len(tokens):
            raise ValueError(f"sequence_len has {len(sequence_len)} lengths for {len(tokens)} sentences")
        sentences = []
        for index, (row, length) in enumerate(zip(tokens, sequence_len)):
            if not 1 <= int(length) <= len(row):
                raise ValueError(f"sequence_len[{index}] is {length}, expected 1..{len(row)} (the padded length)")
            sentences.append(list(row[: int(length)]))
    tokenizer = tokenizer or ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    encoded = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    device = next(model.parameters()).device
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
    num_layers = layers.shape[1]
    if layer_weights is None:
        layer_weights = torch.zeros(num_layers)
    layer_weights = torch.as_tensor(layer_weights, dtype=layers.dtype, device=device)
    if layer_weights.shape != (num_layers,):
        raise ValueError(f"layer_weights needs {num_layers} values, got shape {tuple(layer_weights.shape)}")
    mix = torch.softmax(layer_weights, dim=0)  # (layers,)
    average = layers.mean(dim=1)  # (batch, max_length, 2 * D)
    outputs = {"word_emb": layers[:, 0, :, : model.config.projection_dim]}
    for layer in range(1, num_layers):
        outputs[f"lstm_outputs{layer}"] = layers[:, layer]
    outputs["elmo"] = gamma * torch.einsum("l,blwd->bwd", mix, layers)
    outputs["default"] = average.sum(dim=1) / lengths.unsqueeze(1).to(average.dtype)  # (batch, 2 * D)
    return outputs
