"""Gradient checkpointing (`gradient_checkpointing_enable()`, the Trainer's `gradient_checkpointing=True`): the
character encoder and each biLSTM layer run again in the backward instead of keeping their activations, on the
reference and the packed path, and the gradients stay those of the model without it. The memory it saves is
measured by benchmarks/gradient_checkpointing_memory.py (docs/training.md)."""

import pytest
import torch
from helpers import random_batch, tiny_config, tiny_model
from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

from elmo_hf import ElmoForSequenceClassification
from elmo_hf.model.lstm_paths import lstm_path

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # transformers 5.2x calls these names deprecated aliases of activation_checkpointing*; 5.0 has only them.
    pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.*:FutureWarning"),
]


def loss_and_gradients(model, input_ids, dropout):
    """A loss reading every layer and the final state, and its gradient for every parameter."""
    torch.manual_seed(3)  # the same dropout masks with and without checkpointing
    output = model(input_ids, output_hidden_states=True, lstm_dropout=dropout)
    values = (*output.hidden_states, *output.lstm_states)
    generator = torch.Generator().manual_seed(1)
    loss = sum((value * torch.randn(value.shape, generator=generator, dtype=value.dtype)).sum() for value in values)
    model.zero_grad(set_to_none=True)
    loss.backward()  # (reentrant checkpoints refuse torch.autograd.grad)
    return [parameter.grad for parameter in model.parameters()]


def saved_bytes(model, input_ids):
    """Bytes of the tensors other than parameters that the forward's autograd graph keeps for the backward outside
    checkpointed functions (a checkpoint keeps its inputs)."""
    parameters = {parameter.data_ptr() for parameter in model.parameters()}
    sizes = []

    def pack(tensor):
        if tensor.data_ptr() not in parameters:
            sizes.append(tensor.numel() * tensor.element_size())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids).last_hidden_state.sum()
    return sum(sizes)


@pytest.mark.parametrize("path", ["reference", "packed"])
@pytest.mark.parametrize("dtype, tolerance, dropout", [(torch.float64, 1e-10, 0.0), (torch.float32, 1e-5, 0.2)])
def test_gradients_equal_those_without_checkpointing(path, dtype, tolerance, dropout):
    model = tiny_model(seed=2, lstm_implementation=path).to(dtype).train()
    input_ids, _ = random_batch(torch.Generator().manual_seed(4), batch=5, max_words=9, chars=20)
    assert lstm_path(model, input_ids, dropout=dropout) == path
    expected = loss_and_gradients(model, input_ids, dropout)
    uncheckpointed_bytes = saved_bytes(model, input_ids)

    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing
    assert model.character_encoder.gradient_checkpointing and model.encoder.gradient_checkpointing
    gradients = loss_and_gradients(model, input_ids, dropout)
    for (name, _), value, reference in zip(model.named_parameters(), gradients, expected):
        assert reference.abs().max() > 0, name
        assert (value - reference).abs().max() <= tolerance, name
    # What the graph keeps outside the checkpoints: their inputs, the token layer's scatter, the outputs' gathers.
    assert saved_bytes(model, input_ids) < uncheckpointed_bytes / 5

    model.gradient_checkpointing_disable()
    assert not model.encoder.gradient_checkpointing
    assert saved_bytes(model, input_ids) == uncheckpointed_bytes


def test_reentrant_checkpointing_gives_the_same_gradients():
    """`use_reentrant=True` needs an input that requires a gradient in each checkpointed function: the character
    encoder's is its embedded characters, not the ids."""
    model = tiny_model(seed=2).double().train()
    input_ids, _ = random_batch(torch.Generator().manual_seed(4), batch=4, max_words=7, chars=20)
    expected = loss_and_gradients(model, input_ids, 0.0)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    for value, reference in zip(loss_and_gradients(model, input_ids, 0.0), expected):
        assert (value - reference).abs().max() <= 1e-10


def test_trainer_with_gradient_checkpointing(tmp_path, tokenizer):
    """A head fine-tuning its biLM under the Trainer with gradient_checkpointing=True ends with the weights of the
    same run without it."""
    sentences = [["the", "cat", "sat"], ["a", "dog", "ran", "far", "away"], ["no"], ["the", "mat", "is", "red"]] * 4
    rows = [dict(tokenizer(words, is_split_into_words=True), labels=index % 2) for index, words in enumerate(sentences)]
    trained = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = ElmoForSequenceClassification(tiny_config(num_labels=2, freeze_bilm=False, classifier_dropout=0.0))
        arguments = TrainingArguments(
            output_dir=str(tmp_path / str(checkpointing)),
            max_steps=3,
            per_device_train_batch_size=8,
            learning_rate=1e-2,
            gradient_checkpointing=checkpointing,
            logging_strategy="no",
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            seed=0,
        )
        initial = {name: value.clone() for name, value in model.state_dict().items()}
        collator = DataCollatorWithPadding(tokenizer)
        Trainer(model=model, args=arguments, train_dataset=rows, data_collator=collator).train()
        assert model.elmo.encoder.gradient_checkpointing is checkpointing
        trained.append(model.state_dict())
    for name, value in trained[1].items():
        torch.testing.assert_close(value, trained[0][name], rtol=0, atol=1e-5, msg=name)
    for name in ("elmo.character_encoder.char_embedding", "elmo.encoder.layers.1.recurrent_weight"):
        assert (trained[1][name] - initial[name]).abs().max() > 1e-3, name
