"""How long the task heads train: at least a fixed number of optimizer updates, whatever the training set's size.

A recipe stated in epochs suits one data size only. Eight epochs of all of UD English-EWT (12,543 sentences, 392
batches of 32 an epoch) are 3,136 updates; eight epochs of 1% of it (125 sentences, 4 batches) are 32, and a head
stops far short of what it can learn. So the example scripts
and `examples/downstream_benchmark.py` raise the number of epochs until training makes at least `MIN_UPDATES`
updates; `num_train_epochs` stays the least number of epochs.
"""

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import TrainingArguments

MIN_UPDATES = 200  # 50 epochs of 125 sentences in batches of 32; the figures of docs/downstream.md use it


def updates_per_epoch(
    num_examples: int, batch_size: int, gradient_accumulation_steps: int = 1, drop_last: bool = False
) -> int:
    """Optimizer updates in one epoch of `num_examples` in batches of `batch_size` (all processes together), as the
    `Trainer` counts them: a last partial batch counts unless `drop_last`, a last partial accumulation counts."""
    batches = num_examples // batch_size if drop_last else math.ceil(num_examples / batch_size)
    return max(math.ceil(batches / gradient_accumulation_steps), 1)


def epochs_for_min_updates(num_train_epochs: float, updates_in_one_epoch: int, min_updates: int = MIN_UPDATES) -> float:
    """`num_train_epochs`, raised to the fewest whole epochs of `updates_in_one_epoch` that make `min_updates`."""
    return max(num_train_epochs, math.ceil(min_updates / updates_in_one_epoch))


@dataclass
class MinUpdatesArguments:
    """The example scripts' `--min_updates` option (`HfArgumentParser`)."""

    min_updates: int = field(
        default=MIN_UPDATES,
        metadata={
            "help": "Train at least this many optimizer updates: with a small training set the number of epochs "
            "is raised until it does (0: exactly --num_train_epochs). --max_steps, when given, wins."
        },
    )

    def apply(self, training_args: "TrainingArguments", num_examples: int) -> str | None:
        r"""
        Raises `training_args.num_train_epochs` (in place) so that training on `num_examples` makes at least
        `min_updates` updates; nothing changes when `training_args.max_steps > 0` (an exact number of updates).

        Args:
            training_args (`TrainingArguments`): the batch size, processes, accumulation and epochs.
            num_examples (int): the training examples.

        Returns:
            str or None: one line saying what changed and why, or None when nothing did.
        """
        if self.min_updates < 0:
            raise ValueError(f"--min_updates: must be 0 or more, got {self.min_updates}")
        if training_args.max_steps > 0 or self.min_updates == 0 or num_examples == 0:
            return None
        per_epoch = updates_per_epoch(
            num_examples,
            training_args.per_device_train_batch_size * training_args.world_size,
            training_args.gradient_accumulation_steps,
            training_args.dataloader_drop_last,
        )
        epochs = epochs_for_min_updates(training_args.num_train_epochs, per_epoch, self.min_updates)
        if epochs == training_args.num_train_epochs:
            return None
        asked = f"{training_args.num_train_epochs:g}"
        training_args.num_train_epochs = epochs
        return (
            f"training {epochs} epochs instead of {asked}: {num_examples:,} training examples make {per_epoch} "
            f"updates an epoch, and --min_updates asks for at least {self.min_updates} (--min_updates 0 keeps "
            f"--num_train_epochs)"
        )
