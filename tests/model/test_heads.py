"""Task heads: the scalar mix, the CRF, token and sequence classifiers, loading from a biLM, round trips."""

import itertools
import json
import textwrap

import pytest
import torch
import torch.nn.functional as F
from helpers import run_offline_without_repository, tiny_config, tiny_model
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoScalarMix
from elmo_hf.model.modeling_elmo import ElmoCrf

SENTENCES = [["John", "lives", "in", "Paris", "."], ["Hi", "there"], ["A"]]


def encode(tokenizer, sentences=SENTENCES):
    return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")


def word_labels(encoding, per_word):
    """Labels (batch, words): per_word(sentence, word) at word positions, -100 at boundaries and padding."""
    rows = []
    for row in range(encoding["input_ids"].shape[0]):
        rows.append([-100 if w is None else per_word(row, w) for w in encoding.word_ids(row)])
    return torch.tensor(rows)


def head_with_random_weights(head_class, seed=0, **overrides):
    torch.manual_seed(seed)
    model = head_class(tiny_config(**overrides))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    return model.eval()


def assert_within_guarantee(actual, expected, task_encoder_layers=0):
    """docs/guarantees.md's bound for batch-mates and padding: within 1e-6 times the largest absolute value (at
    least 1); 1e-5 with a task biLSTM, whose weights amplify the biLM's rounding (measured: 1.8e-6 relative)."""
    assert actual.shape == expected.shape
    bound = (1e-6 if task_encoder_layers == 0 else 1e-5) * max(expected.abs().max().item(), 1.0)
    difference = (actual - expected).abs().max().item()
    assert difference <= bound, f"differs by {difference:.3g}, bound {bound:.3g}"


# ---- ElmoScalarMix ----


def random_layers(seed=0, batch=2, words=4, dim=6, num_layers=3):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, words, dim, generator=generator) * (j + 1) + j for j in range(num_layers)]


def test_scalar_mix_is_gamma_times_softmax_weighted_sum():
    mix = ElmoScalarMix(3, initial_weights=[0.5, -1.0, 2.0])
    with torch.no_grad():
        mix.gamma.fill_(1.7)
    layers = random_layers()
    mask = torch.ones(2, 4, dtype=torch.bool)
    weights = torch.exp(torch.tensor([0.5, -1.0, 2.0]))
    weights = weights / weights.sum()
    expected = 1.7 * sum(w * h for w, h in zip(weights, layers))
    torch.testing.assert_close(mix.normalized_weights, weights)
    torch.testing.assert_close(mix(layers, mask), expected)


def test_scalar_mix_starts_equal_and_learns():
    mix = ElmoScalarMix(3)
    assert mix.weights.tolist() == [0.0, 0.0, 0.0]
    assert ElmoScalarMix(3, initial_weights=[1.0, 2.0, 3.0]).l2_penalty().item() == 0.0  # no L2 unless asked
    torch.testing.assert_close(mix.normalized_weights, torch.full((3,), 1 / 3))
    assert mix.gamma.item() == 1.0
    mix(random_layers(), torch.ones(2, 4, dtype=torch.bool)).sum().backward()
    assert mix.weights.grad is not None and mix.gamma.grad is not None


def test_fixed_scalar_mix_has_no_trainable_parameters():
    mix = ElmoScalarMix(3, trainable=False)
    assert not any(parameter.requires_grad for parameter in mix.parameters())


def test_scalar_mix_layer_norm_uses_one_mean_and_variance_over_the_real_words():
    layers = random_layers(words=5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    mix = ElmoScalarMix(3, initial_weights=[1.0, 0.0, -1.0], do_layer_norm=True)
    normalised = []
    for layer in layers:
        values = layer[mask]  # (real words, dim)
        normalised.append((layer - values.mean()) / torch.sqrt(values.var(unbiased=False) + 1e-12))
    expected = sum(w * h for w, h in zip(mix.normalized_weights, normalised))
    actual = mix(layers, mask)
    torch.testing.assert_close(actual[mask], expected[mask])
    # Padded positions do not influence the statistics.
    changed = [layer.masked_fill(~mask.unsqueeze(-1), 1e3) for layer in layers]
    torch.testing.assert_close(mix(changed, mask)[mask], actual[mask])


def test_scalar_mix_layer_norm_of_a_constant_layer_is_zero_not_nan():
    layers = random_layers()
    layers[1] = torch.full_like(layers[1], 2.5)  # variance 0: only the epsilon keeps the division finite
    mix = ElmoScalarMix(3, do_layer_norm=True)
    mixed = mix(layers, torch.ones(2, 4, dtype=torch.bool))
    assert torch.isfinite(mixed).all()
    expected = ElmoScalarMix(3, do_layer_norm=True)(
        [layers[0], torch.zeros_like(layers[1]), layers[2]], torch.ones(2, 4, dtype=torch.bool)
    )
    torch.testing.assert_close(mixed, expected)


def test_scalar_mix_l2_penalty_and_dropout():
    mix = ElmoScalarMix(3, initial_weights=[1.0, -2.0, 0.5], l2_coef=0.1, dropout=0.5)
    torch.testing.assert_close(mix.l2_penalty(), torch.tensor(0.1 * (1 + 4 + 0.25)))
    layers, mask = random_layers(), torch.ones(2, 4, dtype=torch.bool)
    mix.train()
    dropped = mix(layers, mask)
    assert (dropped == 0).float().mean() > 0.2
    mix.eval()
    kept = mix(layers, mask)
    nonzero = dropped != 0
    torch.testing.assert_close(dropped[nonzero], 2 * kept[nonzero])


def test_scalar_mix_rejects_a_wrong_number_of_layers():
    with pytest.raises(ValueError, match="ElmoScalarMix was built for 3 layers, got 2"):
        ElmoScalarMix(3)(random_layers(num_layers=2), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"initial_weights must have 3 values \(one per layer\), got \[1.0\]"):
        ElmoScalarMix(3, initial_weights=[1.0])


@pytest.mark.parametrize("use_output_elmo", [False, True])
def test_l2_penalty_is_added_to_the_head_loss(tokenizer, use_output_elmo):
    encoding = encode(tokenizer)
    labels = word_labels(encoding, lambda row, word: word % 3)
    options = dict(num_labels=3, use_output_elmo=use_output_elmo)
    with_l2 = head_with_random_weights(ElmoForTokenClassification, scalar_mix_l2_coef=0.25, **options)
    without = head_with_random_weights(ElmoForTokenClassification, scalar_mix_l2_coef=0.0, **options)
    mixes = [with_l2.task_encoder.input_mix] + ([with_l2.task_encoder.output_mix] if use_output_elmo else [])
    penalty = 0.25 * sum((mix.weights**2).sum() for mix in mixes)  # every mix
    assert penalty > 0
    torch.testing.assert_close(
        with_l2(**encoding, labels=labels).loss, without(**encoding, labels=labels).loss + penalty
    )


# ---- CRF ----


def brute_force(crf, emissions, length):
    """Log partition and best path of one row by enumerating every tag sequence."""
    scores = {}
    for path in itertools.product(range(emissions.shape[-1]), repeat=length):
        score = crf.start_transitions[path[0]] + crf.end_transitions[path[-1]]
        score = score + sum(emissions[t, tag] for t, tag in enumerate(path))
        score = score + sum(crf.transitions[a, b] for a, b in zip(path, path[1:]))
        scores[path] = score
    all_scores = torch.stack(list(scores.values()))
    return torch.logsumexp(all_scores, 0), list(max(scores, key=lambda p: scores[p]))


def test_crf_likelihood_and_viterbi_match_brute_force():
    torch.manual_seed(0)
    crf = ElmoCrf(3)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.copy_(torch.randn_like(parameter))
    emissions = torch.randn(3, 4, 3)
    lengths = [4, 2, 1]
    mask = torch.arange(4) < torch.tensor(lengths).unsqueeze(1)
    tags = torch.randint(0, 3, (3, 4))
    log_likelihood = crf.log_likelihood(emissions, tags, mask)
    paths = crf.decode(emissions, mask)
    for row, length in enumerate(lengths):
        log_partition, best = brute_force(crf, emissions[row], length)
        path = tags[row, :length].tolist()
        score = crf.start_transitions[path[0]] + crf.end_transitions[path[-1]]
        score = score + sum(emissions[row, t, tag] for t, tag in enumerate(path))
        score = score + sum(crf.transitions[a, b] for a, b in zip(path, path[1:]))
        torch.testing.assert_close(log_likelihood[row], score - log_partition)
        assert paths[row] == best


def test_crf_head_decodes_only_the_labelled_words(tokenizer):
    model = head_with_random_weights(ElmoForTokenClassification, num_labels=3, use_crf=True)
    encoding = encode(tokenizer)
    labels = word_labels(encoding, lambda row, word: word % 3)
    output = model(**encoding, labels=labels)
    assert output.loss > 0
    predictions = model.decode(output.logits, labels != -100)
    assert [len(p) for p in predictions] == [len(s) for s in SENTENCES]
    # Each row alone decodes to the same tags: padding and batch-mates do not matter.
    for row, sentence in enumerate(SENTENCES):
        alone = encode(tokenizer, [sentence])
        alone_labels = word_labels(alone, lambda r, word: 0)
        assert model.decode(model(**alone).logits, alone_labels != -100)[0] == predictions[row]


# ---- token classification ----


def test_token_classification_loss_ignores_minus_100(tokenizer):
    model = head_with_random_weights(ElmoForTokenClassification, num_labels=4, use_output_elmo=True)
    encoding = encode(tokenizer)
    labels = word_labels(encoding, lambda row, word: (row + word) % 4)
    output = model(**encoding, labels=labels)
    assert output.logits.shape == (3, 7, 4)
    scored = labels != -100
    expected = F.cross_entropy(output.logits[scored], labels[scored])
    torch.testing.assert_close(output.loss, expected)


@pytest.mark.parametrize("task_encoder_layers", [0, 2])
def test_token_logits_do_not_depend_on_padding_or_batch_mates(tokenizer, task_encoder_layers):
    model = head_with_random_weights(
        ElmoForTokenClassification, num_labels=3, task_encoder_layers=task_encoder_layers, use_output_elmo=True
    )
    batched = model(**encode(tokenizer)).logits
    for row, sentence in enumerate(SENTENCES):
        alone = model(**encode(tokenizer, [sentence])).logits[0]
        assert_within_guarantee(batched[row, : alone.shape[0]], alone, task_encoder_layers)


def test_token_labels_must_match_the_words(tokenizer):
    model = head_with_random_weights(ElmoForTokenClassification, num_labels=3)
    encoding = encode(tokenizer)
    with pytest.raises(
        ValueError,
        match=r"labels must have shape \(3, 7\) \(batch, words\), one per word of "
        r"input_ids, got \(3, 6\)",
    ):
        model(**encoding, labels=torch.zeros(3, 6, dtype=torch.long))


def test_head_needs_num_labels():
    config = tiny_config()
    config.id2label = {}
    with pytest.raises(
        ValueError,
        match=r"ElmoForTokenClassification needs config.num_labels \(or id2label\), "
        r"got num_labels=0",
    ):
        ElmoForTokenClassification(config)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("scalar_mix_initial_weights", [1.0, 2.0], "scalar_mix_initial_weights must have num_lstm_layers"),
        ("scalar_mix_dropout", 1.0, r"scalar_mix_dropout must be a number in \[0, 1\), got 1.0"),
        ("task_encoder_layers", -1, "task_encoder_layers must be a non-negative int, got -1"),
        ("use_crf", "yes", "use_crf must be a bool, got 'yes'"),
        ("scalar_mix_l2_coef", -0.1, "scalar_mix_l2_coef must be a non-negative number, got -0.1"),
    ],
)
def test_head_config_fields_are_validated(field, value, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**{field: value})


# ---- how a head is built and called ----


@pytest.mark.parametrize("task_encoder_layers", [1, 2])
def test_head_config_reaches_the_mixes_and_the_task_encoder(task_encoder_layers):
    head = ElmoForTokenClassification(
        tiny_config(
            num_labels=3,
            use_output_elmo=True,
            scalar_mix_initial_weights=[0.5, -1.0, 2.0],
            scalar_mix_dropout=0.25,
            task_encoder_layers=task_encoder_layers,
            task_encoder_hidden_size=6,
            classifier_dropout=0.125,
        )
    )
    encoder = head.task_encoder
    for mix in (encoder.input_mix, encoder.output_mix):
        assert mix.weights.tolist() == [0.5, -1.0, 2.0] and mix.dropout.p == 0.25
    assert encoder.dropout.p == 0.125
    lstm = encoder.lstm
    assert (lstm.num_layers, lstm.hidden_size, lstm.bidirectional, lstm.batch_first) == (
        task_encoder_layers,
        6,
        True,
        True,
    )
    assert lstm.input_size == 8 + 16  # x_k (projection_dim) and ELMo_k (2 * projection_dim)
    assert encoder.output_size == 2 * 6 + 16 and head.classifier.in_features == 2 * 6 + 16


@pytest.mark.parametrize("head_class", [ElmoForTokenClassification, ElmoForSequenceClassification])
def test_heads_follow_the_attention_mask(tokenizer, head_class):
    # Masking the last two positions ("Paris", </S>) gives what the input cut before them gives.
    model = head_with_random_weights(head_class, num_labels=3, use_output_elmo=True)
    input_ids = encode(tokenizer, [["John", "lives", "in", "Paris"]])["input_ids"]  # (1, 6, chars)
    attention_mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    masked = model(input_ids=input_ids, attention_mask=attention_mask).logits
    cut = model(input_ids=input_ids[:, :4]).logits
    assert_within_guarantee(masked[:, :4] if head_class is ElmoForTokenClassification else masked, cut)


@pytest.mark.parametrize("head_class", [ElmoForTokenClassification, ElmoForSequenceClassification])
def test_precomputed_elmo_hidden_states_give_the_same_logits_loss_and_gradients(tokenizer, head_class):
    model = head_with_random_weights(head_class, num_labels=3, use_output_elmo=True, task_encoder_layers=1)
    encoding = encode(tokenizer)
    if head_class is ElmoForTokenClassification:
        labels = word_labels(encoding, lambda row, word: word % 3)
    else:
        labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        layers = model.elmo(**encoding, output_hidden_states=True).hidden_states
    precomputed = torch.stack(layers, dim=1)  # (batch, layers, words, 2 * projection_dim)
    expected = model(**encoding, labels=labels)
    expected.loss.backward()
    expected_gradients = [p.grad.clone() for p in model.parameters() if p.requires_grad]
    model.zero_grad()
    output = model(elmo_hidden_states=precomputed, attention_mask=encoding["attention_mask"], labels=labels)
    output.loss.backward()
    assert torch.equal(output.logits, expected.logits) and torch.equal(output.loss, expected.loss)
    for gradient, expected_gradient in zip([p.grad for p in model.parameters() if p.requires_grad], expected_gradients):
        assert torch.equal(gradient, expected_gradient)


def test_precomputed_elmo_hidden_states_are_checked(tokenizer):
    model = head_with_random_weights(ElmoForTokenClassification, num_labels=3)
    encoding = encode(tokenizer)
    with torch.no_grad():
        layers = torch.stack(model.elmo(**encoding, output_hidden_states=True).hidden_states, dim=1)
    expected = r"elmo_hidden_states must have shape \(batch, 3, words, 16\) .* got \(3, 2, 7, 16\)"
    with pytest.raises(ValueError, match=expected):
        model(elmo_hidden_states=layers[:, :2], attention_mask=encoding["attention_mask"])
    with pytest.raises(ValueError, match=r"elmo_hidden_states needs attention_mask of shape \(3, 7\), got None"):
        model(elmo_hidden_states=layers)
    model.task_encoder.freeze_bilm = False
    with pytest.raises(ValueError, match="elmo_hidden_states: precomputed biLM layers need config.freeze_bilm=True"):
        model(elmo_hidden_states=layers, attention_mask=encoding["attention_mask"])


def test_heads_pad_their_output_to_the_input_width_with_a_task_bilstm(tokenizer):
    # Every sentence shorter than the padded width: the task biLSTM's output is padded back to it.
    model = head_with_random_weights(ElmoForTokenClassification, num_labels=3, task_encoder_layers=1)
    encoding = tokenizer(SENTENCES, is_split_into_words=True, padding="max_length", max_length=12, return_tensors="pt")
    logits = model(**encoding).logits
    assert logits.shape == (3, 12, 3)
    assert_within_guarantee(logits[:, :7], model(**encode(tokenizer)).logits, task_encoder_layers=1)


def test_freeze_bilm_decides_whether_the_bilm_gets_gradients(tokenizer):
    encoding = encode(tokenizer)
    labels = word_labels(encoding, lambda row, word: word % 3)
    for freeze in (True, False):
        model = head_with_random_weights(ElmoForTokenClassification, num_labels=3, freeze_bilm=freeze).train()
        model(**encoding, labels=labels).loss.backward()
        bilm_gradients = [parameter.grad for parameter in model.elmo.parameters()]
        if freeze:
            assert all(gradient is None for gradient in bilm_gradients)
        else:
            assert all(gradient is not None and gradient.abs().sum() > 0 for gradient in bilm_gradients)
        # no_grad is honoured either way: the biLM builds no graph (its layers reach the task encoder without one).
        seen = []
        handle = model.elmo.register_forward_hook(lambda module, args, output: seen.append(output.hidden_states[-1]))
        with torch.no_grad():
            model(**encoding)
        handle.remove()
        assert not seen[0].requires_grad


@pytest.mark.parametrize("head_class", [ElmoForTokenClassification, ElmoForSequenceClassification])
def test_heads_return_tuples_when_asked(tokenizer, head_class):
    encoding = encode(tokenizer)
    labels = (
        torch.tensor([0, 1, 2])
        if head_class is ElmoForSequenceClassification
        else word_labels(encoding, lambda row, word: word % 3)
    )
    model = head_with_random_weights(head_class, num_labels=3)
    expected = model(**encoding, labels=labels)
    as_tuple = model(**encoding, labels=labels, return_dict=False)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 2
    assert torch.equal(as_tuple[0], expected.loss) and torch.equal(as_tuple[1], expected.logits)
    (logits,) = model(**encoding, return_dict=False)  # no labels: no loss in the tuple
    assert torch.equal(logits, expected.logits)
    model.config.return_dict = False  # the config's default, when the call does not say
    assert isinstance(model(**encoding), tuple) and not isinstance(model(**encoding, return_dict=True), tuple)


# ---- sequence classification ----


def test_sequence_classification_problem_types(tokenizer):
    encoding = encode(tokenizer)
    regression = head_with_random_weights(ElmoForSequenceClassification, num_labels=1)
    target = torch.tensor([0.5, -1.0, 2.0])
    output = regression(**encoding, labels=target)
    assert regression.config.problem_type == "regression"
    torch.testing.assert_close(output.loss, F.mse_loss(output.logits.squeeze(-1), target))

    single = head_with_random_weights(ElmoForSequenceClassification, num_labels=3, task_encoder_layers=0)
    classes = torch.tensor([2, 0, 1])
    output = single(**encoding, labels=classes)
    assert single.config.problem_type == "single_label_classification"
    assert output.logits.shape == (3, 3)
    torch.testing.assert_close(output.loss, F.cross_entropy(output.logits, classes))

    multi = head_with_random_weights(ElmoForSequenceClassification, num_labels=3)
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    output = multi(**encoding, labels=targets)
    assert multi.config.problem_type == "multi_label_classification"
    torch.testing.assert_close(output.loss, F.binary_cross_entropy_with_logits(output.logits, targets))


@pytest.mark.parametrize("task_encoder_layers", [0, 1])
def test_sequence_pooling_ignores_padding(tokenizer, task_encoder_layers):
    model = head_with_random_weights(
        ElmoForSequenceClassification, num_labels=2, task_encoder_layers=task_encoder_layers
    )
    batched = model(**encode(tokenizer)).logits
    for row, sentence in enumerate(SENTENCES):
        assert_within_guarantee(batched[row], model(**encode(tokenizer, [sentence])).logits[0], task_encoder_layers)


# ---- loading from a biLM, round trips ----


@pytest.mark.parametrize("auto_class", [AutoModelForTokenClassification, AutoModelForSequenceClassification])
def test_head_from_a_bilm_checkpoint_loads_the_bilm_and_reports_the_new_weights(tmp_path, auto_class):
    bilm = tiny_model(seed=3)
    bilm.save_pretrained(tmp_path)
    head, info = auto_class.from_pretrained(
        tmp_path, num_labels=3, id2label={0: "O", 1: "B-X", 2: "I-X"}, output_loading_info=True
    )
    for name, parameter in bilm.state_dict().items():
        torch.testing.assert_close(head.elmo.state_dict()[name], parameter, rtol=0, atol=0)
    head_only = {name for name in head.state_dict() if not name.startswith("elmo.")}
    assert set(info["missing_keys"]) == head_only
    assert not info["unexpected_keys"]
    assert head.config.id2label == {0: "O", 1: "B-X", 2: "I-X"}
    assert not any(p.requires_grad for p in head.elmo.parameters())
    assert all(p.requires_grad for name, p in head.named_parameters() if not name.startswith("elmo."))
    torch.testing.assert_close(head.task_encoder.input_mix.normalized_weights, torch.full((3,), 1 / 3))

    unfrozen = auto_class.from_pretrained(tmp_path, num_labels=3, freeze_bilm=False)
    assert all(p.requires_grad for p in unfrozen.elmo.parameters())


def test_token_head_round_trip(tmp_path, tokenizer):
    model = head_with_random_weights(
        ElmoForTokenClassification, num_labels=3, use_crf=True, use_output_elmo=True, scalar_mix_trainable=False
    )
    model.save_pretrained(tmp_path)
    loaded = AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    assert type(loaded) is ElmoForTokenClassification
    encoding = encode(tokenizer)
    for name, parameter in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], parameter, rtol=0, atol=0)
    torch.testing.assert_close(loaded(**encoding).logits, model(**encoding).logits, rtol=1e-5, atol=1e-5)
    assert not loaded.task_encoder.input_mix.weights.requires_grad
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForTokenClassification"] == "modeling_elmo.ElmoForTokenClassification"
    assert config["use_crf"] is True


def test_round_trip_through_trust_remote_code_without_the_package(tmp_path, tokenizer):
    model = head_with_random_weights(ElmoForSequenceClassification, num_labels=2)
    model.save_pretrained(tmp_path)
    encoding = encode(tokenizer)
    (tmp_path / "inputs.json").write_text(
        json.dumps({"input_ids": encoding["input_ids"].tolist(), "attention_mask": encoding["attention_mask"].tolist()})
    )
    child = textwrap.dedent(
        f"""
        import json, sys, torch
        sys.modules["elmo_hf"] = None  # importing the package now fails: only the saved code can be used
        from transformers import AutoModelForSequenceClassification
        model = AutoModelForSequenceClassification.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)
        inputs = {{k: torch.tensor(v) for k, v in json.load(open({str(tmp_path / "inputs.json")!r})).items()}}
        print(type(model).__module__)
        print(json.dumps(model.eval()(**inputs).logits.tolist()))
        """
    )
    result = run_offline_without_repository(child, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    module, logits = result.stdout.strip().splitlines()[-2:]
    assert not module.startswith("elmo_hf")
    torch.testing.assert_close(torch.tensor(json.loads(logits)), model(**encoding).logits)


# ---- pipelines ----


def test_feature_extraction_and_text_classification_pipelines_on_raw_text(tokenizer):
    from transformers import pipeline

    text = "John lives in Paris."
    bilm = tiny_model()
    features = pipeline("feature-extraction", model=bilm, tokenizer=tokenizer)(text)
    expected = bilm(**tokenizer(text, return_tensors="pt")).last_hidden_state
    torch.testing.assert_close(torch.tensor(features), expected)

    classifier = head_with_random_weights(
        ElmoForSequenceClassification, num_labels=2, id2label={0: "negative", 1: "positive"}
    )
    result = pipeline("text-classification", model=classifier, tokenizer=tokenizer)(text)
    with torch.no_grad():
        probabilities = classifier(**tokenizer(text, return_tensors="pt")).logits.softmax(-1)[0]
    assert result == [
        {
            "label": classifier.config.id2label[int(probabilities.argmax())],
            "score": pytest.approx(float(probabilities.max()), rel=1e-5),
        }
    ]
