"""The captured training step (`elmo_hf/captured_training.py`) on a GPU: the CUDA graphs of two buckets replayed give
the losses and gradients of the same step run eagerly, and of the eager model, over optimizer steps; a replay makes
no host sync (torch.cuda.set_sync_debug_mode). Skipped without CUDA (tests/test_captured_training.py runs the step on
the CPU)."""

import copy

import pytest
import torch
from helpers import WORDS, random_batch, tiny_lm

from elmo_hf.training.captured_training import PreTrainingStep

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def batches(model, device):
    """Four batches of two buckets ((8, 8) and (4, 16)), on the device."""
    generator = torch.Generator().manual_seed(0)
    result = []
    for lengths in ([7, 3, 1, 5, 2], [6, 6, 2, 4, 1, 8], [12, 3, 9], [16, 2, 5, 5]):
        width = max(lengths)
        input_ids, _ = random_batch(generator, len(lengths), width, model.config.max_characters_per_token)
        mask = torch.arange(width) < torch.tensor(lengths).unsqueeze(1)
        input_ids = input_ids.masked_fill(~mask.unsqueeze(-1), 0)
        input_ids[mask] = input_ids[mask].clamp(min=1)
        labels = torch.randint(0, len(WORDS), mask.shape, generator=generator).masked_fill(~mask, -100)
        result.append((input_ids.to(device), mask.long().to(device), labels.to(device)))
    return result


def train(model, data, step=None):
    """Losses and final gradients of Adagrad steps over `data`: eager model steps, or `step` (a PreTrainingStep)."""
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.2, initial_accumulator_value=1.0)
    torch.manual_seed(5)
    losses = []
    for input_ids, mask, labels in data:
        if step is None:
            optimizer.zero_grad(set_to_none=True)
            loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        else:
            loss = step(input_ids, mask, labels)
        losses.append(loss.detach())
        optimizer.step()
    return torch.stack(losses), [parameter.grad.clone() for parameter in model.parameters()]


def test_captured_step_gives_the_eager_losses():
    device = torch.device("cuda")
    model = tiny_lm(0, pretraining_dropout=0.0).train().to(device)
    data = batches(model, device) * 2  # each bucket replayed
    expected_losses, expected_grads = train(copy.deepcopy(model), data)
    eager_padded = copy.deepcopy(model)
    padded_losses, padded_grads = train(eager_padded, data, PreTrainingStep(eager_padded, 1.0, capture=False))
    captured_step = PreTrainingStep(model, 1.0)
    losses, grads = train(model, data, captured_step)
    assert sorted(captured_step.buckets) == [(4, 16), (8, 8)]
    assert captured_step.capture_failure is None, captured_step.capture_failure
    assert all(bucket.graph is not None for bucket in captured_step.buckets.values())
    torch.testing.assert_close(losses, padded_losses, rtol=0, atol=1e-5)
    torch.testing.assert_close(losses, expected_losses, rtol=0, atol=1e-4)
    for grad, padded, expected in zip(grads, padded_grads, expected_grads):
        torch.testing.assert_close(grad, padded, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(grad, expected, rtol=1e-3, atol=1e-4)

    # A replay of a captured bucket, its inputs loaded from the device and its negatives from pinned memory: no sync.
    input_ids, mask, labels = data[0]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        captured_step(input_ids, mask, labels)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
