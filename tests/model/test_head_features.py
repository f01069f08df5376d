"""The heads' features computed by hand from `ElmoModel`'s `hidden_states`.

Each test sets known mix weights and gamma through the state dict, gives the classifier fixed weights, captures
the classifier's input with a forward hook and compares it with the paper's recipe written out here in float64,
one sentence at a time over its real words only:

- token head: `[x_k; ELMo_k]` (x_k: the first half of layer 0), then the task biLSTM if any, then `ELMo'_k`;
- `ELMo_k = gamma * sum_j softmax(w)_j * h_j`, with `h_j` normalised by one mean and variance over all features
  of the batch's real words when `scalar_mix_do_layer_norm`;
- sequence head: `[max_k f_k; mean_k f_k]` over each sentence's real words.

Only public module attributes are used (`elmo`, `task_encoder.input_mix`, `task_encoder.output_mix`,
`task_encoder.lstm`, `classifier`).
"""

import pytest
import torch
from helpers import tiny_config

from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification

# Sentences of different lengths, so that the batch has padding.
SENTENCES = [["John", "lives", "in", "Paris", "."], ["Hi", "there"], ["A", "b", "c"]]
INPUT_WEIGHTS = [0.7, -1.2, 0.4]
OUTPUT_WEIGHTS = [-0.5, 1.5, 0.1]
INPUT_GAMMA, OUTPUT_GAMMA = 1.7, 0.6
# The hand computation is float64; the model is float32 (values up to ~10), so agreement is float32 rounding.
TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def head_with_known_mixes(head_class, num_labels=3, **overrides):
    """A head with random biLM and task-LSTM weights, known mix weights and gammas, and a fixed classifier."""
    torch.manual_seed(0)
    model = head_class(tiny_config(num_labels=num_labels, task_encoder_hidden_size=5, **overrides))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    state = model.state_dict()
    state["task_encoder.input_mix.weights"] = torch.tensor(INPUT_WEIGHTS)
    state["task_encoder.input_mix.gamma"] = torch.tensor([INPUT_GAMMA])
    if model.task_encoder.output_mix is not None:
        state["task_encoder.output_mix.weights"] = torch.tensor(OUTPUT_WEIGHTS)
        state["task_encoder.output_mix.gamma"] = torch.tensor([OUTPUT_GAMMA])
    inputs = model.classifier.in_features
    # Fixed classifier: row i weighs feature f by cos(i + f / 3), bias i / 10.
    grid = torch.arange(num_labels)[:, None] + torch.arange(inputs)[None, :] / 3.0
    state["classifier.weight"] = torch.cos(grid)
    state["classifier.bias"] = torch.arange(num_labels) / 10.0
    model.load_state_dict(state)
    return model.eval()


def run_with_classifier_input(model, encoding):
    """The model's output and the input its classifier received."""
    captured = []
    handle = model.classifier.register_forward_hook(lambda module, args, output: captured.append(args[0]))
    try:
        with torch.no_grad():
            output = model(**encoding)
    finally:
        handle.remove()
    (classifier_input,) = captured
    return output, classifier_input.double()


def bilm_layers(model, encoding):
    """The biLM's layers `(num_layers, batch, words, 2 * projection_dim)` in float64 and the real-word mask."""
    with torch.no_grad():
        output = model.elmo(**encoding, output_hidden_states=True)
    mask = encoding["attention_mask"].bool()
    return torch.stack(output.hidden_states).double(), mask


def hand_mix(layers, mask, weights, gamma, layer_norm):
    """gamma * sum_j softmax(weights)_j * h_j, per the paper; with layer norm, each h_j is normalised by the mean and
    variance over all features of the batch's real words. Returns `(batch, words, dim)` float64."""
    exponentials = [torch.exp(torch.tensor(weight, dtype=torch.float64)) for weight in weights]
    total = sum(exponentials)
    mixed = torch.zeros_like(layers[0])
    for exponential, layer in zip(exponentials, layers):
        if layer_norm:
            real = layer[mask]  # (real words, dim)
            mean = real.mean()
            variance = ((real - mean) ** 2).mean()
            layer = (layer - mean) / torch.sqrt(variance + 1e-12)
        mixed = mixed + exponential / total * layer
    return gamma * mixed


def hand_token_features(model, encoding, layer_norm, output_mix):
    """What the classifier must see for each sentence: a list of `(length, features)` float64 tensors."""
    layers, mask = bilm_layers(model, encoding)
    projection_dim = model.config.projection_dim
    elmo = hand_mix(layers, mask, INPUT_WEIGHTS, INPUT_GAMMA, layer_norm)
    elmo_out = hand_mix(layers, mask, OUTPUT_WEIGHTS, OUTPUT_GAMMA, layer_norm) if output_mix else None
    sentences = []
    for row in range(mask.shape[0]):
        length = int(mask[row].sum())
        x = layers[0, row, :length, :projection_dim]  # x_k: the token layer, one direction's copy
        features = torch.cat([x, elmo[row, :length]], dim=-1)
        if model.task_encoder.lstm is not None:
            with torch.no_grad():  # the task biLSTM on this sentence alone, no padding
                features, _ = model.task_encoder.lstm(features[None].float())
            features = features[0].double()
        if output_mix:
            features = torch.cat([features, elmo_out[row, :length]], dim=-1)
        sentences.append(features)
    return sentences


def linear(model, features):
    return features @ model.classifier.weight.double().T + model.classifier.bias.double()


def head_variants(test):
    """Run `test` for every combination of layer norm, output mix and task biLSTM layers."""
    test = pytest.mark.parametrize("layer_norm", [False, True], ids=["plain_mix", "layer_norm"])(test)
    test = pytest.mark.parametrize("output_mix", [False, True], ids=["input_mix", "output_mix"])(test)
    return pytest.mark.parametrize("task_encoder_layers", [0, 1])(test)


def run_head(head_class, tokenizer, layer_norm, output_mix, task_encoder_layers):
    """The head with known mixes, the padded batch of SENTENCES, the output, the classifier's input and the hand
    computed per-sentence features."""
    model = head_with_known_mixes(
        head_class,
        scalar_mix_do_layer_norm=layer_norm,
        use_output_elmo=output_mix,
        task_encoder_layers=task_encoder_layers,
    )
    encoding = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    output, classifier_input = run_with_classifier_input(model, encoding)
    return model, encoding, output, classifier_input, hand_token_features(model, encoding, layer_norm, output_mix)


@head_variants
def test_token_head_sees_token_layer_and_mixes(tokenizer, layer_norm, output_mix, task_encoder_layers):
    model, encoding, output, classifier_input, sentences = run_head(
        ElmoForTokenClassification, tokenizer, layer_norm, output_mix, task_encoder_layers
    )
    for row, expected in enumerate(sentences):
        length = expected.shape[0]
        torch.testing.assert_close(classifier_input[row, :length], expected, **TOLERANCE)
        torch.testing.assert_close(output.logits[row, :length].double(), linear(model, expected), **TOLERANCE)
    # Padded positions reach the classifier as zeros.
    padding = ~encoding["attention_mask"].bool()
    assert torch.equal(classifier_input[padding], torch.zeros_like(classifier_input[padding]))


@head_variants
def test_sequence_head_pools_max_and_mean_over_real_words(tokenizer, layer_norm, output_mix, task_encoder_layers):
    model, encoding, output, classifier_input, sentences = run_head(
        ElmoForSequenceClassification, tokenizer, layer_norm, output_mix, task_encoder_layers
    )
    for row, features in enumerate(sentences):
        pooled = torch.cat([features.amax(dim=0), features.mean(dim=0)])  # over this sentence's real words only
        torch.testing.assert_close(classifier_input[row], pooled, **TOLERANCE)
        torch.testing.assert_close(output.logits[row].double(), linear(model, pooled), **TOLERANCE)
    # The test is only as strong as its data: some features are negative at every real word of a padded sentence
    # (so a max over padding zeros would differ) and padding exists (so a mean over all positions would differ).
    assert (sentences[1].amax(dim=0) < 0).any()
    assert sentences[1].shape[0] < encoding["attention_mask"].shape[1]
