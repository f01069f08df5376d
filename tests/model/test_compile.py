"""`torch.compile`: every model class gives its eager outputs and gradients compiled, alone and under the Trainer.

Compiled, `ElmoModel.forward` runs the reference path (`lstm_paths.py`), so these tests compare that compiled path
with the eager fast paths ("cpu_kernels" in eval, "packed" with gradients). They compile with the `aot_eager` backend:
Dynamo's graph capture and AOTAutograd's forward and backward graphs, which decide whether a model compiles, whether
it breaks its graph and what it computes, without Inductor's C++ code generation, which takes minutes for the
unrolled loops on a loaded 2-core machine. `benchmarks/benchmark_compile.py` checks Inductor's outputs against eager
at a real size.
"""

import pytest
import torch
from datasets import Dataset
from helpers import WORDS, random_batch, tiny_config
from torch._dynamo.testing import CompileCounterWithBackend
from transformers import Trainer, TrainingArguments

from elmo_hf import ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel

BACKEND = "aot_eager"
ATOL = 1e-5
BATCH, WORDS_PER_ROW = 3, 3
# Dropout off: compiled and eager code draw their random numbers differently.
CONFIG = dict(
    num_labels=3,
    vocab_size=len(WORDS),
    num_sampled_negatives=5,
    classifier_dropout=0.0,
    scalar_mix_dropout=0.0,
    task_encoder_hidden_size=4,
    freeze_bilm=False,
)
# The graphs each class compiles to (1: no graph break); `_can_compile_fullgraph` says True exactly where it is 1.
# The heads run their task biLSTM eagerly (Dynamo takes no nn.LSTM), the language model its sampled softmax
# in training (its sampler draws until it has enough distinct classes, once per direction); in eval it is one graph.
GRAPHS = {ElmoModel: 1, ElmoForTokenClassification: 2, ElmoForSequenceClassification: 2, ElmoForPreTraining: 3}


@pytest.fixture(autouse=True)
def fresh_compiler():
    """Each test compiles afresh: compiled code is cached per function (ElmoModel.forward serves every class), and
    past the cache's limit of recompilations Dynamo would run the function eagerly."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def build(model_class, seed=0):
    torch.manual_seed(seed)
    model = model_class(tiny_config(**CONFIG))
    with torch.no_grad():  # activations far from zero, as helpers.tiny_model
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model


def inputs_for(model_class):
    input_ids, lengths = random_batch(torch.Generator().manual_seed(1), BATCH, WORDS_PER_ROW, chars=20)
    mask = torch.arange(WORDS_PER_ROW) < lengths.unsqueeze(1)  # (batch, words)
    labels = {
        ElmoModel: None,
        ElmoForTokenClassification: torch.randint(0, 3, mask.shape).masked_fill(~mask, -100),
        ElmoForSequenceClassification: torch.tensor([0, 2, 1]),
        ElmoForPreTraining: torch.randint(0, len(WORDS), mask.shape).masked_fill(~mask, -100),
    }[model_class]
    return dict(input_ids=input_ids, attention_mask=mask.long(), **({} if labels is None else {"labels": labels}))


def outputs_and_loss(model, inputs):
    """The output tensors and a scalar to differentiate (the loss, or a sum over ElmoModel's outputs)."""
    torch.manual_seed(2)  # the sampled softmax draws the same negatives in every run
    output = model(**inputs)
    tensors = [value for value in output.values() if isinstance(value, torch.Tensor)]
    if "loss" in output:
        return tensors, output.loss
    cell, hidden = output.lstm_states
    return tensors + [cell, hidden], output.last_hidden_state.square().sum() + hidden.sum()


@pytest.mark.parametrize("model_class", list(GRAPHS), ids=lambda model_class: model_class.__name__)
def test_the_compiled_model_gives_the_eager_outputs_and_gradients(model_class):
    model, inputs = build(model_class), inputs_for(model_class)
    assert model_class._can_compile_fullgraph == (GRAPHS[model_class] == 1)
    graphs = CompileCounterWithBackend(BACKEND)  # counts the graphs it compiles
    compiled = torch.compile(model, backend=graphs, dynamic=False, fullgraph=model_class._can_compile_fullgraph)

    model.eval()
    with torch.no_grad():
        expected, _ = outputs_and_loss(model, inputs)
        actual, _ = outputs_and_loss(compiled, inputs)
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    assert graphs.frame_count == (1 if model_class is ElmoForPreTraining else GRAPHS[model_class])

    model.train()
    expected, loss = outputs_and_loss(model, inputs)
    loss.backward()
    expected_grads = {name: parameter.grad.clone() for name, parameter in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    graphs.clear()
    actual, loss = outputs_and_loss(compiled, inputs)
    loss.backward()
    assert graphs.frame_count == GRAPHS[model_class]
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    for name, parameter in model.named_parameters():
        # Each gradient within 1e-5 of its largest value: the two paths sum over words in different orders.
        scale = max(1.0, float(expected_grads[name].abs().max()))
        torch.testing.assert_close(parameter.grad, expected_grads[name], rtol=0, atol=ATOL * scale, msg=name)


def test_a_quantized_model_refuses_to_compile():
    model = build(ElmoModel).eval().quantize_weights("int8")
    inputs = inputs_for(ElmoModel)
    with torch.no_grad(), pytest.raises(Exception, match="quantized to int8 do not run under torch.compile"):
        torch.compile(model, backend=BACKEND, dynamic=False, fullgraph=True)(**inputs)


class _RecordingTrainer(Trainer):
    """A Trainer that keeps every step's loss unrounded (its logs round them to 4 decimals)."""

    losses = None

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        loss = super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
        self.losses.append(float((loss[0] if return_outputs else loss).detach()))
        return loss


def trainer_losses(model_class, compile_model, folder):
    """The loss of each of 4 Trainer steps (batches of 4 rows) from the same model and data."""
    model = build(model_class)
    input_ids, lengths = random_batch(torch.Generator().manual_seed(10), 16, WORDS_PER_ROW, chars=20)
    mask = torch.arange(WORDS_PER_ROW) < lengths.unsqueeze(1)  # (rows, words)
    classes = len(WORDS) if model_class is ElmoForPreTraining else CONFIG["num_labels"]
    labels = torch.randint(0, classes, mask.shape, generator=torch.Generator().manual_seed(11)).masked_fill(~mask, -100)
    rows = [
        {"input_ids": ids, "attention_mask": row_mask.long(), "labels": row_labels}
        for ids, row_mask, row_labels in zip(input_ids, mask, labels)
    ]
    arguments = TrainingArguments(
        output_dir=str(folder),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        logging_strategy="no",
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
        torch_compile=compile_model,
        torch_compile_backend=BACKEND if compile_model else None,
    )
    trainer = _RecordingTrainer(model=model, args=arguments, train_dataset=Dataset.from_list(rows).with_format("torch"))
    trainer.losses = []
    trainer.train()
    assert not compile_model or torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # it did compile
    return trainer.losses


@pytest.mark.parametrize("model_class", [ElmoForTokenClassification, ElmoForPreTraining], ids=["head", "biLM"])
def test_the_trainer_with_torch_compile_follows_the_eager_loss_curve(tmp_path, model_class):
    eager = trainer_losses(model_class, False, tmp_path / "eager")
    compiled = trainer_losses(model_class, True, tmp_path / "compiled")
    assert len(eager) == 4 and len(set(eager)) == 4  # the model learns: every step's loss differs
    assert compiled == pytest.approx(eager, rel=1e-5)
