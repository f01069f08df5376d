"""Every derived copy of a weight is fresh (`elmo_hf/model/weight_cache.py`): whichever way the weights change after a
forward has built the copies, the next forward gives the new weights' outputs, on the reference path, the packed
float32 path (batches and single sentences), bfloat16 and int8 (each against a fresh model in the same mode)."""

import pytest
import torch
from helpers import random_batch, tiny_config, tiny_model

from elmo_hf import ElmoEmbedder, ElmoModel, ElmoTokenCache
from elmo_hf.model import cpu_kernels, weight_cache

pytestmark = pytest.mark.usefixtures("one_thread")

ATOL = 1e-5


def other_weights(model, seed):
    """Another model's state (the same shapes, dtypes and int8 tensors or not), far from `model`'s."""
    other = tiny_model(seed=seed).quantize_weights(model.encoder.weight_quantization)
    return {
        name: value.to(model.dtype) if value.is_floating_point() else value
        for name, value in other.state_dict().items()
    }


def blend(tensor, value):
    """`tensor` halfway to `value` in place, through `.data` (int8 tensors rounded)."""
    if tensor.is_floating_point():
        tensor.data.mul_(0.5).add_(value, alpha=0.5)
    else:
        tensor.data.copy_(((tensor.float() + value.float()) / 2).round())


def adamw(**options):
    def update(model):
        quantization = model.encoder.weight_quantization
        model.quantize_weights(None).train()  # int8 weights are for inference: trained in float32
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, **options)
        ids, _ = random_batch(torch.Generator().manual_seed(9), 3, 5, model.config.max_characters_per_token)
        model(ids).last_hidden_state.square().sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        model.quantize_weights(quantization).eval()

    return update


def data_copy(model):
    """Every tensor of the state (the int8 weights and scales too) written through `.data`."""
    with torch.no_grad():
        for name, value in other_weights(model, 11).items():
            model.state_dict(keep_vars=True)[name].data.copy_(value)


def exponential_moving_average(model):
    with torch.no_grad():
        for name, value in other_weights(model, 12).items():
            blend(model.state_dict(keep_vars=True)[name], value)


def load_state_dict(model):
    model.load_state_dict(other_weights(model, 13))


def load_state_dict_assign(model):
    model.load_state_dict({name: value.clone() for name, value in other_weights(model, 14).items()}, assign=True)


def dtype_round_trip(model):
    """Through a coarser dtype and back: new storage (perhaps at the old addresses) and rounded values."""
    dtype = model.dtype
    model.to(torch.float8_e5m2 if dtype == torch.bfloat16 else torch.bfloat16).to(dtype)


def device_round_trip(model):
    """To storage-less tensors and back to new CPU storage, then the weights loaded (the route of `to_empty`)."""
    state = other_weights(model, 15)
    model.to("meta").to_empty(device="cpu")
    model.load_state_dict(state)


def requires_grad_toggle(model):
    """Gradients switched off (the path stays the kernels'), the weights written, gradients back on."""
    model.requires_grad_(False)
    data_copy(model)
    model.requires_grad_(True)


UPDATES = {
    "fused AdamW": adamw(fused=True),
    "foreach AdamW": adamw(foreach=True),
    "plain AdamW": adamw(foreach=False),
    ".data copy_": data_copy,
    "EMA .data mul_/add_": exponential_moving_average,
    "load_state_dict": load_state_dict,
    "load_state_dict(assign=True)": load_state_dict_assign,
    "dtype round trip": dtype_round_trip,
    "device round trip": device_round_trip,
    "requires_grad_ toggles": requires_grad_toggle,
}

MODES = {
    "reference": dict(lstm_implementation="reference"),
    "packed float32": {},
    "packed float32, one sentence": dict(batch=1),
    "bfloat16": dict(dtype=torch.bfloat16),
    "int8": dict(quantize="int8"),
}


def prepared(model, mode):
    options = MODES[mode]
    model.config.lstm_implementation = options.get("lstm_implementation", "auto")
    model.to(options.get("dtype", torch.float32))
    if options.get("quantize"):
        model.quantize_weights(options["quantize"])
    return model


def layers(model, input_ids):
    with torch.no_grad():
        return torch.stack(model(input_ids, output_hidden_states=True).hidden_states).float()


def fresh_copy(model, mode):
    """A new model of `model`'s weights (its int8 ones when quantized), in the same mode."""
    fresh = ElmoModel(model.config)
    fresh.load_state_dict(
        {name: value.float() if value.is_floating_point() else value for name, value in model.state_dict().items()}
    )
    return prepared(fresh.eval(), mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("update", UPDATES)
def test_the_next_forward_uses_the_new_weights(update, mode):
    if mode == "int8" and not cpu_kernels.int8_products_available():
        pytest.skip("no int8 engine in this PyTorch")
    model = prepared(tiny_model(seed=1), mode)
    batch = MODES[mode].get("batch", 4)
    input_ids, _ = random_batch(torch.Generator().manual_seed(2), batch, 6, model.config.max_characters_per_token)
    before = layers(model, input_ids)  # builds the derived copies
    UPDATES[update](model)
    if mode == "int8":  # updates that move through other dtypes, or through float32 training, leave it int8 again
        assert model.dtype == torch.float32 and model.encoder.weight_quantization == "int8"
    after = layers(model, input_ids)
    expected = layers(fresh_copy(model, mode), input_ids)
    torch.testing.assert_close(after, expected, rtol=0, atol=ATOL)
    assert (after - before).abs().max() > 100 * ATOL  # the update did move the outputs


def test_from_pretrained_into_an_existing_model(tmp_path):
    """A head's biLM replaced by one loaded from a checkpoint (the old one dropped first, so that its storage's
    addresses may be reused)."""
    from elmo_hf import ElmoForTokenClassification

    head = ElmoForTokenClassification(tiny_config(num_labels=3)).eval()
    head.elmo.load_state_dict(tiny_model(seed=3).state_dict())
    input_ids, _ = random_batch(torch.Generator().manual_seed(4), 4, 6, head.config.max_characters_per_token)
    before = layers(head.elmo, input_ids)
    tiny_model(seed=5).save_pretrained(tmp_path)
    del head.elmo
    head.elmo = ElmoModel.from_pretrained(tmp_path).eval()
    after = layers(head.elmo, input_ids)
    torch.testing.assert_close(after, layers(tiny_model(seed=5), input_ids), rtol=0, atol=ATOL)
    assert (after - before).abs().max() > 100 * ATOL


def test_the_token_cache_follows_the_character_encoders_weights():
    model = tiny_model(seed=6)
    input_ids, _ = random_batch(torch.Generator().manual_seed(7), 4, 6, model.config.max_characters_per_token)
    cache = ElmoTokenCache(model.character_encoder, input_ids.flatten(0, 1)[:10])
    with torch.no_grad():
        before = model(input_ids, token_cache=cache).last_hidden_state
        for parameter in model.character_encoder.parameters():
            parameter.data.mul_(0.5)  # no version counter moves
        after = model(input_ids, token_cache=cache).last_hidden_state
        uncached = model(input_ids).last_hidden_state
    torch.testing.assert_close(after, uncached, rtol=0, atol=ATOL)
    assert (after - before).abs().max() > 100 * ATOL


@pytest.mark.skipif(not cpu_kernels.int8_products_available(), reason="no int8 engine in this PyTorch")
def test_the_token_cache_follows_an_int8_highways_weights():
    """A write to the int8 weights of a quantized model's highways alone (no parameter changes)."""
    model = tiny_model(seed=6).quantize_weights("int8").eval()
    input_ids, _ = random_batch(torch.Generator().manual_seed(7), 4, 6, model.config.max_characters_per_token)
    cache = ElmoTokenCache(model.character_encoder, input_ids.flatten(0, 1)[:10])
    with torch.no_grad():
        before = model(input_ids, token_cache=cache).last_hidden_state
        model.character_encoder.highways[0].transform.weight_int8.neg_()
        after = model(input_ids, token_cache=cache).last_hidden_state
        new_cache = ElmoTokenCache(model.character_encoder, input_ids.flatten(0, 1)[:10])
        expected = model(input_ids, token_cache=new_cache).last_hidden_state  # (the uncached CNN runs in bfloat16)
    torch.testing.assert_close(after, expected, rtol=0, atol=ATOL)
    assert (after - before).abs().max() > 100 * ATOL


def test_the_embedders_token_cache_follows_a_dtype_change():
    embedder = ElmoEmbedder(tiny_model(seed=8))
    embedder.set_token_cache(["the", "cat", "sat"])
    sentence = ["the", "cat", "sat", "down"]
    embedder.embed_sentence(sentence)
    embedder.model.to(torch.bfloat16)
    cached = embedder.embed_sentence(sentence)
    embedder.set_token_cache(None)
    torch.testing.assert_close(torch.from_numpy(cached), torch.from_numpy(embedder.embed_sentence(sentence)))


@pytest.mark.parametrize("mode", ["bfloat16", "int8"])
def test_an_embedder_call_checks_each_copy_once_and_the_next_call_sees_new_weights(mode, monkeypatch):
    if mode == "int8" and not cpu_kernels.int8_products_available():
        pytest.skip("no int8 engine in this PyTorch")
    model = prepared(tiny_model(seed=16), mode)
    embedder = ElmoEmbedder(model)
    sentences = [["the", "cat"], ["a", "dog", "ran"], ["it", "sat", "down", "here"]]
    embedder.embed_sentences(sentences)  # builds the copies
    checked = []
    original = weight_cache.fingerprint
    monkeypatch.setattr(weight_cache, "fingerprint", lambda tensor: checked.append(tensor) or original(tensor))
    with torch.no_grad():
        model(**embedder.tokenizer([sentences[0]], is_split_into_words=True, return_tensors="pt"))
    per_forward = len(checked)
    checked.clear()
    before = embedder.embed_sentences(sentences, batch_size=1)  # three forwards, one call
    assert per_forward > 0 and len(checked) == per_forward
    data_copy(model)  # between calls: no version counter moves
    after = embedder.embed_sentences(sentences, batch_size=1)
    expected = ElmoEmbedder(fresh_copy(model, mode)).embed_sentences(sentences, batch_size=1)
    for new, old, fresh in zip(after, before, expected):
        torch.testing.assert_close(torch.from_numpy(new), torch.from_numpy(fresh), rtol=0, atol=ATOL)
        assert abs(new - old).max() > 100 * ATOL


def test_a_fingerprint_sees_every_flipped_bit_in_blocks_and_tails(monkeypatch):
    monkeypatch.setattr(weight_cache, "_BLOCK_WORDS", 2)  # 23 bfloat16: two blocks of two words, one word, 6 bytes
    weight = torch.randn(23, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    assert weight_cache.fingerprint(weight).shape == (2 + 1 + 6,)
    original = weight_cache.fingerprint(weight)
    data = weight.view(torch.uint8)
    for byte in range(data.numel()):
        for bit in range(8):
            changed = data.clone()
            changed[byte] ^= 1 << bit
            assert not torch.equal(weight_cache.fingerprint(changed.view(torch.bfloat16)), original), (byte, bit)


def test_a_fingerprint_sees_moved_values_and_reads_unaligned_views(monkeypatch):
    monkeypatch.setattr(weight_cache, "_BLOCK_WORDS", 2)  # blocks of 4 float32
    weight = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    original = weight_cache.fingerprint(weight)
    assert not torch.equal(weight_cache.fingerprint(weight[[1, 0, 2, 3]]), original)  # rows swapped
    assert not torch.equal(weight_cache.fingerprint(weight[:, [1, 0, 2, 3, 4, 5, 6, 7]]), original)  # inside a word
    assert not torch.equal(weight_cache.fingerprint(weight[:, [4, 1, 2, 3, 0, 5, 6, 7]]), original)  # across blocks
    # The documented blind spot: whole words exchanged inside one block.
    assert torch.equal(weight_cache.fingerprint(weight[:, [2, 3, 0, 1, 4, 5, 6, 7]]), original)
    unaligned = weight.reshape(-1)[1:]  # starts 4 bytes into the storage
    assert torch.equal(weight_cache.fingerprint(unaligned), weight_cache.fingerprint(unaligned.clone()))
    assert torch.equal(weight_cache.fingerprint(weight.t()), weight_cache.fingerprint(weight.t().contiguous()))


def test_a_trainer_evaluates_the_model_it_saves(tmp_path):
    """The Trainer's default optimizer (fused AdamW) on an unfrozen biLM, evaluated between steps: the last evaluation
    is the saved checkpoint's, reloaded."""
    Dataset = pytest.importorskip("datasets").Dataset  # a test extra; absent on some GPU images
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    from elmo_hf import ElmoForTokenClassification, ElmoTokenizer

    tiny_model(seed=10).save_pretrained(tmp_path / "bilm")
    torch.manual_seed(0)
    head_options = dict(num_labels=3, freeze_bilm=False, task_encoder_hidden_size=8, scalar_mix_dropout=0.0)
    model = ElmoForTokenClassification.from_pretrained(tmp_path / "bilm", **head_options)
    tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    sentences = [["the", "cat", "sat"], ["a", "dog", "ran", "far"], ["it", "sat"], ["the", "mat"]] * 4
    rows = []
    for words in sentences:
        encoding = tokenizer(words, is_split_into_words=True)
        labels = [-100 if word is None else len(words[word]) % 3 for word in encoding.word_ids()]
        rows.append({"input_ids": encoding["input_ids"], "labels": labels})
    dataset = Dataset.from_list(rows)
    arguments = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=4,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        learning_rate=0.05,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    assert arguments.optim == "adamw_torch_fused"
    collator = DataCollatorForTokenClassification(tokenizer)
    trainer = Trainer(model=model, args=arguments, train_dataset=dataset, eval_dataset=dataset, data_collator=collator)
    trainer.train()  # evaluates after steps 2 and 4: the biLM's copies are built at step 2
    metrics = trainer.evaluate()
    trainer.save_model(tmp_path / "saved")
    reloaded = ElmoForTokenClassification.from_pretrained(tmp_path / "saved")
    reloaded_metrics = Trainer(model=reloaded, args=arguments, eval_dataset=dataset, data_collator=collator).evaluate()
    assert metrics["eval_loss"] == pytest.approx(reloaded_metrics["eval_loss"], rel=1e-5)
    first_evaluation = next(entry for entry in trainer.state.log_history if "eval_loss" in entry)
    assert first_evaluation["eval_loss"] != pytest.approx(metrics["eval_loss"], rel=1e-3)  # the biLM did train
