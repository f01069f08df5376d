"""The weight average of the example scripts' `--weight_average_decay`: training follows the raw weights, while
evaluation, checkpoints and the final model hold the exponential moving average of them."""

import os

import pytest
import torch
from helpers import load_script, tiny_script_inputs
from safetensors.torch import load_file
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

from elmo_hf.training.weight_averaging import WeightAveragingArguments, WeightAveragingCallback

DECAY = 0.6


class TinyRegression(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(3, 1)
        self.frozen = nn.Parameter(torch.ones(2), requires_grad=False)

    def forward(self, features, target):
        prediction = self.linear(features).squeeze(-1) * self.frozen.sum()
        return {"loss": ((prediction - target) ** 2).mean(), "logits": prediction}


class Rows(torch.utils.data.Dataset):
    def __init__(self, count):
        generator = torch.Generator().manual_seed(1)
        self.features = torch.randn(count, 3, generator=generator)
        self.target = self.features @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(count, generator=generator)

    def __len__(self):
        return len(self.target)

    def __getitem__(self, index):
        return {"features": self.features[index], "target": self.target[index]}


def linear_weights(weights):
    """The linear layer's weight and bias as one flat copy, from a model's parameters or a saved state dict."""
    return torch.cat([weights["linear.weight"].flatten(), weights["linear.bias"]]).detach().clone()


class WeightsAt(TrainerCallback):
    """The linear layer's weights after every update, and at every evaluation (callbacks run in order: put it
    after the averaging callback to see what the evaluation saw)."""

    def __init__(self):
        self.after_update, self.at_evaluation = [], {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.after_update.append(linear_weights(dict(model.named_parameters())))

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        self.at_evaluation[state.global_step] = linear_weights(dict(model.named_parameters()))


def train(tmp_path, name, callbacks, **options):
    args = TrainingArguments(
        output_dir=str(tmp_path / name),
        per_device_train_batch_size=4,
        num_train_epochs=3,
        learning_rate=0.05,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        label_names=["target"],
        **options,
    )
    model = TinyRegression()
    trainer = Trainer(model=model, args=args, train_dataset=Rows(20), eval_dataset=Rows(8), callbacks=callbacks)
    trainer.train()
    return trainer


def moving_averages(trajectory, decay):
    averages = [trajectory[0]]
    for weights in trajectory[1:]:
        averages.append(decay * averages[-1] + (1 - decay) * weights)
    return averages


def test_training_follows_the_raw_weights_and_everything_else_sees_their_average(tmp_path):
    plain = WeightsAt()
    train(tmp_path, "plain", [plain], save_strategy="no")
    expected = moving_averages(plain.after_update, DECAY)
    assert len(expected) == 15  # 5 updates an epoch, 3 epochs

    seen = WeightsAt()
    model = train(
        tmp_path,
        "averaged",
        [WeightAveragingCallback(DECAY), seen],
        eval_strategy="steps",
        eval_steps=4,
        save_strategy="steps",
        save_steps=4,
    ).model
    final = linear_weights(dict(model.named_parameters()))
    # Evaluations and saves every 4 updates swapped the average in and out: the raw course is unchanged, so the
    # final average is the plain run's average to float32 rounding.
    torch.testing.assert_close(final, expected[-1], rtol=0, atol=1e-6)
    assert not torch.allclose(final, plain.after_update[-1], atol=1e-3)  # the average, not the last weights
    assert sorted(seen.at_evaluation) == [4, 8, 12, 15]  # and at the last update
    for step, weights in seen.at_evaluation.items():
        torch.testing.assert_close(weights, expected[step - 1], rtol=0, atol=1e-6)
        saved = load_file(os.path.join(tmp_path, "averaged", f"checkpoint-{step}", "model.safetensors"))
        torch.testing.assert_close(linear_weights(saved), expected[step - 1], rtol=0, atol=1e-6)
        torch.testing.assert_close(saved["frozen"], torch.ones(2))  # only trainable weights are averaged


def test_without_evaluations_the_final_model_is_the_average(tmp_path):
    plain = WeightsAt()
    train(tmp_path, "plain", [plain], save_strategy="no")
    model = train(tmp_path, "averaged", [WeightAveragingCallback(DECAY)], save_strategy="no").model
    final = linear_weights(dict(model.named_parameters()))
    torch.testing.assert_close(final, moving_averages(plain.after_update, DECAY)[-1], rtol=0, atol=1e-6)


def test_the_best_checkpoint_is_kept_when_asked(tmp_path):
    trainer = train(
        tmp_path,
        "best",
        [WeightAveragingCallback(DECAY)],
        eval_strategy="epoch",
        save_strategy="epoch",
        load_best_model_at_end=True,
        metric_for_best_model="loss",
        greater_is_better=True,  # "best" is the highest loss: the first epoch's, not the last average
    )
    assert trainer.state.best_model_checkpoint.endswith("checkpoint-5")
    best = load_file(os.path.join(trainer.state.best_model_checkpoint, "model.safetensors"))
    torch.testing.assert_close(trainer.model.linear.weight.detach(), best["linear.weight"], rtol=0, atol=0)


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5, 1.5])
def test_a_decay_outside_zero_to_one_is_refused(decay):
    with pytest.raises(ValueError, match=f"weight average decay: must be between 0 and 1 .*got {decay}"):
        WeightAveragingCallback(decay)


def test_the_option_adds_the_callback_only_when_set():
    assert WeightAveragingArguments().callbacks() == []
    (callback,) = WeightAveragingArguments(weight_average_decay=0.99).callbacks()
    assert isinstance(callback, WeightAveragingCallback) and callback.decay == 0.99


@pytest.mark.parametrize("script", ["run_token_classification", "run_text_classification"])
def test_the_example_scripts_train_with_the_average_when_asked(tmp_path, script):
    bilm, train_file = tiny_script_inputs(tmp_path, script)
    arguments = [
        *("--model_name_or_path", bilm, "--train_file", train_file, "--output_dir", tmp_path / "out", "--do_train"),
        *("--per_device_train_batch_size", 4, "--max_steps", 3, "--task_encoder_hidden_size", 4),
        *("--save_strategy", "no", "--report_to", "none", "--use_cpu", "--disable_tqdm", "true"),
    ]
    trainer = load_script(script).main(list(map(str, [*arguments, "--weight_average_decay", 0.5])))
    (averaging,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, WeightAveragingCallback)]
    assert averaging.decay == 0.5 and len(averaging.parameters) > 0
    for parameter, average in zip(averaging.parameters, averaging.average):
        assert torch.equal(parameter, average)  # the model left, and saved, is the average
    saved = load_file(os.path.join(tmp_path, "out", "model.safetensors"))
    names = {id(parameter): name for name, parameter in trainer.model.named_parameters()}
    for parameter, average in zip(averaging.parameters, averaging.average):
        assert torch.equal(saved[names[id(parameter)]], average)
    trainer = load_script(script).main(list(map(str, arguments)))
    assert not any(isinstance(c, WeightAveragingCallback) for c in trainer.callback_handler.callbacks)
