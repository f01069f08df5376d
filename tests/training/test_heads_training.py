"""Learning tests: a frozen tiny random biLM plus a head, trained with the Trainer on synthetic tasks with signal."""

import random

import pytest
import torch
from datasets import Dataset
from helpers import tiny_model
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding, Trainer, TrainingArguments

from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification

HEAD_OPTIONS = dict(task_encoder_hidden_size=32, scalar_mix_dropout=0.0, classifier_dropout=0.0)

# A toy part-of-speech task: every word has one tag (DET 0, NOUN 1, VERB 2, ADJ 3), except "run", a NOUN after a
# determiner and a VERB elsewhere, so the tagger must also use the context. (A tiny random character CNN does not
# expose capitalisation or digits linearly, so such surface-form tasks are not learnable from it.)
LEXICON = {"the": 0, "a": 0, "cat": 1, "dog": 1, "mat": 1, "house": 1, "tree": 1, "car": 1}
LEXICON.update({"sees": 2, "likes": 2, "eats": 2, "finds": 2, "big": 3, "red": 3, "old": 3})
WORDS = [*LEXICON, "run"]


pytestmark = pytest.mark.usefixtures("one_thread")


def pos_tag(words, index):
    if words[index] != "run":
        return LEXICON[words[index]]
    return 1 if index > 0 and LEXICON.get(words[index - 1]) == 0 else 2


def tagging_dataset(tokenizer, size, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(size):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
        encoding = tokenizer(words, is_split_into_words=True)
        labels = [-100 if w is None else pos_tag(words, w) for w in encoding.word_ids()]
        rows.append(
            {"input_ids": encoding["input_ids"], "attention_mask": encoding["attention_mask"], "labels": labels}
        )
    return Dataset.from_list(rows)


def head_from_random_bilm(head_class, directory, **options):
    """A head on a tiny random biLM saved to `directory`, loaded as users load a converted biLM."""
    tiny_model(seed=0).save_pretrained(directory)
    torch.manual_seed(0)
    return head_class.from_pretrained(directory, **HEAD_OPTIONS, **options)


def train(model, train_dataset, collator, output_dir, steps, learning_rate=1e-2):
    arguments = TrainingArguments(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=16,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_strategy="no",
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    Trainer(model=model, args=arguments, train_dataset=train_dataset, data_collator=collator).train()
    return model.eval()


@pytest.mark.parametrize("use_crf", [False, True])
def test_token_classifier_learns_a_toy_pos_task(tmp_path, tokenizer, use_crf):
    model = head_from_random_bilm(ElmoForTokenClassification, tmp_path / "bilm", num_labels=4, use_crf=use_crf)
    bilm_before = {name: p.clone() for name, p in model.elmo.state_dict().items()}
    collator = DataCollatorForTokenClassification(tokenizer)
    train(model, tagging_dataset(tokenizer, 400, seed=1), collator, tmp_path / "out", steps=150)

    test = tagging_dataset(tokenizer, 100, seed=2)
    batch = collator([test[i] for i in range(len(test))])
    labels = batch.pop("labels")
    with torch.no_grad():
        logits = model(**batch).logits
    scored = labels != -100
    predictions = torch.tensor(sum(model.decode(logits, scored), []))
    accuracy = (predictions == labels[scored]).float().mean().item()
    assert accuracy >= 0.95, accuracy
    # The biLM stayed frozen; the mix weights are readable.
    for name, parameter in model.elmo.state_dict().items():
        assert torch.equal(parameter, bilm_before[name]), name
    assert model.task_encoder.input_mix.normalized_weights.shape == (3,)


NEGATIONS = ["not", "never", "no"]


def negation_dataset(tokenizer, size, seed):
    rng = random.Random(seed)
    fillers = [word for word in WORDS if word not in NEGATIONS]
    rows = []
    for _ in range(size):
        words = [rng.choice(fillers) for _ in range(rng.randint(3, 8))]
        label = rng.randrange(2)
        if label:
            words.insert(rng.randrange(len(words) + 1), rng.choice(NEGATIONS))
        encoding = tokenizer(words, is_split_into_words=True)
        rows.append({"input_ids": encoding["input_ids"], "attention_mask": encoding["attention_mask"], "labels": label})
    return Dataset.from_list(rows)


def test_sequence_classifier_learns_negation(tmp_path, tokenizer):
    model = head_from_random_bilm(
        ElmoForSequenceClassification, tmp_path / "bilm", num_labels=2, scalar_mix_do_layer_norm=True
    )
    collator = DataCollatorWithPadding(tokenizer)
    train(model, negation_dataset(tokenizer, 1200, seed=1), collator, tmp_path / "out", steps=500, learning_rate=1e-2)
    test = negation_dataset(tokenizer, 100, seed=2)
    batch = collator([test[i] for i in range(len(test))])
    labels = batch.pop("labels")
    with torch.no_grad():
        accuracy = (model(**batch).logits.argmax(-1) == labels).float().mean().item()
    assert accuracy >= 0.95, accuracy
