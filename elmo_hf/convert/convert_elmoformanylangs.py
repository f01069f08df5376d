"""ELMoForManyLangs (HIT-SCIR, PyPI `elmoformanylangs`, 44 languages): its model folders, and their conversion to
elmo_hf checkpoints.

A model folder holds `config.json` (the training options; only its `config_path` is read), the model config it
names, `char.dic` and `word.dic` (`token<TAB>id` lexicons), and two torch state dicts, `token_embedder.pkl` and
`encoder.pkl`. The state dicts are read with `torch.load(weights_only=True)` (tensors only, nothing unpickled), and the
checkpoint written is safetensors, as every elmo-hf checkpoint. Every quirk of the format lives here, one commented
line each: in `config_from_model_config`, `efml_key_table` and `efml_tokenizer`. Before anything is written, the
converted model's outputs are compared with a NumPy re-implementation of ELMoForManyLangs' arithmetic run on the
untouched source tensors (`efml_reference_layers`).

Problems with the input files raise `UserInputError` naming the file and what was expected; `elmo-hf convert
--elmoformanylangs` prints them as one line.
"""

import json
import os
import pickle
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .. import __version__
from ..model.configuration_elmo import ElmoConfig, ElmoConfigFieldError
from ..model.modeling_elmo import ElmoModel
from ..model.tokenization_elmo import ElmoTokenizer
from ..user_errors import UserInputError
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

VERIFY_SENTENCES = [
    ["ELMo", "in", "44", "languages", "."],
    ["Ünïcödé", "文字", "🙂", "and", "a", "really" * 12, "long", "one"],
]
# The lexicon entries ELMoForManyLangs adds to char.dic and word.dic (frontend.create_one_batch reads them).
CHAR_MARKERS = ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>")
WORD_MARKERS = ("<oov>", "<bos>", "<eos>", "<pad>")
WEIGHT_FILES = ("token_embedder.pkl", "encoder.pkl")
# The model configs the package ships in elmoformanylangs/configs/ (both files hold the same config), used by its
# published English model, whose config.json names one of them.
_PACKAGE_CONFIG = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
}
PACKAGE_CONFIGS = {
    "cnn_50_100_512_4096_sample.json": _PACKAGE_CONFIG,
    "cnn_0_100_512_4096_sample.json": _PACKAGE_CONFIG,
}


# ---- the model folder ----


def is_efml_folder(folder: str | os.PathLike[str]) -> bool:
    """Whether `folder` looks like an ELMoForManyLangs model (its weight files), not a converted checkpoint."""
    return os.path.isfile(os.path.join(folder, "encoder.pkl")) and not os.path.isfile(
        os.path.join(folder, "model.safetensors")
    )


def _read_json(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise UserInputError(f"{path}: no such file; expected {what}")
    try:
        with open(path, encoding="utf-8") as file:
            value = json.load(file)
    except (OSError, ValueError) as error:
        raise UserInputError(f"{path}: not readable JSON ({error}); expected {what}") from None
    if not isinstance(value, dict):
        raise UserInputError(f"{path}: holds a {type(value).__name__}, expected {what} (a JSON object)")
    return value


def read_model_config(folder: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """The model config of an ELMoForManyLangs folder, and where it came from, looked for as `Embedder` does: the
    `config_path` of config.json joined to the folder, then its file name in the folder, then the package's own
    configs (published models name a path on their trainer's machine)."""
    options_path = os.path.join(folder, "config.json")
    options = _read_json(options_path, "ELMoForManyLangs' training options with a 'config_path'")
    config_path = options.get("config_path")
    if not isinstance(config_path, str) or not config_path:
        raise UserInputError(f"{options_path}: has no 'config_path' string, expected the model config's path")
    name = os.path.basename(config_path)
    for candidate in (os.path.join(folder, config_path), os.path.join(folder, name)):
        if os.path.isfile(candidate):
            return _read_json(candidate, "an ELMoForManyLangs model config"), candidate
    if name in PACKAGE_CONFIGS:
        return PACKAGE_CONFIGS[name], f"elmoformanylangs/configs/{name}"
    raise UserInputError(
        f"{options_path}: its config_path {config_path!r} is neither in {folder} nor one of the package's configs "
        f"{sorted(PACKAGE_CONFIGS)}; expected the model config beside config.json"
    )


def read_lexicon(path: str | os.PathLike[str]) -> dict[str, int]:
    """{token: id} of a `char.dic`/`word.dic`, parsed exactly as ELMoForManyLangs does: each line stripped, then split
    at tabs; a line left with one field (its token was whitespace, stripped away) is the token U+3000. The ids must
    be the embedding rows 0..N-1."""
    if not os.path.isfile(path):
        raise UserInputError(f"{path}: no such file; expected ELMoForManyLangs' lexicon, one 'token<TAB>id' a line")
    lexicon: dict[str, int] = {}
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            fields = line.strip().split("\t")
            if len(fields) == 1:
                fields.insert(0, "\u3000")
            if len(fields) != 2 or not fields[1].isdigit():
                raise UserInputError(f"{path}: line {number} is {line.rstrip(chr(10))!r}, expected 'token<TAB>id'")
            lexicon[fields[0]] = int(fields[1])
    if sorted(lexicon.values()) != list(range(len(lexicon))):
        raise UserInputError(f"{path}: the ids are not 0..{len(lexicon) - 1}, each once (one per embedding row)")
    return lexicon


def read_state_dict(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """{name: float32 array} of one weight file (a torch state dict), read without unpickling any object."""
    what = "ELMoForManyLangs' weights, a torch state dict of tensors"
    if not os.path.isfile(path):
        raise UserInputError(f"{path}: no such file; expected {what}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # weights_only refuses to build any object but tensors and containers
        raise UserInputError(f"{path}: holds objects other than tensors (not unpickled), expected {what}") from None
    except Exception as error:  # torch raises many kinds for a damaged or foreign file
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserInputError(f"{path}: not readable as {what} ({message})") from None
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise UserInputError(f"{path}: holds a {type(state).__name__} that is not a state dict, expected {what}")
    return {name: value.detach().float().numpy() for name, value in state.items()}


# ---- the config ----


def config_from_model_config(
    model_config: dict[str, Any], source: str, char_lexicon: Mapping[str, int], word_lexicon: Mapping[str, int] | None
) -> ElmoConfig:
    """The ElmoConfig of an ELMoForManyLangs model config (`source` names it in errors)."""
    try:
        encoder, token = model_config["encoder"], model_config["token_embedder"]
        if encoder["name"].lower() != "elmo":
            # Its "lstm" encoder is a plain nn.LSTM, not ELMo's biLM (and sents2elmo mishandles its layers).
            raise UserInputError(f"{source}: encoder.name is {encoder['name']!r}, expected 'elmo'")
        if token["name"].lower() != "cnn" or token["char_dim"] <= 0:
            # Its LSTM token embedder crashes in its own forward whenever it has characters (a 2-D and a 3-D
            # tensor concatenated); without characters the model is a word-only one, which elmo-hf does not hold.
            raise UserInputError(
                f"{source}: token_embedder is {token['name']!r} with char_dim {token['char_dim']}, expected 'cnn' "
                "with char_dim > 0 (the character CNN)"
            )
        fields = dict(
            char_embedding_dim=token["char_dim"],
            filters=token["filters"],
            num_highway_layers=token["n_highway"],
            activation=token["activation"],  # the CNN's; its highway layers are relu whatever this says, as ours
            max_characters_per_token=token["max_characters_per_token"],
            # Our character and word ids are ELMoForManyLangs' plus one: 0 stays the padding word.
            char_vocabulary="lexicon",
            num_characters=len(char_lexicon) + 1,
            word_embedding_dim=token["word_dim"],
            # word_lexicon is given whenever word_dim > 0 (convert_efml reads word.dic then).
            word_embedding_vocab_size=len(word_lexicon) + 1 if token["word_dim"] > 0 else 0,  # type: ignore[arg-type]
            always_project_tokens=True,  # it projects even when the widths already match
            lstm_dim=encoder["dim"],
            projection_dim=encoder["projection_dim"],
            num_lstm_layers=encoder["n_layers"],
            # Its LstmCellWithProjection clips only when the value is truthy: 0 means no clip.
            cell_clip=encoder["cell_clip"] or None,
            proj_clip=encoder["proj_clip"] or None,
            use_skip_connections=True,  # ElmobiLm adds the residual to every layer after the first, always
        )
    except (KeyError, TypeError, AttributeError) as error:
        raise UserInputError(f"{source}: lacks or mistypes {error}, expected ELMoForManyLangs' model config") from None
    try:
        return ElmoConfig(**fields)
    except ElmoConfigFieldError as error:
        raise UserInputError(f"{source}: {error}") from None


# ---- the weights: the key table ----


def efml_key_table(config: ElmoConfig) -> list[KeyTableEntry]:
    """One entry per (source tensor, target parameter) pair. Sources are named `file/key`: `token_embedder.pkl/...`
    (ConvTokenEmbedder) and `encoder.pkl/...` (ElmobiLm)."""
    char_dim, filters_width, word_dim = config.char_embedding_dim, config.num_filters, config.word_embedding_dim
    proj, cell = config.projection_dim, config.lstm_dim
    token = "token_embedder.pkl/"
    embeddings = [("char_emb_layer", config.num_characters, char_dim, "character_encoder.char_embedding")]
    if word_dim:
        embeddings.append(
            ("word_emb_layer", config.word_embedding_vocab_size, word_dim, "character_encoder.word_embedding.weight")
        )
    # Row 0 of our embeddings is the padding word (zeros); ELMoForManyLangs' rows follow (its ids + 1).
    table = [
        KeyTableEntry(
            f"{token}{layer}.embedding.weight",
            (rows - 1, dim),
            target,
            None,
            lambda w: np.concatenate([np.zeros((1, w.shape[1]), w.dtype), w]),
        )
        for layer, rows, dim, target in embeddings
    ]
    for index, (width, count) in enumerate(config.filters):
        table += [
            # nn.Conv1d on both sides: (out, in, width), bias added before the max as ours after it (same result).
            KeyTableEntry(
                f"{token}convolutions.{index}.weight",
                (count, char_dim, width),
                f"character_encoder.convolutions.{index}.weight",
                None,
                lambda w: w,
            ),
            KeyTableEntry(
                f"{token}convolutions.{index}.bias",
                (count,),
                f"character_encoder.convolutions.{index}.bias",
                None,
                lambda b: b,
            ),
        ]
    half = filters_width
    for index in range(config.num_highway_layers):
        source, target = f"{token}highways._layers.{index}", f"character_encoder.highways.{index}"
        table += [
            # allennlp's Highway: one Linear(d, 2d), `g * x + (1 - g) * relu(A x)`; A is its first half.
            KeyTableEntry(f"{source}.weight", (2 * half, half), f"{target}.transform.weight", None, lambda w: w[:half]),
            KeyTableEntry(f"{source}.bias", (2 * half,), f"{target}.transform.bias", None, lambda b: b[:half]),
            # Its gate g (second half) keeps the input; ours weighs the transform: ours = 1 - g = sigmoid(-(B x + b)).
            KeyTableEntry(f"{source}.weight", (2 * half, half), f"{target}.gate.weight", None, lambda w: -w[half:]),
            KeyTableEntry(f"{source}.bias", (2 * half,), f"{target}.gate.bias", None, lambda b: -b[half:]),
        ]
    table += [
        # It projects cat([word embedding, char CNN]); ours cat([char CNN, word embedding]): the columns swap halves.
        KeyTableEntry(
            f"{token}projection.weight",
            (proj, word_dim + filters_width),
            "character_encoder.projection.weight",
            None,
            lambda w: np.concatenate([w[:, word_dim:], w[:, :word_dim]], axis=1),
        ),
        KeyTableEntry(f"{token}projection.bias", (proj,), "character_encoder.projection.bias", None, lambda b: b),
    ]
    for direction, name in enumerate(("forward", "backward")):
        for layer in range(config.num_lstm_layers):
            source, target = f"encoder.pkl/{name}_layer_{layer}", f"encoder.layers.{layer}"
            table += [
                # allennlp's LstmCellWithProjection: gates i, f, g, o as ours; nn.Linear (out, in) -> our (in, out).
                KeyTableEntry(
                    f"{source}.input_linearity.weight",
                    (4 * cell, proj),
                    f"{target}.input_weight",
                    direction,
                    lambda w: w.T,
                ),
                KeyTableEntry(
                    f"{source}.state_linearity.weight",
                    (4 * cell, proj),
                    f"{target}.recurrent_weight",
                    direction,
                    lambda w: w.T,
                ),
                # The state linearity holds the only bias, forget gate included (no forget bias added at run time).
                KeyTableEntry(f"{source}.state_linearity.bias", (4 * cell,), f"{target}.bias", direction, lambda b: b),
                KeyTableEntry(
                    f"{source}.state_projection.weight",
                    (proj, cell),
                    f"{target}.projection_weight",
                    direction,
                    lambda w: w.T,
                ),
            ]
    return table


def check_state_dicts(
    folder: str | os.PathLike[str], arrays: Mapping[str, np.ndarray], key_table: Sequence[KeyTableEntry]
) -> None:
    """Each weight file holds exactly the keys and shapes the model config gives it; else an error naming the file."""
    expected = {entry.source: entry.source_shape for entry in key_table}
    for name in sorted(arrays):
        path = os.path.join(folder, name.split("/")[0])
        if name not in expected:
            raise UserInputError(
                f"{path}: unknown key '{name.split('/', 1)[1]}', not part of the model its config describes"
            )
        if tuple(arrays[name].shape) != expected[name]:
            key, shape = name.split("/", 1)[1], tuple(arrays[name].shape)
            raise UserInputError(
                f"{path}: key '{key}' has shape {shape}, expected {expected[name]} from the model config"
            )
    for name in sorted(set(expected) - set(arrays)):
        path = os.path.join(folder, name.split("/")[0])
        raise UserInputError(f"{path}: lacks the key '{name.split('/', 1)[1]}' (expected shape {expected[name]})")


# ---- the tokenizer ----


def efml_tokenizer(
    config: ElmoConfig,
    char_lexicon: Mapping[str, int],
    word_lexicon: Mapping[str, int] | None,
    lexicon_dir: str | os.PathLike[str],
) -> ElmoTokenizer:
    """An ElmoTokenizer reproducing ELMoForManyLangs' rows (frontend.create_one_batch); its lexicons are written to
    `lexicon_dir` first."""
    files: dict[str, Any] = {}  # the lexicon file arguments
    for key, lexicon in (("char_lexicon_file", char_lexicon), ("word_lexicon_file", word_lexicon)):
        if lexicon is not None:
            files[key] = os.path.join(lexicon_dir, ElmoTokenizer.vocab_files_names[key])
            with open(files[key], "w", encoding="utf-8") as file:
                json.dump({token: index + 1 for token, index in lexicon.items()}, file, ensure_ascii=False)
    return ElmoTokenizer(
        max_characters_per_token=config.max_characters_per_token,
        bos_token="<bos>",  # sentences start with the word <bos> and end with <eos>, each its own lexicon entry
        eos_token="<eos>",
        # create_one_batch swaps the names (`bow_id, eow_id = char2id['<eow>'], char2id['<bow>']`): a word's row
        # starts with <eow>'s id and ends with <bow>'s. Positions after it hold <pad>, unknown characters <oov>.
        char_markers={"begin_of_word": "<eow>", "end_of_word": "<bow>", "padding": "<pad>", "unknown": "<oov>"},
        word_markers={"unknown": "<oov>"} if word_lexicon is not None else None,
        **files,
    )


# ---- Independent check: ELMoForManyLangs' arithmetic on the raw tensors, in NumPy ----


def efml_reference_layers(
    arrays: Mapping[str, np.ndarray], config: ElmoConfig, char_rows: np.ndarray, word_ids: np.ndarray | None = None
) -> np.ndarray:
    """All layers `(num_lstm_layers + 1, words, 2 * projection_dim)` of one sentence as ELMoForManyLangs computes
    them from its state dicts (its ids, zero initial state). char_rows `(words, max_chars)`, word_ids `(words,)`."""
    token = {key.split("/", 1)[1]: value for key, value in arrays.items() if key.startswith("token_embedder.pkl/")}
    chars = token["char_emb_layer.embedding.weight"][char_rows]  # (words, chars, char_dim)
    pieces = []
    for index, (width, _) in enumerate(config.filters):
        kernel = token[f"convolutions.{index}.weight"]  # (count, char_dim, width)
        windows = np.stack([chars[:, k : k + width] for k in range(chars.shape[1] - width + 1)], 1)
        pooled = np.einsum("nswd,cdw->nsc", windows, kernel).max(axis=1) + token[f"convolutions.{index}.bias"]
        pieces.append(np.maximum(pooled, 0) if config.activation == "relu" else np.tanh(pooled))
    x = np.concatenate(pieces, axis=-1)
    half = x.shape[-1]
    for index in range(config.num_highway_layers):
        projected = x @ token[f"highways._layers.{index}.weight"].T + token[f"highways._layers.{index}.bias"]
        gate = sigmoid(projected[:, half:])
        x = gate * x + (1 - gate) * np.maximum(projected[:, :half], 0)
    if word_ids is not None:
        x = np.concatenate([token["word_emb_layer.embedding.weight"][word_ids], x], axis=-1)
    x = x @ token["projection.weight"].T + token["projection.bias"]
    layers, inputs = [np.concatenate([x, x], axis=-1)], [x, x[::-1]]
    for layer in range(config.num_lstm_layers):
        outputs = []
        for direction, name in enumerate(("forward", "backward")):
            prefix = f"encoder.pkl/{name}_layer_{layer}"
            c, h, steps = np.zeros(config.lstm_dim, np.float32), np.zeros(config.projection_dim, np.float32), []
            for word in inputs[direction]:
                z = (
                    word @ arrays[f"{prefix}.input_linearity.weight"].T
                    + h @ arrays[f"{prefix}.state_linearity.weight"].T
                    + arrays[f"{prefix}.state_linearity.bias"]
                )
                i, f, g, o = np.split(z, 4)
                c = sigmoid(i) * np.tanh(g) + sigmoid(f) * c
                c = c if config.cell_clip is None else np.clip(c, -config.cell_clip, config.cell_clip)
                h = (sigmoid(o) * np.tanh(c)) @ arrays[f"{prefix}.state_projection.weight"].T
                h = h if config.proj_clip is None else np.clip(h, -config.proj_clip, config.proj_clip)
                steps.append(h)
            output = np.stack(steps)
            outputs.append(output + inputs[direction] if layer > 0 else output)
        inputs = outputs
        layers.append(np.concatenate([outputs[0], outputs[1][::-1]], axis=-1))
    return np.stack(layers)


def verify_efml(
    model: ElmoModel, tokenizer: ElmoTokenizer, arrays: Mapping[str, np.ndarray], config: ElmoConfig
) -> float:
    """Raise unless the model's layers match ELMoForManyLangs' arithmetic on `arrays` (`VERIFY_SENTENCES`); return
    the largest difference."""
    chars = config.max_characters_per_token

    def reference_layers(input_ids: np.ndarray) -> np.ndarray:
        ids = input_ids - 1  # back to ELMoForManyLangs' ids: the character rows, then the word's id when it has one
        return efml_reference_layers(
            arrays, config, ids[:, :chars], ids[:, chars] if config.word_embedding_dim else None
        )

    return verify_against_reference(model, tokenizer, reference_layers, VERIFY_SENTENCES, "ELMoForManyLangs'")


# ---- conversion ----


def convert_efml(
    folder: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None = None
) -> tuple[ElmoModel, ElmoTokenizer, dict[str, Any]]:
    """Convert an ELMoForManyLangs model folder; verify; save to `output_dir` when given (config.json,
    model.safetensors, the tokenizer and its lexicons, conversion_report.json). Returns (model, tokenizer, report)."""
    folder = str(folder)
    if not os.path.isdir(folder):
        raise UserInputError(f"{folder}: no such folder; expected an ELMoForManyLangs model folder")
    model_config, config_source = read_model_config(folder)
    char_lexicon = read_lexicon(os.path.join(folder, "char.dic"))
    token_config = model_config.get("token_embedder")
    word_dim = token_config.get("word_dim", 0) if isinstance(token_config, dict) else 0
    # word.dic is read only for a word embedding, as the package does.
    word_lexicon = (
        read_lexicon(os.path.join(folder, "word.dic")) if isinstance(word_dim, int) and word_dim > 0 else None
    )
    for lexicon, markers, name in ((char_lexicon, CHAR_MARKERS, "char.dic"), (word_lexicon, WORD_MARKERS, "word.dic")):
        missing = [marker for marker in markers if lexicon is not None and marker not in lexicon]
        if missing:
            path = os.path.join(folder, name)
            raise UserInputError(f"{path}: has no entry {missing[0]!r}, expected ELMoForManyLangs' {' '.join(markers)}")
    config = config_from_model_config(model_config, config_source, char_lexicon, word_lexicon)
    arrays: dict[str, np.ndarray] = {}
    for name in WEIGHT_FILES:
        arrays.update({f"{name}/{key}": value for key, value in read_state_dict(os.path.join(folder, name)).items()})
    key_table = efml_key_table(config)
    check_state_dicts(folder, arrays, key_table)
    model = build_model(config, convert_weights(arrays, config, key_table, source_name=folder))
    with tempfile.TemporaryDirectory() as lexicon_dir:  # the tokenizer keeps its lexicons in memory
        tokenizer = efml_tokenizer(config, char_lexicon, word_lexicon, lexicon_dir)
    max_difference = verify_efml(model, tokenizer, arrays, config)
    report = {
        "source_folder": os.path.basename(os.path.abspath(folder)),
        "source_model_config": os.path.basename(config_source),
        "tensors_converted": len(arrays),
        "verification_max_abs_difference": max_difference,
        "verification_sentences": len(VERIFY_SENTENCES),
        "verification_atol": VERIFY_ATOL,
        "converter": "elmo_hf.convert.convert_elmoformanylangs",
        "elmo_hf_version": __version__,
    }
    if output_dir is not None:
        with written_whole(output_dir, checkpoint_bytes(model)) as folder:
            save(model, tokenizer, folder, report)
    return model, tokenizer, report
