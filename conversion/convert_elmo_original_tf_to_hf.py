"""Convert the original (bilm-tf) ELMo files to a Hugging Face checkpoint.

    python conversion/convert_elmo_original_tf_to_hf.py --options options.json --weights weights.hdf5 \
        --output-dir elmo-original

Every TensorFlow quirk is undone here, in `hdf5_key_table`, one commented line each; the model in
`elmo_hf/modeling_elmo.py` knows nothing of them. Before anything is written, the converted model's outputs
are compared with a NumPy re-implementation of bilm-tf's own arithmetic run on the untouched source arrays.
TensorFlow is not needed.
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer

VERIFY_SENTENCES = [
    ["The", "original", "ELMo", "reads", "characters", "."],
    ["Ünïcödé", "wörds", "and", "a", "really" * 12, "long", "one"],
]
VERIFY_ATOL = 1e-5


@dataclass(frozen=True)
class KeyTableEntry:
    source: str  # dataset name in the bilm-tf hdf5 file
    source_shape: tuple  # its expected shape
    target: str  # parameter name in ElmoModel
    direction: int | None  # for the stacked LSTM parameters: 0 = forward (RNN_0), 1 = backward (RNN_1)
    transform: Callable[[np.ndarray], np.ndarray]  # TF layout -> ours


def _tf_gates_to_torch(x, axis=-1):
    """TF LSTMCell gate blocks (i, j, f, o) -> PyTorch's (i, f, g, o), along `axis`."""
    i, j, f, o = np.split(x, 4, axis=axis)
    return np.concatenate([i, f, j, o], axis=axis)


def _add_forget_bias(bias):
    bias = bias.copy()
    quarter = bias.shape[-1] // 4
    bias[quarter : 2 * quarter] += 1.0  # block 1 is the forget gate in PyTorch order
    return bias


def hdf5_key_table(config):
    """One entry per (source dataset, target parameter) pair for a bilm-tf hdf5 weight file."""
    dim, filters_width = config.char_embedding_dim, config.num_filters
    proj, cell = config.projection_dim, config.lstm_dim
    table = [
        # bilm-tf stores 261 rows (char ids 0..260); our ids are shifted by +1 and row 0 is padding.
        KeyTableEntry("char_embed", (261, dim), "character_encoder.char_embedding", None,
                      lambda w: np.concatenate([np.zeros((1, w.shape[1]), w.dtype), w])),
    ]
    for index, (width, count) in enumerate(config.filters):
        table += [
            # TF conv2d kernel (1, width, in, out) -> Conv1d weight (out, in, width).
            KeyTableEntry(f"CNN/W_cnn_{index}", (1, width, dim, count),
                          f"character_encoder.convolutions.{index}.weight", None, lambda w: w[0].transpose(2, 1, 0)),
            KeyTableEntry(f"CNN/b_cnn_{index}", (count,),
                          f"character_encoder.convolutions.{index}.bias", None, lambda b: b),
        ]
    for index in range(config.num_highway_layers):
        prefix = f"character_encoder.highways.{index}"
        table += [
            # TF's "carry" gate multiplies the transformed branch: it is our `gate`, sign unchanged.
            KeyTableEntry(f"CNN_high_{index}/W_carry", (filters_width, filters_width), f"{prefix}.gate.weight",
                          None, lambda w: w.T),  # TF kernels are (in, out); nn.Linear is (out, in)
            KeyTableEntry(f"CNN_high_{index}/b_carry", (filters_width,), f"{prefix}.gate.bias", None, lambda b: b),
            KeyTableEntry(f"CNN_high_{index}/W_transform", (filters_width, filters_width),
                          f"{prefix}.transform.weight", None, lambda w: w.T),
            KeyTableEntry(f"CNN_high_{index}/b_transform", (filters_width,), f"{prefix}.transform.bias",
                          None, lambda b: b),
        ]
    if filters_width != proj:
        table += [
            KeyTableEntry("CNN_proj/W_proj", (filters_width, proj), "character_encoder.projection.weight", None,
                          lambda w: w.T),
            KeyTableEntry("CNN_proj/b_proj", (proj,), "character_encoder.projection.bias", None, lambda b: b),
        ]
    for direction in (0, 1):
        for layer in range(config.num_lstm_layers):
            source = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            target = f"encoder.layers.{layer}"
            table += [
                # W_0 is the kernel of [input, previous h]: its first `proj` rows act on the input.
                KeyTableEntry(f"{source}/W_0", (2 * proj, 4 * cell), f"{target}.input_weight", direction,
                              lambda w: _tf_gates_to_torch(w[:proj].T, axis=0)),
                KeyTableEntry(f"{source}/W_0", (2 * proj, 4 * cell), f"{target}.recurrent_weight", direction,
                              lambda w: _tf_gates_to_torch(w[proj:].T, axis=0)),
                # TF's LSTMCell adds forget_bias=1.0 at run time, outside the stored B: fold it into the bias.
                KeyTableEntry(f"{source}/B", (4 * cell,), f"{target}.bias", direction,
                              lambda b: _add_forget_bias(_tf_gates_to_torch(b))),
                KeyTableEntry(f"{source}/W_P_0", (cell, proj), f"{target}.projection_weight", direction,
                              lambda w: w.T),
            ]
    return table


def read_hdf5_weights(path):
    """{dataset name: float32 array} for every dataset in a bilm-tf weight file."""
    import h5py

    arrays = {}
    try:
        with h5py.File(path, "r") as weight_file:
            weight_file.visititems(
                lambda name, item: arrays.__setitem__(name, np.asarray(item[...]))
                if isinstance(item, h5py.Dataset)
                else None
            )
    except OSError as error:
        raise ValueError(f"{path}: not a readable hdf5 weight file ({error})") from None
    return arrays


def convert_weights(arrays, config, key_table, source_name="weights"):
    """The ElmoModel state dict built from `arrays`, checking that every source array is used and every
    parameter filled with the expected shapes."""
    reference = ElmoModel(config).state_dict()
    state_dict = {name: torch.empty_like(tensor) for name, tensor in reference.items()}
    filled = {name: set() for name in reference}
    for entry in key_table:
        if entry.source not in arrays:
            raise ValueError(
                f"{source_name}: dataset '{entry.source}' is missing (expected shape {entry.source_shape})"
            )
        array = arrays[entry.source]
        if tuple(array.shape) != entry.source_shape:
            raise ValueError(
                f"{source_name}: dataset '{entry.source}' has shape {tuple(array.shape)}, "
                f"expected {entry.source_shape} for {entry.target}"
            )
        if not np.issubdtype(array.dtype, np.floating):
            raise ValueError(f"{source_name}: dataset '{entry.source}' has dtype {array.dtype}, expected float")
        value = torch.from_numpy(np.ascontiguousarray(entry.transform(array.astype(np.float32))))
        target = state_dict[entry.target] if entry.direction is None else state_dict[entry.target][entry.direction]
        if value.shape != target.shape:
            raise ValueError(f"key table bug: {entry.source} gives {tuple(value.shape)} for {entry.target}")
        target.copy_(value)
        filled[entry.target].add(entry.direction)
    unused = sorted(set(arrays) - {entry.source for entry in key_table})
    if unused:
        raise ValueError(f"{source_name}: datasets not used by this config: {unused}")
    for name, directions in filled.items():
        needed = {0, 1} if name.startswith("encoder.") else {None}  # stacked LSTM parameters: both directions
        if directions != needed:
            raise ValueError(f"no source dataset fills parameter {name}")
    return state_dict


def build_model(config, state_dict):
    model = ElmoModel(config)
    model.load_state_dict(state_dict, strict=True)
    return model.eval()


# ---- Independent check: bilm-tf's arithmetic on the raw arrays, in NumPy ----


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def bilm_tf_reference_layers(arrays, config, char_ids):
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
        carry = _sigmoid(x @ arrays[f"CNN_high_{index}/W_carry"] + arrays[f"CNN_high_{index}/b_carry"])
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
                c = _sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(j)
                if config.cell_clip is not None:
                    c = np.clip(c, -config.cell_clip, config.cell_clip)
                h = (_sigmoid(o) * np.tanh(c)) @ arrays[f"{prefix}/W_P_0"]
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


def verify_against_reference(model, arrays, config, tokenizer, sentences=VERIFY_SENTENCES, atol=VERIFY_ATOL):
    """Raise unless the model's layers match bilm-tf's arithmetic on every sentence; return the max difference."""
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        layers = model(**batch, output_hidden_states=True).hidden_states
    ours = torch.stack(layers, dim=1).numpy()  # (batch, layers, words, 2 * proj)
    worst = 0.0
    for row, length in enumerate(batch["attention_mask"].sum(1).tolist()):
        expected = bilm_tf_reference_layers(arrays, config, batch["input_ids"][row, :length].numpy())
        difference = float(np.abs(ours[row, :, :length] - expected).max())
        worst = max(worst, difference)
        if not np.allclose(ours[row, :, :length], expected, atol=atol):
            raise ValueError(f"converted model differs from bilm-tf's arithmetic by {difference:.3g} (sentence {row})")
    return worst


def convert_hdf5(options_path, weights_path, output_dir=None):
    """Convert options.json + weights.hdf5; verify; save to `output_dir` when given. Returns (model, tokenizer,
    report dict)."""
    config = ElmoConfig.from_options_json(options_path)
    arrays = read_hdf5_weights(weights_path)
    state_dict = convert_weights(arrays, config, hdf5_key_table(config), source_name=str(weights_path))
    model = build_model(config, state_dict)
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    max_difference = verify_against_reference(model, arrays, config, tokenizer)
    report = {
        "source_options": os.path.basename(str(options_path)),
        "source_weights": os.path.basename(str(weights_path)),
        "datasets_converted": len(arrays),
        "verification_max_abs_difference": max_difference,
    }
    if output_dir is not None:
        save(model, tokenizer, output_dir, report)
    return model, tokenizer, report


def save(model, tokenizer, output_dir, report):
    model.save_pretrained(output_dir)  # config.json, model.safetensors and the modeling code
    tokenizer.save_pretrained(output_dir)
    with open(os.path.join(output_dir, "conversion_report.json"), "w", encoding="utf-8") as report_file:
        json.dump(report, report_file, indent=2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--options", required=True, help="bilm-tf options.json")
    parser.add_argument("--weights", required=True, help="bilm-tf weights .hdf5 (the published format)")
    parser.add_argument("--output-dir", required=True, help="where to write the Hugging Face checkpoint")
    args = parser.parse_args(argv)
    _, _, report = convert_hdf5(args.options, args.weights, args.output_dir)
    print(
        f"converted {report['datasets_converted']} datasets; outputs match bilm-tf's arithmetic to "
        f"{report['verification_max_abs_difference']:.2e}; saved to {args.output_dir}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
