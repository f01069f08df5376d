"""The original ELMo (bilm-tf): its options.json, its weight files, and their conversion to elmo_hf checkpoints.

Every TensorFlow quirk lives here, one commented line each: in `config_from_options` (bilm-tf's options.json),
in `hdf5_key_table` (its weight layouts) and in `CHECKPOINT_TO_HDF5_NAMES` (its training checkpoint's variable
names). The model in `modeling_elmo.py` knows nothing of them. A training checkpoint (softmax included) is read
without TensorFlow (`tf_checkpoint_reader.py`), renamed to the hdf5 names, and goes through the same table. Before
anything is written, the converted model's outputs are compared with a NumPy re-implementation of bilm-tf's own
arithmetic run on the untouched source arrays (`bilm_tf_reference_layers`).

Problems with the input files raise `UserInputError` naming the file, the key and what was expected; the command
line (`elmo-hf convert`, conversion/*.py) prints them as one line.
"""

import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .. import __version__
from ..hub.model_card import write_model_card
from ..model.char_ids import NUM_CHARACTER_IDS
from ..model.configuration_elmo import ElmoConfig, ElmoConfigFieldError
from ..model.modeling_elmo import ElmoForPreTraining, ElmoModel
from ..model.tokenization_elmo import ElmoTokenizer
from ..training.word_vocabulary import ElmoWordVocabulary
from ..user_errors import UserInputError, unreadable_file_error
from .convert_common import (
    VERIFY_ATOL,
    KeyTableEntry,
    build_model,
    checkpoint_bytes,
    convert_weights,
    save,
    sigmoid,
    verify_against_reference,
    written_whole,
)
from .tf_checkpoint_reader import read_tf_checkpoint

VERIFY_SENTENCES = [
    ["The", "original", "ELMo", "reads", "characters", "."],
    ["Ünïcödé", "wörds", "and", "a", "really" * 12, "long", "one"],
]

# ---- options.json ----

# ElmoConfig field -> the options.json key it comes from, to name the key in an error.
CONFIG_FIELD_TO_OPTION = {
    "char_embedding_dim": "char_cnn.embedding.dim",
    "filters": "char_cnn.filters",
    "num_highway_layers": "char_cnn.n_highway",
    "activation": "char_cnn.activation",
    "num_characters": "char_cnn.n_characters",
    "max_characters_per_token": "char_cnn.max_characters_per_token",
    "lstm_dim": "lstm.dim",
    "projection_dim": "lstm.projection_dim",
    "num_lstm_layers": "lstm.n_layers",
    "cell_clip": "lstm.cell_clip",
    "proj_clip": "lstm.proj_clip",
    "use_skip_connections": "lstm.use_skip_connections",
    "pretraining_dropout": "dropout",
    "num_sampled_negatives": "n_negative_samples_batch",
}


def config_from_options(options: str | os.PathLike[str] | dict[str, Any], **overrides: Any) -> ElmoConfig:
    """The `ElmoConfig` described by bilm-tf's options.json (a path, or the already parsed dict).

    Keys that only steer bilm-tf's training (batch_size, n_epochs, ...) are ignored. Keyword arguments override
    config fields. Raises `UserInputError` naming the file (for a path) and the options key.
    """
    if isinstance(options, (str, os.PathLike)):
        parsed = _read_options_file(options)
        try:
            return config_from_options(parsed, **overrides)
        except UserInputError as error:
            raise UserInputError(f"{options}: {error}") from None
    if not isinstance(options, dict):
        raise UserInputError(f"options must be a JSON object, got {type(options).__name__}")
    # bilm-tf can train a forward-only LM; ELMo's layers are [forward; backward], so both are needed.
    if options.get("bidirectional", True) is not True:
        raise UserInputError(f"options 'bidirectional' must be true, got {options['bidirectional']!r}")
    char_cnn = _section(options, "char_cnn")
    lstm = _section(options, "lstm")
    n_characters = _required(char_cnn, "char_cnn", "n_characters")
    if n_characters == NUM_CHARACTER_IDS - 1:
        n_characters = NUM_CHARACTER_IDS  # training options count 261 characters (no padding row), inference 262
    elif n_characters != NUM_CHARACTER_IDS:
        raise UserInputError(f"options 'char_cnn.n_characters' must be 261 or 262, got {n_characters!r}")
    fields = dict(
        char_embedding_dim=_required(_section(char_cnn, "embedding", "char_cnn."), "char_cnn.embedding", "dim"),
        filters=_required(char_cnn, "char_cnn", "filters"),
        num_highway_layers=char_cnn.get("n_highway") or 0,  # bilm-tf writes null for "no highway layers"
        activation=_required(char_cnn, "char_cnn", "activation"),
        num_characters=n_characters,
        max_characters_per_token=_required(char_cnn, "char_cnn", "max_characters_per_token"),
        lstm_dim=_required(lstm, "lstm", "dim"),
        projection_dim=_required(lstm, "lstm", "projection_dim"),
        # A missing optional key takes bilm-tf's default: 1 layer, no clipping, no skip connections.
        num_lstm_layers=lstm.get("n_layers", 1),
        cell_clip=lstm.get("cell_clip"),
        proj_clip=lstm.get("proj_clip"),
        use_skip_connections=bool(lstm.get("use_skip_connections", False)),
        pretraining_dropout=options.get("dropout", 0.0),  # bilm-tf's training dropout
    )
    fields.update(overrides)
    try:
        return ElmoConfig(**fields)
    except ElmoConfigFieldError as error:
        if error.field not in CONFIG_FIELD_TO_OPTION:
            raise
        raise UserInputError(f"options '{CONFIG_FIELD_TO_OPTION[error.field]}': {error}") from None


def options_from_config(config: ElmoConfig) -> dict[str, Any]:
    """The bilm-tf options.json dict (inference form) describing `config`."""
    return {
        "lstm": {
            "dim": config.lstm_dim,
            "projection_dim": config.projection_dim,
            "n_layers": config.num_lstm_layers,
            "cell_clip": config.cell_clip,
            "proj_clip": config.proj_clip,
            "use_skip_connections": config.use_skip_connections,
        },
        "dropout": config.pretraining_dropout,
        "char_cnn": {
            "embedding": {"dim": config.char_embedding_dim},
            "filters": config.filters,
            "n_highway": config.num_highway_layers,
            "n_characters": config.num_characters,
            "max_characters_per_token": config.max_characters_per_token,
            "activation": config.activation,
        },
    }


def _read_options_file(path: str | os.PathLike[str]) -> Any:
    try:
        with open(path, encoding="utf-8") as options_file:
            return json.load(options_file)
    except json.JSONDecodeError as error:
        raise UserInputError(f"{path}: not valid JSON ({error}); expected bilm-tf's options.json") from None
    except (OSError, UnicodeDecodeError) as error:
        raise unreadable_file_error(path, error, "bilm-tf's options.json") from None


def _section(options: dict[str, Any], name: str, prefix: str = "") -> dict[str, Any]:
    if name not in options:
        raise UserInputError(f"options is missing the key '{prefix}{name}'")
    if not isinstance(options[name], dict):
        raise UserInputError(f"options '{prefix}{name}' must be an object, got {options[name]!r}")
    return options[name]


def _required(section: dict[str, Any], section_name: str, key: str) -> Any:
    if key not in section:
        raise UserInputError(f"options is missing the key '{section_name}.{key}'")
    return section[key]


# ---- hdf5 weights: the key table ----


def _tf_gates_to_torch(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """TF LSTMCell gate blocks (i, j, f, o) -> PyTorch's (i, f, g, o), along `axis`."""
    i, j, f, o = np.split(x, 4, axis=axis)
    return np.concatenate([i, f, j, o], axis=axis)


def _add_forget_bias(bias: np.ndarray) -> np.ndarray:
    bias = bias.copy()
    quarter = bias.shape[-1] // 4
    bias[quarter : 2 * quarter] += 1.0  # block 1 is the forget gate in PyTorch order
    return bias


def hdf5_key_table(config: ElmoConfig) -> list[KeyTableEntry]:
    """One entry per (source dataset, target parameter) pair for a bilm-tf hdf5 weight file."""
    dim, filters_width = config.char_embedding_dim, config.num_filters
    proj, cell = config.projection_dim, config.lstm_dim
    table = [
        # bilm-tf stores 261 rows (char ids 0..260); our ids are shifted by +1 and row 0 is padding.
        KeyTableEntry(
            "char_embed",
            (261, dim),
            "character_encoder.char_embedding",
            None,
            lambda w: np.concatenate([np.zeros((1, w.shape[1]), w.dtype), w]),
        ),
    ]
    for index, (width, count) in enumerate(config.filters):
        table += [
            # TF conv2d kernel (1, width, in, out) -> Conv1d weight (out, in, width).
            KeyTableEntry(
                f"CNN/W_cnn_{index}",
                (1, width, dim, count),
                f"character_encoder.convolutions.{index}.weight",
                None,
                lambda w: w[0].transpose(2, 1, 0),
            ),
            KeyTableEntry(
                f"CNN/b_cnn_{index}", (count,), f"character_encoder.convolutions.{index}.bias", None, lambda b: b
            ),
        ]
    for index in range(config.num_highway_layers):
        prefix = f"character_encoder.highways.{index}"
        table += [
            # TF's "carry" gate multiplies the transformed branch: it is our `gate`, sign unchanged.
            KeyTableEntry(
                f"CNN_high_{index}/W_carry",
                (filters_width, filters_width),
                f"{prefix}.gate.weight",
                None,
                lambda w: w.T,
            ),  # TF kernels are (in, out); nn.Linear is (out, in)
            KeyTableEntry(f"CNN_high_{index}/b_carry", (filters_width,), f"{prefix}.gate.bias", None, lambda b: b),
            KeyTableEntry(
                f"CNN_high_{index}/W_transform",
                (filters_width, filters_width),
                f"{prefix}.transform.weight",
                None,
                lambda w: w.T,
            ),
            KeyTableEntry(
                f"CNN_high_{index}/b_transform", (filters_width,), f"{prefix}.transform.bias", None, lambda b: b
            ),
        ]
    if filters_width != proj:
        table += [
            KeyTableEntry(
                "CNN_proj/W_proj", (filters_width, proj), "character_encoder.projection.weight", None, lambda w: w.T
            ),
            KeyTableEntry("CNN_proj/b_proj", (proj,), "character_encoder.projection.bias", None, lambda b: b),
        ]
    for direction in (0, 1):
        for layer in range(config.num_lstm_layers):
            source = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            target = f"encoder.layers.{layer}"
            table += [
                # W_0 is the kernel of [input, previous h]: its first `proj` rows act on the input (both (in, out)).
                KeyTableEntry(
                    f"{source}/W_0",
                    (2 * proj, 4 * cell),
                    f"{target}.input_weight",
                    direction,
                    lambda w: _tf_gates_to_torch(w[:proj], axis=1),
                ),
                KeyTableEntry(
                    f"{source}/W_0",
                    (2 * proj, 4 * cell),
                    f"{target}.recurrent_weight",
                    direction,
                    lambda w: _tf_gates_to_torch(w[proj:], axis=1),
                ),
                # TF's LSTMCell adds forget_bias=1.0 at run time, outside the stored B: fold it into the bias.
                KeyTableEntry(
                    f"{source}/B",
                    (4 * cell,),
                    f"{target}.bias",
                    direction,
                    lambda b: _add_forget_bias(_tf_gates_to_torch(b)),
                ),
                KeyTableEntry(f"{source}/W_P_0", (cell, proj), f"{target}.projection_weight", direction, lambda w: w),
            ]
    return table


def read_hdf5_weights(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """{dataset name: float32 array} for every dataset in a bilm-tf weight file."""
    import h5py

    if not os.path.isfile(path):
        raise UserInputError(f"{path}: no such file; expected bilm-tf's weights .hdf5")
    arrays: dict[str, np.ndarray] = {}
    try:
        with h5py.File(path, "r") as weight_file:
            weight_file.visititems(
                lambda name, item: (
                    arrays.__setitem__(name, np.asarray(item[...])) if isinstance(item, h5py.Dataset) else None
                )
            )
    except OSError as error:
        raise UserInputError(
            f"{path}: not a readable hdf5 weight file ({error}); expected bilm-tf's weights .hdf5"
        ) from None
    return arrays


# ---- Independent check: bilm-tf's arithmetic on the raw arrays, in NumPy ----


def bilm_tf_reference_layers(arrays: Mapping[str, np.ndarray], config: ElmoConfig, char_ids: np.ndarray) -> np.ndarray:
    """All layers `(num_lstm_layers + 1, words, 2 * projection_dim)` of one sentence as bilm-tf computes them
    from its hdf5 arrays (TF layouts, gate order i, j, f, o, forget bias 1.0, zero initial state)."""
    table = np.concatenate([np.zeros((1, arrays["char_embed"].shape[1]), np.float32), arrays["char_embed"]])
    chars = table[char_ids]  # (words, chars, char_dim)
    pieces = []
    for index, (width, _) in enumerate(config.filters):
        kernel = arrays[f"CNN/W_cnn_{index}"][0]  # (width, char_dim, count)
        windows = np.stack([chars[:, k : k + width] for k in range(chars.shape[1] - width + 1)], 1)
        conv = np.einsum("nswd,wdc->nsc", windows, kernel) + arrays[f"CNN/b_cnn_{index}"]
        pooled = conv.max(axis=1)
        pieces.append(np.maximum(pooled, 0) if config.activation == "relu" else np.tanh(pooled))
    x = np.concatenate(pieces, axis=-1)
    for index in range(config.num_highway_layers):
        carry = sigmoid(x @ arrays[f"CNN_high_{index}/W_carry"] + arrays[f"CNN_high_{index}/b_carry"])
        transform = np.maximum(x @ arrays[f"CNN_high_{index}/W_transform"] + arrays[f"CNN_high_{index}/b_transform"], 0)
        x = carry * transform + (1.0 - carry) * x
    if "CNN_proj/W_proj" in arrays:
        x = x @ arrays["CNN_proj/W_proj"] + arrays["CNN_proj/b_proj"]
    layers = [np.concatenate([x, x], axis=-1)]
    direction_inputs = [x, x[::-1]]
    for layer in range(config.num_lstm_layers):
        outputs = []
        for direction in (0, 1):
            prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            c = np.zeros(config.lstm_dim, np.float32)
            h = np.zeros(config.projection_dim, np.float32)
            steps = []
            for token in direction_inputs[direction]:
                z = np.concatenate([token, h]) @ arrays[f"{prefix}/W_0"] + arrays[f"{prefix}/B"]
                i, j, f, o = np.split(z, 4)
                c = sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j)
                if config.cell_clip is not None:
                    c = np.clip(c, -config.cell_clip, config.cell_clip)
                h = (sigmoid(o) * np.tanh(c)) @ arrays[f"{prefix}/W_P_0"]
                if config.proj_clip is not None:
                    h = np.clip(h, -config.proj_clip, config.proj_clip)
                steps.append(h)
            output = np.stack(steps)
            if config.use_skip_connections and layer > 0:
                output = output + direction_inputs[direction]
            outputs.append(output)
        direction_inputs = outputs
        layers.append(np.concatenate([outputs[0], outputs[1][::-1]], axis=-1))
    return np.stack(layers)


def verify_bilm_tf(
    model: ElmoModel, tokenizer: ElmoTokenizer, arrays: Mapping[str, np.ndarray], config: ElmoConfig
) -> float:
    """Raise unless the model's layers match bilm-tf's arithmetic on `arrays` (`VERIFY_SENTENCES`); return the
    largest difference."""
    return verify_against_reference(
        model,
        tokenizer,
        lambda input_ids: bilm_tf_reference_layers(arrays, config, input_ids),
        VERIFY_SENTENCES,
        "bilm-tf's",
    )


def convert_hdf5(
    options_path: str | os.PathLike[str],
    weights_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str] | None = None,
    card_options: dict[str, Any] | None = None,
) -> tuple[ElmoModel, ElmoTokenizer, dict[str, Any]]:
    """Convert options.json + weights.hdf5; verify; save to `output_dir` when given, with a model card made by
    `write_model_card(output_dir, model, **card_options)` (`card_options` defaults to loading from
    `output_dir`). Returns (model, tokenizer, report dict)."""
    config = config_from_options(options_path)
    arrays = read_hdf5_weights(weights_path)
    state_dict = convert_weights(arrays, config, hdf5_key_table(config), source_name=str(weights_path))
    model = build_model(config, state_dict)
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    max_difference = verify_bilm_tf(model, tokenizer, arrays, config)
    report = {
        "source_options": os.path.basename(str(options_path)),
        "source_weights": os.path.basename(str(weights_path)),
        "datasets_converted": len(arrays),
        "verification_max_abs_difference": max_difference,
        "verification_sentences": len(VERIFY_SENTENCES),
        "verification_atol": VERIFY_ATOL,
        "converter": "elmo_hf.convert.convert_bilm_tf",
        "elmo_hf_version": __version__,
    }
    if output_dir is not None:
        with written_whole(output_dir, checkpoint_bytes(model)) as folder:
            save(model, tokenizer, folder, report)
            write_model_card(folder, model, **(card_options or {"repo_id": str(output_dir)}))
    return model, tokenizer, report


# ---- bilm-tf training checkpoints (TF 1.x variable names) ----

# Checkpoint variable name (regex) -> hdf5 dataset name, as bilm-tf's `dump_weights` renames them.
CHECKPOINT_TO_HDF5_NAMES = [
    # The character embedding keeps its 261 rows; hdf5_key_table adds the padding row.
    (r"lm/char_embed", r"char_embed"),
    # CNN filters, highway and projection only lose the "lm/" scope.
    (r"lm/(CNN/[Wb]_cnn_\d+)", r"\1"),
    (r"lm/(CNN_high_\d+/[Wb]_(?:carry|transform))", r"\1"),
    (r"lm/(CNN_proj/[Wb]_proj)", r"\1"),
    # LSTM (RNN_0 forward, RNN_1 backward); with one layer bilm-tf has no MultiRNNCell, so no "cell_k/" scope.
    (r"lm/RNN_([01])/rnn/multi_rnn_cell/cell_(\d+)/lstm_cell/kernel", r"RNN_\1/RNN/MultiRNNCell/Cell\2/LSTMCell/W_0"),
    (r"lm/RNN_([01])/rnn/multi_rnn_cell/cell_(\d+)/lstm_cell/bias", r"RNN_\1/RNN/MultiRNNCell/Cell\2/LSTMCell/B"),
    (
        r"lm/RNN_([01])/rnn/multi_rnn_cell/cell_(\d+)/lstm_cell/projection/kernel",
        r"RNN_\1/RNN/MultiRNNCell/Cell\2/LSTMCell/W_P_0",
    ),
    (r"lm/RNN_([01])/rnn/lstm_cell/kernel", r"RNN_\1/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"),
    (r"lm/RNN_([01])/rnn/lstm_cell/bias", r"RNN_\1/RNN/MultiRNNCell/Cell0/LSTMCell/B"),
    (r"lm/RNN_([01])/rnn/lstm_cell/projection/kernel", r"RNN_\1/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"),
]
# The softmax is only in the checkpoint: W (vocab, projection_dim) is nn.Linear's (out, in) layout already.
CHECKPOINT_SOFTMAX = {"lm/softmax/W": "lm_head.weight", "lm/softmax/b": "lm_head.bias"}
# Skipped on purpose: Adagrad accumulators (optimizer state), the step counter, and bilm-tf's
# `train_perplexity`, a scalar it creates only to feed a TensorBoard summary (never read by the model).
CHECKPOINT_SKIPPED = re.compile(r".*/Adagrad|global_step|train_perplexity")


def split_checkpoint_arrays(
    arrays: Mapping[str, np.ndarray], source_name: str
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Sort checkpoint arrays into (hdf5-named biLM arrays, softmax arrays by parameter name); any variable
    that is neither known nor skipped on purpose is an error."""
    bilm: dict[str, np.ndarray] = {}
    softmax: dict[str, np.ndarray] = {}
    unknown: list[str] = []
    for name, array in arrays.items():
        if CHECKPOINT_SKIPPED.fullmatch(name):
            continue
        if name in CHECKPOINT_SOFTMAX:
            softmax[CHECKPOINT_SOFTMAX[name]] = array
            continue
        for pattern, replacement in CHECKPOINT_TO_HDF5_NAMES:
            if re.fullmatch(pattern, name):
                bilm[re.sub(pattern, replacement, name)] = array
                break
        else:
            unknown.append(name)
    if unknown:
        raise UserInputError(f"{source_name}: variables not used by this converter: {sorted(unknown)}")
    if len(softmax) == 1:
        raise UserInputError(f"{source_name}: the softmax is incomplete, it has only {sorted(softmax)}")
    return bilm, softmax


def convert_tf_checkpoint(
    checkpoint_prefix: str | os.PathLike[str],
    options_path: str | os.PathLike[str],
    vocab_path: str | os.PathLike[str] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
) -> tuple[ElmoModel | ElmoForPreTraining, ElmoTokenizer, dict[str, Any]]:
    """Convert a bilm-tf training checkpoint (+ options.json, + vocab.txt when it has a softmax) to an
    `ElmoForPreTraining`, or to an `ElmoModel` when the checkpoint has no softmax. Verifies before saving.
    Returns (model, tokenizer, report dict)."""
    options = _read_options_file(options_path)
    arrays = read_tf_checkpoint(str(checkpoint_prefix))
    bilm_arrays, softmax = split_checkpoint_arrays(arrays, str(checkpoint_prefix))
    config_fields: dict[str, Any] = {}
    vocabulary: ElmoWordVocabulary | None = None
    if softmax:
        vocab_size = softmax["lm_head.weight"].shape[0]
        if vocab_path is None:
            raise UserInputError(
                f"{checkpoint_prefix}: the checkpoint has a softmax over {vocab_size} words: give --vocab"
            )
        if not os.path.isfile(vocab_path):
            raise UserInputError(f"{vocab_path}: no such file; expected bilm-tf's vocab.txt, one word per line")
        vocabulary = ElmoWordVocabulary.from_file(vocab_path)
        if len(vocabulary) != vocab_size:
            raise UserInputError(
                f"{vocab_path}: has {len(vocabulary)} words, but the checkpoint's softmax has {vocab_size}"
            )
        config_fields = dict(vocab_size=vocab_size, num_sampled_negatives=options.get("n_negative_samples_batch", 0))
    else:
        print(
            f"{checkpoint_prefix} has no softmax (lm/softmax/W): converting the biLM only, to ElmoModel",
            file=sys.stderr,
        )
    try:
        config = config_from_options(options, **config_fields)
    except UserInputError as error:
        raise UserInputError(f"{options_path}: {error}") from None
    state_dict = convert_weights(bilm_arrays, config, hdf5_key_table(config), source_name=str(checkpoint_prefix))
    elmo = build_model(config, state_dict)
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    max_difference = verify_bilm_tf(elmo, tokenizer, bilm_arrays, config)
    model: ElmoModel | ElmoForPreTraining = elmo
    if softmax:
        model = ElmoForPreTraining(config)
        model.elmo.load_state_dict(state_dict, strict=True)
        head = {name.split(".")[1]: torch.from_numpy(value.astype(np.float32)) for name, value in softmax.items()}
        model.lm_head.load_state_dict(head, strict=True)
        model.eval()
    report = {
        "source_checkpoint": os.path.basename(str(checkpoint_prefix)),
        "source_options": os.path.basename(str(options_path)),
        "variables_converted": len(bilm_arrays) + len(softmax),
        "variables_skipped": len(arrays) - len(bilm_arrays) - len(softmax),
        "model_class": type(model).__name__,
        "verification_max_abs_difference": max_difference,
    }
    if output_dir is not None:
        with written_whole(output_dir, checkpoint_bytes(model)) as folder:
            save(model, tokenizer, folder, report)
            if vocabulary is not None:
                vocabulary.save_pretrained(folder)  # vocab.txt: the language model's targets
    return model, tokenizer, report
