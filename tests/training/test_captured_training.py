"""The captured training step (`elmo_hf/captured_training.py`) on the CPU: its bucketing, its padded layout against
`PackedSteps`, the loss and gradients of the padded step against the eager `ElmoForPreTraining` (float64, the same
negatives), and no host sync or data-dependent shape inside the step (it runs on the meta device, where every such
operation fails)."""

import pytest
import torch
from helpers import WORDS, random_batch, tiny_lm

from elmo_hf.model.lstm_training_kernel import bilstm_training_forward
from elmo_hf.training.captured_training import PaddedSteps, PreTrainingStep, bucket_shape


def test_bucket_shape():
    assert bucket_shape(64, 57) == (64, 64)
    assert bucket_shape(33, 8) == (64, 8)
    assert bucket_shape(1, 1) == (1, 8)
    assert bucket_shape(5, 17) == (8, 24)
    with pytest.raises(ValueError, match=r"shape \(0, 3\)"):
        bucket_shape(0, 3)


def lm_and_batch(seed=0, lengths=(7, 3, 1, 5, 2), width=None, **overrides):
    """A float64 tiny biLM in training mode, without dropout, and a batch with `lengths` words (boundaries
    included), labels drawn from WORDS."""
    model = tiny_lm(seed, pretraining_dropout=0.0, **overrides).double().train()
    generator = torch.Generator().manual_seed(seed)
    width = width or max(lengths)
    input_ids, _ = random_batch(generator, len(lengths), width, model.config.max_characters_per_token)
    mask = torch.arange(width) < torch.tensor(lengths).unsqueeze(1)
    input_ids = input_ids.masked_fill(~mask.unsqueeze(-1), 0)
    input_ids[mask] = input_ids[mask].clamp(min=1)  # no all-zero word inside a row
    labels = torch.randint(0, len(WORDS), mask.shape, generator=generator).masked_fill(~mask, -100)
    return model, input_ids, mask.long(), labels


def test_padded_layout_gives_the_packed_outputs():
    """Every row through every step (PaddedSteps): the layers' outputs and final states of the packed layout."""
    model, input_ids, mask, _ = lm_and_batch()
    mask = mask.bool()
    encoder = model.elmo.encoder
    inputs = torch.randn(*mask.shape, model.config.projection_dim, dtype=torch.float64)
    inputs = inputs.masked_fill(~mask.unsqueeze(-1), 0.0)
    cells = torch.zeros(2, 2, len(mask), model.config.lstm_dim, dtype=torch.float64)
    hiddens = torch.zeros(2, 2, len(mask), model.config.projection_dim, dtype=torch.float64)
    expected = bilstm_training_forward(encoder, inputs, mask, cells, hiddens, zero_state=True)
    # Padded further than the batch, as a bucket pads it: two more words of padding.
    wide_mask = torch.cat([mask, torch.zeros(len(mask), 2, dtype=torch.bool)], dim=1)
    wide_inputs = torch.cat([inputs, inputs.new_zeros(len(mask), 2, inputs.shape[-1])], dim=1)
    steps = PaddedSteps(wide_mask.sum(dim=1), wide_mask.shape[1])
    actual = bilstm_training_forward(encoder, wide_inputs, wide_mask, cells, hiddens, zero_state=True, steps=steps)
    for layer, expected_layer in zip(actual[0], expected[0]):
        torch.testing.assert_close(layer[:, : mask.shape[1]], expected_layer, rtol=0, atol=1e-13)
        assert (layer[:, mask.shape[1] :] == 0).all()
    torch.testing.assert_close(actual[1], expected[1], rtol=0, atol=1e-13)
    torch.testing.assert_close(actual[2], expected[2], rtol=0, atol=1e-13)


@pytest.mark.parametrize("negatives", [5, 0])
def test_padded_step_gives_the_eager_loss_and_gradients(negatives):
    """The bucketed step (rows 5 -> 8, words 7 -> 8) against the eager model's loss and gradients, the same
    negatives drawn (the sampler's generator reseeded), clipping included."""
    model, input_ids, mask, labels = lm_and_batch(num_sampled_negatives=negatives)
    torch.manual_seed(3)
    loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    expected = [parameter.grad.clone() for parameter in model.parameters()]
    for parameter in model.parameters():
        parameter.grad = None

    step = PreTrainingStep(model, max_grad_norm=0.5)
    torch.manual_seed(3)
    actual_loss = step(input_ids, mask, labels)
    assert list(step.buckets) == [(8, 8)]
    torch.testing.assert_close(actual_loss, loss.detach(), rtol=0, atol=1e-12)
    for parameter, expected_grad in zip(model.parameters(), expected):
        torch.testing.assert_close(parameter.grad, expected_grad, rtol=0, atol=1e-12)
    # A second batch of the same bucket reuses its static inputs: the step is a function of the batch alone.
    torch.manual_seed(3)
    assert torch.equal(step(input_ids, mask, labels), actual_loss)


SYNCS = ("item", "tolist", "cpu", "numpy", "nonzero", "__bool__", "__int__", "__float__", "__index__")


def test_step_makes_no_host_sync(monkeypatch):
    """The whole captured work (loss, backward, clipping) on the meta device, with the tensor methods that read
    values on the host made to fail: a host sync or a data-dependent shape anywhere in it fails the test, as it would
    fail a CUDA graph capture."""
    model, input_ids, mask, labels = lm_and_batch()
    model = model.to("meta")
    step = PreTrainingStep(model, max_grad_norm=1.0, capture=False)
    draws = [step._draw(), step._draw()]  # on the host, before the step (as the GPU step draws them)
    from elmo_hf.training.captured_training import _BucketStep

    bucket = _BucketStep(step, 8, 8, input_ids.shape[-1])
    bucket.load(input_ids.to("meta"), mask.to("meta"), labels.to("meta"), [(ids, f) for ids, f in draws])

    def refuse(name):
        def method(*args, **kwargs):
            raise AssertionError(f"host sync in the training step: Tensor.{name}")

        return method

    for name in SYNCS:
        monkeypatch.setattr(torch.Tensor, name, refuse(name))
    loss = step._step(bucket)
    assert loss.device.type == "meta" and loss.shape == ()
    # The check bites: the eager model's step (its input checks, distinct words, boolean indexing) fails it.
    with pytest.raises((AssertionError, RuntimeError, NotImplementedError)):
        model(input_ids=bucket.input_ids, attention_mask=bucket.mask.long(), labels=bucket.labels).loss.backward()
    assert all(parameter.grad.device.type == "meta" for parameter in step.parameters)
