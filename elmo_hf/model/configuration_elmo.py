"""ELMo model configuration."""

from collections.abc import Sequence
from typing import Any

from transformers import PreTrainedConfig

from .char_ids import NUM_CHARACTER_IDS

SUPPORTED_ACTIVATIONS = ("relu", "tanh")
CHAR_VOCABULARIES = ("utf8_bytes", "lexicon")
LSTM_IMPLEMENTATIONS = ("auto", "reference", "packed", "cuda_graphs", "fused")

# The published "original" ELMo (5.5B has the same shape), as in its options.json.
ORIGINAL_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


class ElmoConfig(PreTrainedConfig):
    r"""
    Configuration of an ELMo biLM (Peters et al., 2018). Defaults give the published "original" model
    (2 x 4096 LSTM cells, 512-dimensional projections, 2048 character filters, 2 highway layers).

    Args:
        char_embedding_dim (int, defaults to 16): size of each character's embedding.
        filters (list of [width, count], defaults to the original's 7 filter banks): the character CNN's
            convolutions; their counts add up to the token representation's width before projection.
        num_highway_layers (int, defaults to 2): highway layers after the character CNN.
        activation (str, defaults to "relu"): activation of the character CNN, "relu" or "tanh".
        num_characters (int, defaults to 262): rows of the character embedding (0 is padding). With
            `char_vocabulary="utf8_bytes"` it must be 262, fixed by the character-id scheme.
        char_vocabulary (str, defaults to "utf8_bytes"): what the character ids mean: "utf8_bytes", bilm-tf's bytes
            and markers (`elmo_hf.model.char_ids`); "lexicon", ids from a character lexicon kept by the tokenizer
            (ELMoForManyLangs' `char.dic`), `num_characters - 1` of them after the padding id 0.
        word_embedding_dim (int, defaults to 0): when positive, the token representation also has a word embedding
            of this width (ELMoForManyLangs' `word_dim`), concatenated after the highway output and before the
            projection; each row of `input_ids` then ends with one extra id, the word's id in the tokenizer's word
            lexicon (0 for a padding word). 0: characters only, as bilm-tf.
        word_embedding_vocab_size (int, defaults to 0): rows of that word embedding, 0 (padding) included.
        always_project_tokens (bool, defaults to False): project the token representation even when its width
            already equals `projection_dim` (ELMoForManyLangs always does); False projects only when the widths
            differ, as bilm-tf.
        max_characters_per_token (int, defaults to 50): character ids per word, markers included.
        lstm_dim (int, defaults to 4096): LSTM memory cell size of each direction.
        projection_dim (int, defaults to 512): each LSTM's output is projected to this size, and so is the
            token representation; every layer's output is `2 * projection_dim` wide.
        num_lstm_layers (int, defaults to 2): LSTM layers per direction.
        cell_clip (float or None, defaults to 3.0): the LSTM memory cell is clipped to [-cell_clip, cell_clip].
        proj_clip (float or None, defaults to 3.0): the projected LSTM output is clipped to
            [-proj_clip, proj_clip].
        use_skip_connections (bool, defaults to True): LSTM layers after the first add their input to
            their output.
        initializer_range (float, defaults to 0.02): std of the normal init of newly created linear layers.
        vocab_size (int, defaults to 0): size of the word vocabulary predicted by [`ElmoForPreTraining`]'s
            softmax; 0 means the model has no softmax (the published hdf5 files have none).
        num_sampled_negatives (int, defaults to 8192, as the original): distinct negatives drawn per batch and
            direction by the sampled softmax used in training; at most `vocab_size` (which samples every class and
            equals the full softmax); 0 trains with the full softmax. Evaluation always uses the full softmax.
        pretraining_dropout (float, defaults to 0.0): bilm-tf's training dropout, applied only by
            [`ElmoForPreTraining`] in training mode: on every LSTM layer's input and on the softmax input. Never
            applied when embedding or when training a task head.
        lstm_implementation (str, defaults to "auto"): which path runs the biLSTM, with the same math in each case
            (`lstm_paths.py` maps each value and situation to the path it runs, in one table): "auto", the fastest
            that applies; "reference", the readable padded recurrence of `modeling_elmo.py` for every call (autograd
            through it; the ONNX export scripts it); "packed", packed steps with a shrinking batch: on a CPU without
            gradients `cpu_kernels.py`, otherwise the hand-written backward of `lstm_training_kernel.py`;
            "cuda_graphs", inference on a GPU replayed from CUDA graphs of the reference step (`cuda_graphs.py`: one
            graph per padded batch shape); "fused", those graphs with the step fused into four kernels where Triton
            is installed (`cuda_kernels.py`; "auto" picks it there). A value that cannot run in a call (a GPU path
            on a CPU, or under autograd) warns once and names the path used. A run-time choice, as transformers'
            `attn_implementation`: `save_pretrained` does not write it (set it after loading, or pass it to
            `from_pretrained`); a config.json that holds it is still read.
        weight_quantization (str or None, defaults to None): "int8" when the checkpoint holds the LSTM's and the
            highways' weights as int8 with one float32 scale per output row (`ElmoModel.quantize_weights`): the model
            is then built with those int8 tensors in place of the float32 weights, for inference on a CPU.

    Task heads ([`ElmoForTokenClassification`], [`ElmoForSequenceClassification`]) read these fields; the biLM
    ignores them:
        scalar_mix_initial_weights (list of `num_lstm_layers + 1` floats or None, defaults to None): the un-normalised
            layer weights the scalar mixes start from; None starts from zeros (equal weights).
        scalar_mix_trainable (bool, defaults to True): learn the layer weights and gamma, or keep them fixed.
        scalar_mix_do_layer_norm (bool, defaults to False): normalise each biLM layer (one mean and variance over
            the real words of the batch) before mixing.
        scalar_mix_dropout (float, defaults to 0.5): dropout on the mixed ELMo vector.
        scalar_mix_l2_coef (float, defaults to 0.0): the loss gets `scalar_mix_l2_coef * sum(weights ** 2)` of each
            mix's un-normalised weights, which pulls the mix toward equal weights.
        task_encoder_hidden_size (int, defaults to 128): hidden size of each direction of the task biLSTM.
        task_encoder_layers (int, defaults to 1): layers of the task biLSTM; 0 uses no task encoder.
        use_input_elmo (bool, defaults to True): concatenate the ELMo mix to the task input `x_k`; False gives the
            paper's baseline, the task model without ELMo (with `use_output_elmo=False`).
        use_output_elmo (bool, defaults to False): concatenate a second ELMo mix to the task encoder's output.
        use_bilm_token_layer (bool, defaults to True): the task input `x_k` includes the biLM's context-independent
            token layer (its character CNN's vector).
        task_word_vocab (list of str or None, defaults to None): the words of a trainable task word embedding in
            `x_k` (the paper's pretrained word vectors), e.g. from `elmo_hf.training.task_words.build_task_word_vocab`;
            row 0 is the unknown word. Saved with the head, so a reloaded head looks words up the same way.
        task_word_embedding_dim (int, defaults to 100): the task word embedding's width.
        task_word_lowercase (bool, defaults to True): look task words up lowercased.
        task_word_dropout (float, defaults to 0.0): word dropout on the task word embedding: while training, each
            word is looked up as the unknown word with this probability (the biLM's layers still see it).
        freeze_bilm (bool, defaults to True): keep the biLM's weights fixed while training a head.
        use_crf (bool, defaults to False): token classification with a linear-chain CRF and Viterbi decoding.
        classifier_dropout (float, defaults to 0.5): dropout before the task encoder and the classifier.
        bilm_name_or_path (str or None, defaults to None): the biLM a task head was created on, recorded by
            `from_pretrained` when it builds a new head over a biLM checkpoint: its Hub repo id (`org/name`), or for a
            local folder the folder's name (e.g. `elmo-english-small`, never the full path). Kept through saving and
            reloading the head; the model card names it (as `base_model` when it is a Hub id).
    """

    model_type = "elmo"

    def __init__(
        self,
        char_embedding_dim: int = 16,
        filters: Sequence[Sequence[int]] | None = None,
        num_highway_layers: int = 2,
        activation: str = "relu",
        num_characters: int = NUM_CHARACTER_IDS,
        max_characters_per_token: int = 50,
        char_vocabulary: str = "utf8_bytes",
        word_embedding_dim: int = 0,
        word_embedding_vocab_size: int = 0,
        always_project_tokens: bool = False,
        lstm_dim: int = 4096,
        projection_dim: int = 512,
        num_lstm_layers: int = 2,
        cell_clip: float | None = 3.0,
        proj_clip: float | None = 3.0,
        use_skip_connections: bool = True,
        initializer_range: float = 0.02,
        vocab_size: int | None = 0,
        num_sampled_negatives: int = 8192,
        pretraining_dropout: float = 0.0,
        lstm_implementation: str = "auto",
        weight_quantization: str | None = None,
        scalar_mix_initial_weights: Sequence[float] | None = None,
        scalar_mix_trainable: bool = True,
        scalar_mix_do_layer_norm: bool = False,
        scalar_mix_dropout: float = 0.5,
        scalar_mix_l2_coef: float = 0.0,
        task_encoder_hidden_size: int = 128,
        task_encoder_layers: int = 1,
        use_input_elmo: bool = True,
        use_output_elmo: bool = False,
        use_bilm_token_layer: bool = True,
        task_word_vocab: Sequence[str] | None = None,
        task_word_embedding_dim: int = 100,
        task_word_lowercase: bool = True,
        task_word_dropout: float = 0.0,
        freeze_bilm: bool = True,
        use_crf: bool = False,
        classifier_dropout: float = 0.5,
        bilm_name_or_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.char_embedding_dim = char_embedding_dim
        self.filters: Sequence[Sequence[int]] = ORIGINAL_FILTERS if filters is None else filters
        self.num_highway_layers = num_highway_layers
        self.activation = activation
        self.num_characters = num_characters
        self.max_characters_per_token = max_characters_per_token
        self.char_vocabulary = char_vocabulary
        self.word_embedding_dim = word_embedding_dim
        self.word_embedding_vocab_size = word_embedding_vocab_size
        self.always_project_tokens = always_project_tokens
        self.lstm_dim = lstm_dim
        self.projection_dim = projection_dim
        self.num_lstm_layers = num_lstm_layers
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.use_skip_connections = use_skip_connections
        self.initializer_range = initializer_range
        self.vocab_size = 0 if vocab_size is None else vocab_size
        self.num_sampled_negatives = num_sampled_negatives
        self.pretraining_dropout = pretraining_dropout
        self.lstm_implementation = lstm_implementation
        self.weight_quantization = weight_quantization
        self.scalar_mix_initial_weights = scalar_mix_initial_weights
        self.scalar_mix_trainable = scalar_mix_trainable
        self.scalar_mix_do_layer_norm = scalar_mix_do_layer_norm
        self.scalar_mix_dropout = scalar_mix_dropout
        self.scalar_mix_l2_coef = scalar_mix_l2_coef
        self.task_encoder_hidden_size = task_encoder_hidden_size
        self.task_encoder_layers = task_encoder_layers
        self.use_input_elmo = use_input_elmo
        self.use_output_elmo = use_output_elmo
        self.use_bilm_token_layer = use_bilm_token_layer
        self.task_word_vocab = None if task_word_vocab is None else list(task_word_vocab)
        self.task_word_embedding_dim = task_word_embedding_dim
        self.task_word_lowercase = task_word_lowercase
        self.task_word_dropout = task_word_dropout
        self.freeze_bilm = freeze_bilm
        self.use_crf = use_crf
        self.classifier_dropout = classifier_dropout
        self.bilm_name_or_path = bilm_name_or_path
        self._check_fields()
        # Derived: every layer's output is [forward; backward].
        self.hidden_size = 2 * self.projection_dim
        self.num_filters = sum(count for _, count in self.filters)
        super().__init__(**kwargs)

    def _check_fields(self) -> None:
        """The one validation pass: checks every field (numbers normalised to float, filters to lists) and raises
        `ElmoConfigFieldError` naming the first bad one."""
        self.char_embedding_dim = _positive_int("char_embedding_dim", self.char_embedding_dim)
        self.filters = _filters("filters", self.filters)
        self.num_highway_layers = _non_negative_int("num_highway_layers", self.num_highway_layers)
        if self.activation not in SUPPORTED_ACTIVATIONS:
            raise ElmoConfigFieldError(
                "activation", f"activation must be one of {SUPPORTED_ACTIVATIONS}, got {self.activation!r}"
            )
        if self.char_vocabulary not in CHAR_VOCABULARIES:
            raise ElmoConfigFieldError(
                "char_vocabulary", f"char_vocabulary must be one of {CHAR_VOCABULARIES}, got {self.char_vocabulary!r}"
            )
        if self.char_vocabulary == "utf8_bytes" and self.num_characters != NUM_CHARACTER_IDS:
            raise ElmoConfigFieldError(
                "num_characters",
                f"num_characters must be {NUM_CHARACTER_IDS} (fixed by the character-id scheme), "
                f"got {self.num_characters!r}",
            )
        self.num_characters = _positive_int("num_characters", self.num_characters)
        self.word_embedding_dim = _non_negative_int("word_embedding_dim", self.word_embedding_dim)
        self.word_embedding_vocab_size = _non_negative_int("word_embedding_vocab_size", self.word_embedding_vocab_size)
        if bool(self.word_embedding_dim) != (self.word_embedding_vocab_size > 1):
            raise ElmoConfigFieldError(
                "word_embedding_vocab_size",
                "word_embedding_vocab_size must be at least 2 (padding and one word) when word_embedding_dim is "
                f"positive, and 0 otherwise; got {self.word_embedding_vocab_size!r} with word_embedding_dim "
                f"{self.word_embedding_dim!r}",
            )
        self.max_characters_per_token = _positive_int("max_characters_per_token", self.max_characters_per_token)
        widest_filter = max(width for width, _ in self.filters)
        if self.max_characters_per_token < max(widest_filter, 3):
            raise ElmoConfigFieldError(
                "max_characters_per_token",
                f"max_characters_per_token must be at least 3 and at least the widest filter ({widest_filter}), "
                f"got {self.max_characters_per_token!r}",
            )
        self.lstm_dim = _positive_int("lstm_dim", self.lstm_dim)
        self.projection_dim = _positive_int("projection_dim", self.projection_dim)
        if self.projection_dim >= self.lstm_dim:
            raise ElmoConfigFieldError(
                "projection_dim",
                f"projection_dim must be smaller than lstm_dim ({self.lstm_dim!r}), got {self.projection_dim!r}: "
                "ELMo LSTMs without a projection are not supported",
            )
        self.num_lstm_layers = _positive_int("num_lstm_layers", self.num_lstm_layers)
        self.cell_clip = _optional_positive_float("cell_clip", self.cell_clip)
        self.proj_clip = _optional_positive_float("proj_clip", self.proj_clip)
        self.vocab_size = _non_negative_int("vocab_size", self.vocab_size)
        self.num_sampled_negatives = _non_negative_int("num_sampled_negatives", self.num_sampled_negatives)
        if self.vocab_size and self.num_sampled_negatives > self.vocab_size:
            raise ElmoConfigFieldError(
                "num_sampled_negatives",
                f"num_sampled_negatives must be at most vocab_size ({self.vocab_size}) (0 trains with the full "
                f"softmax), got {self.num_sampled_negatives!r}",
            )
        self.pretraining_dropout = _probability("pretraining_dropout", self.pretraining_dropout)
        if self.weight_quantization not in (None, "int8"):
            raise ElmoConfigFieldError(
                "weight_quantization",
                f"weight_quantization must be None or 'int8', got {self.weight_quantization!r}",
            )
        if self.lstm_implementation not in LSTM_IMPLEMENTATIONS:
            raise ElmoConfigFieldError(
                "lstm_implementation",
                f"lstm_implementation must be one of {LSTM_IMPLEMENTATIONS}, got {self.lstm_implementation!r}",
            )
        if self.scalar_mix_initial_weights is not None:
            weights = _float_list("scalar_mix_initial_weights", self.scalar_mix_initial_weights)
            if len(weights) != self.num_lstm_layers + 1:
                raise ElmoConfigFieldError(
                    "scalar_mix_initial_weights",
                    f"scalar_mix_initial_weights must have num_lstm_layers + 1 = {self.num_lstm_layers + 1} values, "
                    f"got {len(weights)}",
                )
            self.scalar_mix_initial_weights = weights
        for name in (
            "use_skip_connections",
            "always_project_tokens",
            "scalar_mix_trainable",
            "scalar_mix_do_layer_norm",
            "use_input_elmo",
            "use_output_elmo",
            "use_bilm_token_layer",
            "task_word_lowercase",
            "freeze_bilm",
            "use_crf",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ElmoConfigFieldError(name, f"{name} must be a bool, got {getattr(self, name)!r}")
        self.scalar_mix_dropout = _probability("scalar_mix_dropout", self.scalar_mix_dropout)
        self.scalar_mix_l2_coef = _non_negative_float("scalar_mix_l2_coef", self.scalar_mix_l2_coef)
        self.task_encoder_hidden_size = _positive_int("task_encoder_hidden_size", self.task_encoder_hidden_size)
        self.task_encoder_layers = _non_negative_int("task_encoder_layers", self.task_encoder_layers)
        self.classifier_dropout = _probability("classifier_dropout", self.classifier_dropout)
        self.task_word_embedding_dim = _positive_int("task_word_embedding_dim", self.task_word_embedding_dim)
        self.task_word_dropout = _probability("task_word_dropout", self.task_word_dropout)
        if self.task_word_vocab is not None and not all(
            isinstance(word, str) and word for word in self.task_word_vocab
        ):
            raise ElmoConfigFieldError("task_word_vocab", "task_word_vocab must be a list of non-empty words")
        if not (self.use_input_elmo or self.use_bilm_token_layer or self.task_word_vocab):
            raise ElmoConfigFieldError(
                "use_input_elmo",
                "the task input x_k is empty: set use_input_elmo, use_bilm_token_layer or task_word_vocab",
            )

    def to_dict(self) -> dict[str, Any]:
        """The serialized fields, without the run-time choice `lstm_implementation` (see the class docstring)."""
        output = super().to_dict()
        output.pop("lstm_implementation", None)
        return output


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ElmoConfigFieldError(name, f"{name} must be a positive int, got {value!r}")
    return value


def _non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ElmoConfigFieldError(name, f"{name} must be a non-negative int, got {value!r}")
    return value


def _optional_positive_float(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ElmoConfigFieldError(name, f"{name} must be a positive number or None, got {value!r}")
    return float(value)


def _non_negative_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ElmoConfigFieldError(name, f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def _probability(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ElmoConfigFieldError(name, f"{name} must be a number in [0, 1), got {value!r}")
    return float(value)


def _float_list(name: str, values: object) -> list[float]:
    if not isinstance(values, (list, tuple)) or any(
        isinstance(v, bool) or not isinstance(v, (int, float)) for v in values
    ):
        raise ElmoConfigFieldError(name, f"{name} must be a list of numbers, got {values!r}")
    return [float(v) for v in values]


def _filters(name: str, filters: object) -> list[list[int]]:
    if not isinstance(filters, (list, tuple)) or not filters:
        raise ElmoConfigFieldError(name, f"{name} must be a non-empty list of [width, count] pairs, got {filters!r}")
    checked: list[list[int]] = []
    for index, pair in enumerate(filters):
        if (
            not isinstance(pair, (list, tuple))
            or len(pair) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in pair)
        ):
            raise ElmoConfigFieldError(
                name, f"{name}[{index}] must be a [width, count] pair of positive ints, got {pair!r}"
            )
        checked.append([pair[0], pair[1]])
    return checked


class ElmoConfigFieldError(ValueError):
    """A config field with a bad value; `field` names it, and so does the start of the message."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
