"""int8 weights (`ElmoModel.quantize_weights`, `ElmoEmbedder(quantize=)`, `elmo-hf embed --quantize`): the model's
own state (saved, reloaded as int8), close to float32 within bounds per kind of int8 product, and one-line errors
where int8 cannot run; bfloat16 loaded, saved and reloaded as bfloat16."""

import contextlib
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import (
    FIXED_TRAINED_MODEL,
    INT8_LOWEST_COSINE,
    REPO_ROOT,
    SENTENCES,
    int8_lowest_cosine,
    read_output,
    run_offline_without_repository,
    tiny_model,
    write_lines,
)

from elmo_hf import DEFAULT_MODEL, ElmoEmbedder, ElmoModel, ElmoTokenizer, cli
from elmo_hf.model import cpu_kernels, weight_cache
from elmo_hf.model.cpu_kernels import int8_products_available, quantize_rows

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not int8_products_available(), reason="this PyTorch has no x86/fbgemm quantized engine"),
]


# The bounds on int8's deviation are held on FIXED_TRAINED_MODEL (helpers.py): on these 25 words a retraining of the
# default moved the lowest cosine per word by up to 1e-3, while over 64 workload sentences the successive defaults'
# lowest moved little (0.9979, 0.9979, 0.9978, 0.9973, 0.9975, 0.9975, 0.9975, 0.9976, 0.9973, 0.9971, 0.9970,
# 0.9963, 0.9969: `results/*-precision-shipped-*`).


def layers(model, sentences=SENTENCES):
    tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch, output_hidden_states=True).hidden_states
    mask = batch["attention_mask"].bool()
    return [layer[mask] for layer in hidden]  # each (real words, 2 * projection_dim)


@pytest.fixture(params=["as on this CPU", "7-bit inputs"])
def int8_product_kind(request, monkeypatch):
    """The int8 products as this CPU runs them, and with 7-bit inputs (a CPU without VNNI: AVX2, AVX-512 without
    VNNI). Forced 7 bits give the integers such a CPU computes; 8 bits cannot be faked on a CPU without VNNI."""
    if request.param == "7-bit inputs":
        monkeypatch.setattr(cpu_kernels, "_int8_reduce_range", lambda: True)
    return request.param


def test_int8_layers_stay_close_to_float32_and_switch_back_to_float32(int8_product_kind):
    model = ElmoModel.from_pretrained(FIXED_TRAINED_MODEL).eval()
    exact = layers(model)
    quantized = layers(model.quantize_weights("int8"))
    bound = int8_lowest_cosine("layers")
    for index, (expected, actual) in enumerate(zip(exact, quantized)):  # the token layer's highways run in int8 too
        assert not torch.equal(actual, expected), f"layer {index} did not run in int8"
        cosine = torch.nn.functional.cosine_similarity(expected, actual, dim=-1)
        assert cosine.min() > bound, f"layer {index}: cosine per word down to {cosine.min():.5f} ({int8_product_kind})"
        assert (expected - actual).abs().mean() < 0.005 * expected.abs().max()
    # Back to float32: parameters holding the dequantized weights, which quantize again to the same int8 tensors.
    state = {name: value.clone() for name, value in model.state_dict().items()}
    model.quantize_weights(None)
    assert model.encoder.weight_quantization is None and model.encoder.layers[0].input_weight.dtype == torch.float32
    assert not any(torch.equal(a, b) for a, b in zip(layers(model)[1:], exact[1:]))
    model.quantize_weights("int8")
    assert all(torch.equal(value, state[name]) for name, value in model.state_dict().items())
    assert all(torch.equal(a, b) for a, b in zip(layers(model), quantized))


def test_int8_weight_is_within_half_a_step_of_each_row():
    weight = torch.randn(48, 16) * torch.logspace(-3, 1, 48).unsqueeze(1)  # rows of very different scales
    values, scales = quantize_rows(weight)
    assert values.dtype == torch.int8 and values.abs().amax(dim=1).eq(127).all()
    assert torch.allclose(scales, weight.abs().amax(dim=1) / 127)
    assert ((values.float() * scales.unsqueeze(1) - weight).abs() <= scales.unsqueeze(1) / 2 + 1e-7).all()


def test_int8_is_the_models_state():
    """The float32 weights are gone: the LSTM and the highways hold int8 values and float32 scales."""
    model = tiny_model().quantize_weights("int8")
    names = {name for name, _ in model.named_parameters()}
    assert not any(name.endswith(("input_weight", "recurrent_weight", "projection_weight")) for name in names)
    assert not any("highways" in name and name.endswith("weight") for name in names)
    state = model.state_dict()
    assert state["encoder.layers.0.recurrent_weight_int8"].dtype == torch.int8
    assert state["character_encoder.highways.0.gate.weight_int8"].dtype == torch.int8
    assert model.config.weight_quantization == "int8"


def new_int8_model(model):
    """A new int8 model holding `model`'s state: no derived copy yet."""
    fresh = ElmoModel(model.config).eval()
    fresh.load_state_dict(model.state_dict())
    return fresh


def test_int8_follows_its_int8_weights_written_in_place_and_a_requantization():
    model = ElmoModel.from_pretrained(FIXED_TRAINED_MODEL).eval().quantize_weights("int8")
    before = layers(model)
    with torch.no_grad():
        model.encoder.layers[1].recurrent_weight_int8.neg_()  # a write to the int8 weights: the packed copy follows
    after = layers(model)
    assert torch.equal(after[1], before[1]) and not torch.equal(after[2], before[2])
    assert all(torch.equal(a, b) for a, b in zip(after, layers(new_int8_model(model))))
    model.quantize_weights(None)  # a re-quantization of changed float32 weights
    with torch.no_grad():
        model.encoder.layers[0].projection_weight.mul_(0.5)
    requantized = layers(model.quantize_weights("int8"))
    assert torch.equal(requantized[0], after[0]) and not torch.equal(requantized[1], after[1])
    assert all(torch.equal(a, b) for a, b in zip(requantized, layers(new_int8_model(model))))


def test_int8_refuses_what_it_cannot_run():
    model = tiny_model()
    with pytest.raises(ValueError, match=r"^quantize_weights mode must be 'int8' or None, got 'int4'$"):
        model.quantize_weights("int4")
    with pytest.raises(ValueError, match=r"need a float32 model on a CPU, got torch.bfloat16 on cpu$"):
        tiny_model().to(torch.bfloat16).quantize_weights("int8")
    model.quantize_weights("int8")
    tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    batch = tokenizer(SENTENCES[:2], is_split_into_words=True, padding=True, return_tensors="pt")
    model.train()  # a training forward: gradients on
    with pytest.raises(ValueError, match=r"^weights quantized to int8 run only .*they are for inference.*grad mode on"):
        model(**batch)
    model.eval().config.lstm_implementation = "reference"
    with pytest.raises(ValueError, match=r"run only on a CPU, without gradients.*lstm_implementation='reference'"):
        with torch.no_grad():
            model(**batch)


def test_a_quantization_config_is_refused_in_one_line(tmp_path):
    class TorchAoConfig:  # transformers' own needs torchao installed; from_pretrained refuses any such config
        pass

    tiny_model().save_pretrained(tmp_path)
    with pytest.raises(
        ValueError,
        match=r"^quantization_config=TorchAoConfig\(...\) cannot quantize ELMo's LSTM .*"
        r"quantize_weights\('int8'\)",
    ):
        ElmoModel.from_pretrained(tmp_path, quantization_config=TorchAoConfig())


def test_an_int8_folder_reloads_as_int8_in_a_new_process_with_and_without_the_package(tmp_path):
    """Saved, copied, reloaded offline in new processes (with elmo_hf, and with trust_remote_code alone): the same
    vectors to the bit, and a folder at most 35% of the float32 one's size (28% for this model)."""
    model = ElmoModel.from_pretrained(FIXED_TRAINED_MODEL).eval()
    model.save_pretrained(tmp_path / "float32")
    model.quantize_weights("int8").save_pretrained(tmp_path / "saved")
    shutil.copytree(tmp_path / "saved", tmp_path / "int8")
    sizes = {name: (tmp_path / name / "model.safetensors").stat().st_size for name in ("float32", "int8")}
    assert sizes["int8"] <= 0.35 * sizes["float32"], sizes
    tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        expected = model(**batch, output_hidden_states=True).hidden_states
    np.save(tmp_path / "expected.npy", torch.stack(expected).numpy())
    torch.save(dict(batch), tmp_path / "batch.pt")
    code = """
import sys
{setup}
import numpy as np, torch
torch.set_num_threads(1)
from transformers import AutoModel
model = AutoModel.from_pretrained("int8", trust_remote_code=True).eval()
assert model.config.weight_quantization == "int8" and all(
    parameter.dtype == torch.float32 for parameter in model.parameters())
assert model.encoder.layers[0].recurrent_weight_int8.dtype == torch.int8
with torch.inference_mode():
    output = torch.stack(model(**torch.load("batch.pt"), output_hidden_states=True).hidden_states).numpy()
assert np.array_equal(output, np.load("expected.npy")), np.abs(output - np.load("expected.npy")).max()
print("int8 reloaded", type(model).__module__)
"""
    without = run_offline_without_repository(code.format(setup='sys.modules["elmo_hf"] = None'), tmp_path)
    assert without.returncode == 0, without.stderr[-3000:]
    assert "int8 reloaded transformers_modules" in without.stdout
    with_package = f"sys.path.insert(0, {str(REPO_ROOT)!r}); import elmo_hf"
    package = run_offline_without_repository(code.format(setup=with_package), tmp_path)
    assert package.returncode == 0, package.stderr[-3000:]
    assert "int8 reloaded elmo_hf.model.modeling_elmo" in package.stdout


def test_embedder_and_command_take_int8(tmp_path):
    model_dir = tmp_path / "model"
    tiny_model(seed=3).save_pretrained(model_dir)
    write_lines(tmp_path / "input.txt", SENTENCES)
    output = tmp_path / "vectors.npz"
    cli.main(["embed", str(tmp_path / "input.txt"), str(output), "--model", str(model_dir), "--quantize", "int8"])
    arrays, _ = read_output(output)
    expected = ElmoEmbedder.from_pretrained(model_dir, quantize="int8").embed_sentences(SENTENCES, batch_size=64)
    exact = ElmoEmbedder.from_pretrained(model_dir).embed_sentences(SENTENCES)
    for index, vectors in enumerate(expected):
        np.testing.assert_array_equal(arrays[str(index)], vectors)
        assert not np.array_equal(vectors[1:], exact[index][1:])  # the LSTM layers ran in int8


def test_command_reports_int8_with_another_dtype_in_one_line(tmp_path, capsys):
    model_dir = tmp_path / "model"
    tiny_model().save_pretrained(model_dir)
    write_lines(tmp_path / "input.txt", SENTENCES)
    arguments = ["embed", str(tmp_path / "input.txt"), str(tmp_path / "out.npz"), "--model", str(model_dir)]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*arguments, "--quantize", "int8", "--dtype", "bfloat16"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err  # (after transformers' progress bar for loading the weights)
    assert "Traceback" not in error
    assert error.strip().splitlines()[-1] == (
        "error: --quantize int8: int8 weights need a float32 model on a CPU, got torch.bfloat16 on cpu"
    )


def test_bfloat16_layers_stay_close_to_float32(monkeypatch):
    """bfloat16 (`--dtype bfloat16`), with the products prepacked for oneDNN where it computes in bfloat16 and
    through `baddbmm` elsewhere: within its documented bound of float32 either way, and the two ways agree."""
    import elmo_hf.model.cpu_kernels

    model = ElmoModel.from_pretrained(DEFAULT_MODEL).eval()
    exact = layers(model)
    model.to(torch.bfloat16)
    runs = {"as on this CPU": layers(model)}
    monkeypatch.setattr(elmo_hf.model.cpu_kernels, "_onednn_bfloat16_available", lambda: False)
    monkeypatch.setattr(elmo_hf.model.cpu_kernels, "_BFLOAT16_WARNED", [True])  # (its warning has a test of its own)
    runs["plain products"] = layers(model)
    for name, run in runs.items():
        for index, (expected, actual) in enumerate(zip(exact, run)):
            cosine = torch.nn.functional.cosine_similarity(expected, actual.float(), dim=-1)
            assert cosine.min() > 0.9995, f"{name}, layer {index}: cosine per word down to {cosine.min():.6f}"
    for first, second in zip(*runs.values()):
        assert torch.nn.functional.cosine_similarity(first.float(), second.float(), dim=-1).min() > 0.9995


def test_int8_runs_the_character_cnn_in_bfloat16_where_onednn_has_it(monkeypatch):
    """Under int8 the character CNN's convolutions run in bfloat16 where oneDNN computes it (float32 elsewhere): the
    token layer stays within its bound either way."""
    import elmo_hf.model.cpu_kernels as kernels

    model = ElmoModel.from_pretrained(FIXED_TRAINED_MODEL).eval()
    exact = layers(model)[0]
    model.quantize_weights("int8")
    first_bank = model.character_encoder.convolutions[0]
    token_layers = {}
    for available in (True, False):
        monkeypatch.setattr(kernels, "_onednn_bfloat16_available", lambda available=available: available)
        weight_cache._COPIES.pop(first_bank, None)
        token_layers[available] = layers(model)[0]
        assert (("weight", "bfloat16") in weight_cache._COPIES.get(first_bank, {})) == available
        cosine = torch.nn.functional.cosine_similarity(exact, token_layers[available], dim=-1)
        assert cosine.min() > 0.99995, f"bfloat16 CNN {available}: cosine per word down to {cosine.min():.6f}"
    assert not torch.equal(token_layers[True], token_layers[False])


def test_int8_input_product_follows_its_bias_changed_in_place(int8_product_kind):
    """The input product's packed int8 weight carries the layer's bias: a new bias makes a new copy."""
    model = ElmoModel.from_pretrained(FIXED_TRAINED_MODEL).eval()
    with torch.no_grad():
        model.encoder.layers[0].bias.add_(0.5)
    expected = layers(model)[1]
    with torch.no_grad():
        model.encoder.layers[0].bias.sub_(0.5)
    model.quantize_weights("int8")
    before = layers(model)
    with torch.no_grad():
        model.encoder.layers[0].bias.add_(0.5)
    after = layers(model)
    assert torch.equal(after[0], before[0]) and not torch.equal(after[1], before[1])
    assert torch.equal(after[1], layers(new_int8_model(model))[1])
    cosine = torch.nn.functional.cosine_similarity(expected, after[1], dim=-1).min()
    assert cosine > int8_lowest_cosine("bias changed"), f"{int8_product_kind}: cosine per word down to {cosine:.5f}"


# Run in a process whose libraries are limited to AVX2 kernels (fbgemm's, oneDNN's and PyTorch's own), as on an AVX2
# CPU: prints whether int8 took 7-bit inputs, and the lowest cosine per word of the layers with 7 and with 8 bits.
_ON_AVX2_KERNELS = """
import sys, torch
from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.model import cpu_kernels
torch.set_num_threads(1)
model = ElmoModel.from_pretrained(sys.argv[1]).eval()
words = [sentence.split() for sentence in sys.argv[2:]]
batch = ElmoTokenizer()(words, is_split_into_words=True, padding=True, return_tensors="pt")
mask = batch["attention_mask"].bool()
def layers():
    with torch.inference_mode():
        return [layer[mask] for layer in model(**batch, output_hidden_states=True).hidden_states]
exact = layers()
model.quantize_weights("int8")
def lowest():
    return min(float(torch.nn.functional.cosine_similarity(e, a, dim=-1).min()) for e, a in zip(exact, layers()))
seven = cpu_kernels._int8_reduce_range()
with_seven = lowest()
cpu_kernels._int8_reduce_range = lambda: False
print(seven, with_seven, lowest())
"""


def test_int8_on_avx2_kernels_takes_7_bit_inputs_and_holds_their_bound():
    """fbgemm limited to its AVX2 kernels (`FBGEMM_ENABLE_INSTRUCTIONS=AVX2`, as on an AVX2 CPU, where its 16-bit
    intermediate sums saturate at 8 bits) makes int8 quantize its inputs to 7 bits, which hold the 7-bit bound; 8 bits
    there would fall below it."""
    environment = {
        **os.environ,
        "FBGEMM_ENABLE_INSTRUCTIONS": "avx2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }
    code = [sys.executable, "-c", _ON_AVX2_KERNELS, str(FIXED_TRAINED_MODEL), *(" ".join(s) for s in SENTENCES)]
    result = subprocess.run(code, env=environment, capture_output=True, text=True, check=True)
    seven, with_seven, with_eight = result.stdout.split()
    bound = INT8_LOWEST_COSINE["7-bit inputs"]["layers"]
    assert seven == "True", result.stdout
    assert float(with_seven) > bound, f"7-bit inputs on AVX2 kernels: cosine per word down to {with_seven}"
    assert float(with_eight) < bound, f"8-bit inputs on AVX2 kernels did not saturate: {with_eight}"


@pytest.mark.parametrize("native", [True, False], ids=["bfloat16 instructions", "AVX2 only"])
def test_bfloat16_warns_once_in_one_line_where_the_cpu_lacks_bfloat16_products(monkeypatch, tmp_path, capsys, native):
    """Where oneDNN has no bfloat16 products (an AVX2 CPU: the decision faked), a bfloat16 model warns once that it
    is slow and names the capability and the faster choices; `elmo-hf embed --dtype bfloat16` says so on stderr."""
    monkeypatch.setattr(cpu_kernels, "bfloat16_is_slow", lambda: not native)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512_BF16" if native else "AVX2")
    monkeypatch.setattr(cpu_kernels, "_BFLOAT16_WARNED", [])
    model = tiny_model().to(torch.bfloat16).eval()
    with pytest.warns(UserWarning) if not native else contextlib.nullcontext() as caught:
        layers(model)
        layers(model)
    if not native:
        assert [str(warning.message) for warning in caught] == [
            "bfloat16 on this CPU (capability AVX2, no bfloat16 instructions) runs many times slower than float32: "
            "use float32, or int8 (quantize_weights('int8'), --quantize int8)"
        ]
    monkeypatch.setattr(cpu_kernels, "_BFLOAT16_WARNED", [])
    model.float().save_pretrained(tmp_path / "model")
    write_lines(tmp_path / "input.txt", SENTENCES[:2])
    capsys.readouterr()
    arguments = [str(tmp_path / "input.txt"), str(tmp_path / "out.npz"), "--model", str(tmp_path / "model")]
    cli.main(["embed", *arguments, "--dtype", "bfloat16"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == ([] if native else ["warning: --dtype bfloat16: " + cpu_kernels.bfloat16_warning()])


def test_bfloat16_loads_saves_and_reloads_as_bfloat16(tmp_path):
    """`from_pretrained(dtype=torch.bfloat16)` gives the same model as `.to(torch.bfloat16)`, a bfloat16 folder keeps
    its dtype through `save_pretrained`, and `dtype="auto"` loads it as bfloat16, the same vectors to the bit."""
    tiny_model(seed=5).save_pretrained(tmp_path / "float32")
    converted = ElmoModel.from_pretrained(tmp_path / "float32").to(torch.bfloat16).eval()
    loaded = ElmoModel.from_pretrained(tmp_path / "float32", dtype=torch.bfloat16).eval()
    assert {parameter.dtype for parameter in loaded.parameters()} == {torch.bfloat16}
    expected = layers(converted)
    assert all(torch.equal(a, b) for a, b in zip(layers(loaded), expected))
    loaded.save_pretrained(tmp_path / "bfloat16")
    for dtype in ("auto", None):
        reloaded = ElmoModel.from_pretrained(tmp_path / "bfloat16", **({} if dtype is None else {"dtype": dtype}))
        if dtype == "auto":
            assert reloaded.dtype == torch.bfloat16
            assert all(torch.equal(a, b) for a, b in zip(layers(reloaded.eval()), expected))
    assert (tmp_path / "bfloat16" / "model.safetensors").stat().st_size < 0.6 * (
        tmp_path / "float32" / "model.safetensors"
    ).stat().st_size


def test_a_head_quantizes_its_bilm_and_reloads_as_int8(tmp_path):
    from helpers import tiny_config

    from elmo_hf import ElmoForTokenClassification

    head = ElmoForTokenClassification(tiny_config(num_labels=3)).eval().quantize_weights("int8")
    assert head.elmo.encoder.weight_quantization == "int8" and head.config.weight_quantization == "int8"
    assert not any(parameter.requires_grad for parameter in head.elmo.parameters())  # freeze_bilm holds
    head.save_pretrained(tmp_path)
    reloaded = ElmoForTokenClassification.from_pretrained(tmp_path).eval()
    tokenizer = ElmoTokenizer(max_characters_per_token=head.config.max_characters_per_token)
    batch = tokenizer(SENTENCES[:2], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        # (the same state to the bit; the task LSTM's product differs by 1e-10 after a reload in float32 too)
        assert all(torch.equal(value, reloaded.state_dict()[name]) for name, value in head.state_dict().items())
        torch.testing.assert_close(reloaded(**batch).logits, head(**batch).logits, rtol=0, atol=1e-8)
