"""An exponential moving average of a head's trainable weights, for the `Trainer` (allennlp's `moving_average`).

Training updates the weights as usual; evaluation, every checkpoint and the final model see the average instead,
`average <- decay * average + (1 - decay) * weights` after each optimizer update (the first update copies the
weights). Averaging damps the noise of the last updates before each evaluation, so heads trained from different
seeds agree more closely. The example scripts' `--weight_average_decay` turns it on.
"""

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.utils import logging

logger = logging.get_logger(__name__)


class WeightAveragingCallback(TrainerCallback):
    r"""
    Keeps an exponential moving average of the model's trainable parameters and puts it in the model wherever the
    `Trainer` evaluates or saves: the raw weights come back before the next update, and the model left at the end
    of training holds the average (or, with `load_best_model_at_end`, the best checkpoint, itself an average).

    Args:
        decay (float): the weight of the old average at each update, in (0, 1); about `1 / (1 - decay)` updates
            make up the average (0.99: the last hundred or so).

    A run resumed from a checkpoint starts its average, and its raw weights, from that checkpoint's averaged
    weights, so it does not resume exactly; a warning says so.
    """

    def __init__(self, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"weight average decay: must be between 0 and 1 (exclusive), got {decay}")
        self.decay = decay
        self.parameters: list[torch.nn.Parameter] = []  # the model's trainable parameters, from on_train_begin
        self.average: list[torch.Tensor] | None = None
        self.raw: list[torch.Tensor] | None = None

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: torch.nn.Module | None = None,
        **kwargs: Any,
    ) -> None:
        assert model is not None, "the Trainer passes its model"
        self.parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
        self.average, self.raw = None, None
        if state.global_step > 0:
            logger.warning(
                "weight averaging restarts from the checkpoint's averaged weights: the resumed run is not exact"
            )

    @torch.no_grad()
    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.raw is not None:  # an evaluation or a save had the average in the model
            for parameter, raw in zip(self.parameters, self.raw):
                parameter.copy_(raw)
            self.raw = None

    @torch.no_grad()
    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.average is None:
            self.average = [parameter.detach().clone() for parameter in self.parameters]
        else:
            for average, parameter in zip(self.average, self.parameters):
                average.lerp_(parameter, 1.0 - self.decay)
        if control.should_evaluate or control.should_save:
            self.put_average_in_model()

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if control.should_evaluate or control.should_save:
            self.put_average_in_model()

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        best_loaded = args.load_best_model_at_end and state.best_model_checkpoint is not None
        if not best_loaded:
            self.put_average_in_model()
        self.raw = None  # the model keeps what it holds now

    @torch.no_grad()
    def put_average_in_model(self) -> None:
        """Puts the average in the model's parameters (in place) until the next update's start, keeping the raw
        weights aside: for a caller that scores the model itself, outside the `Trainer`'s evaluation."""
        if self.average is None or self.raw is not None:
            return
        self.raw = [parameter.detach().clone() for parameter in self.parameters]
        for parameter, average in zip(self.parameters, self.average):
            parameter.copy_(average)


@dataclass
class WeightAveragingArguments:
    """The example scripts' `--weight_average_decay` option (`HfArgumentParser`)."""

    weight_average_decay: float = field(
        default=0.0,
        metadata={
            "help": "Evaluate, save and keep an exponential moving average of the trainable weights, with this "
            "decay per update (0.99: about the last 100 updates); 0 turns it off."
        },
    )

    def callbacks(self) -> list[TrainerCallback]:
        """`[WeightAveragingCallback]` when a decay is given, else `[]` (for `Trainer(callbacks=...)`)."""
        if self.weight_average_decay == 0.0:
            return []
        return [WeightAveragingCallback(self.weight_average_decay)]
