"""How long the task heads train (`elmo_hf.training.training_schedule`): at least `--min_updates` optimizer updates, by
raising the epochs on a small training set, while `--num_train_epochs`, `--min_updates 0` and `--max_steps` keep
their meaning; and the example scripts apply it."""

import pytest
from helpers import load_script, tiny_script_inputs
from transformers import TrainingArguments

from elmo_hf.training.training_schedule import (
    MIN_UPDATES,
    MinUpdatesArguments,
    epochs_for_min_updates,
    updates_per_epoch,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def training_arguments(tmp_path, **overrides):
    options = dict(output_dir=str(tmp_path), per_device_train_batch_size=32, num_train_epochs=8, use_cpu=True)
    return TrainingArguments(**{**options, **overrides})


def test_updates_per_epoch_count_as_the_trainer_does():
    assert updates_per_epoch(100, 32) == 4  # the last, partial batch is an update
    assert updates_per_epoch(100, 32, drop_last=True) == 3
    assert updates_per_epoch(12_543, 32) == 392  # all of UD English-EWT
    assert updates_per_epoch(100, 32, gradient_accumulation_steps=3) == 2  # a partial accumulation counts
    assert updates_per_epoch(5, 32, drop_last=True) == 1  # the Trainer counts at least one


@pytest.mark.parametrize(
    "sentences, epochs",
    [(100, 50), (125, 50), (300, 20), (768, 9), (769, 8), (1_254, 8), (12_543, 8)],  # 1%, 10%, all of EWT
)
def test_small_training_sets_get_enough_epochs_and_large_ones_keep_theirs(tmp_path, sentences, epochs):
    arguments = training_arguments(tmp_path)
    message = MinUpdatesArguments().apply(arguments, sentences)
    assert arguments.num_train_epochs == epochs
    assert epochs * updates_per_epoch(sentences, 32) >= MIN_UPDATES
    if epochs == 8:
        assert message is None
    else:
        assert message == (
            f"training {epochs} epochs instead of 8: {sentences:,} training examples make "
            f"{updates_per_epoch(sentences, 32)} updates an epoch, and --min_updates asks for at least 200 "
            "(--min_updates 0 keeps --num_train_epochs)"
        )


def test_the_user_s_epochs_steps_and_batching_are_respected(tmp_path):
    arguments = training_arguments(tmp_path, num_train_epochs=60)
    assert MinUpdatesArguments().apply(arguments, 100) is None and arguments.num_train_epochs == 60  # more already
    arguments = training_arguments(tmp_path, max_steps=10)
    assert MinUpdatesArguments().apply(arguments, 100) is None and arguments.num_train_epochs == 8  # exact steps
    arguments = training_arguments(tmp_path)
    assert MinUpdatesArguments(min_updates=0).apply(arguments, 100) is None and arguments.num_train_epochs == 8
    arguments = training_arguments(tmp_path, num_train_epochs=2.5, gradient_accumulation_steps=2)
    MinUpdatesArguments(min_updates=256).apply(arguments, 100)  # 2 updates an epoch
    assert arguments.num_train_epochs == 128
    assert epochs_for_min_updates(8, 392) == 8 and epochs_for_min_updates(8, 4, 256) == 64
    with pytest.raises(ValueError, match="--min_updates: must be 0 or more, got -1"):
        MinUpdatesArguments(min_updates=-1).apply(training_arguments(tmp_path), 100)


@pytest.mark.parametrize("script", ["run_token_classification", "run_text_classification"])
def test_the_example_scripts_train_at_least_min_updates(tmp_path, capsys, script):
    bilm, train = tiny_script_inputs(tmp_path, script)
    arguments = [
        *("--model_name_or_path", bilm, "--train_file", train, "--output_dir", tmp_path / "out", "--do_train"),
        *("--per_device_train_batch_size", 4, "--num_train_epochs", 1, "--min_updates", 7),
        *("--task_encoder_hidden_size", 4, "--save_strategy", "no", "--report_to", "none", "--use_cpu"),
        *("--disable_tqdm", "true"),
    ]
    trainer = load_script(script).main(list(map(str, arguments)))
    # 12 examples in batches of 4 are 3 updates an epoch: 3 epochs make the 7 updates asked for.
    assert trainer.args.num_train_epochs == 3 and trainer.state.global_step == 9
    assert "training 3 epochs instead of 1: 12 training examples make 3 updates an epoch" in capsys.readouterr().err
    trainer = load_script(script).main(list(map(str, [*arguments[:-2], "--max_steps", 2, "--disable_tqdm", "true"])))
    assert trainer.state.global_step == 2
