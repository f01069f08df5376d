"""The differential harness: every LSTM path (`elmo_hf/model/lstm_paths.py`) against the reference path on the same
weights, after each change of state a model goes through, on batches drawn by hypothesis (shapes, lengths, empty rows).

Each path runs through `ElmoModel.forward` with the resolver's answer replaced by the path under test; the truth is a
new float32 model holding the same weights, on the reference path (it keeps no derived copy, so it cannot be stale).
Tolerances, per path, on every layer and the final state, relative to `max(1, largest absolute value)`:

| path | model | tolerance |
|---|---|---|
| `"cpu_kernels"` | float32 | 1e-5 (float32 rounding in another order) |
| `"packed"` | float32 | 1e-5 forward; gradients of every parameter 1e-4 |
| `"cuda_graphs"` | float32 | 1e-5 (on the CPU: the padded batches run eagerly) |
| `"fused"` | float32 | 1e-5 (Triton's interpreter on the CPU, where Triton is installed) |
| `"cpu_kernels"` | bfloat16 | 0.15 (bfloat16 activations; the truth: the same weights in float32); final states 0.25 |
| `"cpu_kernels_int8"` | int8 weights | 0.25 (int8 inputs; the truth: the dequantized weights); final states: below |

The final states of the low-precision modes are not averaged with anything: a memory cell adds up rounded gate
products over every step, unbounded by a tanh. bfloat16's get a bound of their own, relative to the clips (the
states' range by construction) or their largest value where larger: one moved by 0.26 (clip 3) on a sentence of one
word repeated six times. int8's have none against float32: its inputs share one scale per batch, so a row whose
values are small beside its batch-mates' loses them, and its state follows another course. Drawn examples after the
harness's AdamW step (lr 0.05) moved a final value by 0.40 to 1.38 (clips 3); float32 arithmetic on the same
int8-rounded weights moved one such cell by 0.38 only, and a new int8 model with the same weights gave the same values
to the bit. int8's states are held to that new model, as every path's are, and its layers to float32's. That bound is
staleness's own, not a mode's: every path's output must equal (1e-6) that of a new model of the same mode holding the
same weights, which has no copy yet to be stale.

The changes of state, in order: none; a fused AdamW step; a copy into `weight.data`; an average through
`weight.data.mul_().add_()`; `load_state_dict(assign=True)`; train -> eval -> train -> eval; a dtype round trip; a
carried state from a batch of another size; the token cache on, then off. A planted stale copy (the fingerprint
check skipped) makes the harness fail.
"""

import contextlib
import copy
import importlib
import os
import warnings

import pytest
import torch
from helpers import tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elmo_hf import ElmoModel, ElmoTokenCache
from elmo_hf.model import cpu_kernels, modeling_elmo, weight_cache

pytestmark = pytest.mark.usefixtures("one_thread")

TOLERANCE = {
    ("float32", "cpu_kernels"): 1e-5,
    ("float32", "packed"): 1e-5,
    ("float32", "cuda_graphs"): 1e-5,
    ("float32", "fused"): 1e-5,
    ("bfloat16", "cpu_kernels"): 0.15,
    ("int8", "cpu_kernels_int8"): 0.25,
}
# Final LSTM states of the low-precision modes, relative to the clips (see the module's docstring); None: held to a
# new model of the same mode only.
STATE_TOLERANCE = {("bfloat16", "cpu_kernels"): 0.25, ("int8", "cpu_kernels_int8"): None}
# Final LSTM states of the float32 paths on the CPU, relative to the clips. No tanh bounds a cell state, so word vectors
# rounded differently by 1e-7 (the token cache computes its table in another batch) drift further there than in the
# layers: at most 5.7e-6 over 400 random batches, and once 1.06e-5 in the harness's draws. Stale copies are off by
# tenths.
FLOAT32_STATE_TOLERANCE = 1e-4
# A path's output against a new model of the same mode with the same weights: rounding order only.
SAME_MODE_TOLERANCE = 1e-6
# On a CUDA device (the truth stays on the CPU): the graphs capture and replay for real, the fused step is compiled.
CUDA_TOLERANCE = {
    ("float32", "reference"): 1e-5,
    ("float32", "packed"): 1e-5,
    ("float32", "cuda_graphs"): 1e-5,
    ("float32", "fused"): 1e-5,
    ("bfloat16", "cuda_graphs"): 0.15,
    ("bfloat16", "fused"): 0.15,
}
GRADIENT_TOLERANCE = 1e-4
CHARS = 20  # tiny_model's max_characters_per_token


def triton_interpreter_available():
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def triton_interpreted():
    """The fused step's kernels redefined under Triton's interpreter for the CPU, and restored."""
    from elmo_hf.model import triton_lstm_kernels

    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    importlib.reload(triton_lstm_kernels)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "overflow encountered in exp")
            yield
    finally:
        if previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous
        importlib.reload(triton_lstm_kernels)


def forced(monkeypatch, path):
    """`ElmoModel.forward` runs `path` whatever the resolver would say."""
    monkeypatch.setattr(modeling_elmo, "lstm_path", lambda *args, **kwargs: path)


def run(model, input_ids, states=None, token_cache=None):
    """Every layer `(layers + 1, batch, words, 2 * proj)` and the final `(cell, hidden)`, in float32."""
    output = model(input_ids, output_hidden_states=True, lstm_states=states, token_cache=token_cache)
    return torch.stack(output.hidden_states).float(), tuple(state.float() for state in output.lstm_states)


def assert_near(actual, expected, tolerance, what, scale=1.0):
    """Within `tolerance` times the larger of `scale` and the largest expected value."""
    bound = tolerance * max(scale, float(expected.abs().max()))
    torch.testing.assert_close(actual, expected, rtol=0, atol=bound, msg=lambda message: f"{what}: {message}")


def float_state(model):
    """`model`'s state with its floating-point tensors in float32 (int8 tensors as they are)."""
    return {name: value.float() if value.is_floating_point() else value for name, value in model.state_dict().items()}


def same_mode_model(model):
    """A new model in `model`'s mode (dtype, device, int8 or not, train or eval) with its weights: no copies yet."""
    fresh = ElmoModel(copy.deepcopy(model.config))  # int8 tensors in place of float32 weights where the model has them
    fresh.load_state_dict(float_state(model))
    return fresh.to(model.device, model.dtype).train(model.training)


def truth_model(model):
    """A new float32 model with `model`'s weights (an int8 model's dequantized), on the reference path."""
    config = copy.deepcopy(model.config)
    truth = ElmoModel(config)
    truth.load_state_dict(float_state(model))
    truth.quantize_weights(None)
    truth.config.lstm_implementation = "reference"
    return truth.eval()


def paths_of(mode, stateful, fused, tolerances=TOLERANCE):
    paths = [path for (tolerance_mode, path) in tolerances if tolerance_mode == mode]
    if stateful:  # the graphs carry no state (the resolver never picks them with one)
        paths = [path for path in paths if path not in ("cuda_graphs", "fused")]
    return [path for path in paths if path != "fused" or fused]


def check_paths(monkeypatch, model, mode, input_ids, states=None, token_cache=None, what="", fused=False):
    """Every path of `mode` on `model` against the truth (on the CPU) on the same weights (the fused step when
    `fused`, under `triton_interpreted` on the CPU); raises AssertionError."""
    truth = truth_model(model)
    cpu_states = None if states is None else tuple(state.cpu() for state in states)
    with torch.no_grad():
        expected_layers, expected_state = run(truth, input_ids.cpu(), cpu_states)
    tolerances = CUDA_TOLERANCE if model.device.type == "cuda" else TOLERANCE
    for path in paths_of(mode, states is not None, fused or model.device.type == "cuda", tolerances):
        forced(monkeypatch, path)
        tolerance = tolerances[mode, path]
        where = f"{what}, {mode} {path}"
        with torch.no_grad():
            layers, state = run(model, input_ids, states, token_cache)
            if token_cache is None:  # (a new model would need a new cache: the cache's checks have tests of their own)
                new_layers, new_state = run(same_mode_model(model), input_ids, states)
                assert_near(layers, new_layers, SAME_MODE_TOLERANCE, f"{where}, against a new {mode} model")
                for got, want in zip(state, new_state):
                    assert_near(got, want, SAME_MODE_TOLERANCE, f"{where}, final state against a new {mode} model")
        assert_near(layers.cpu(), expected_layers, tolerance, where)
        clips = max(1.0, model.config.cell_clip or 0.0, model.config.proj_clip or 0.0)
        state_tolerance, scale = tolerance, 1.0
        if (mode, path) in STATE_TOLERANCE:  # the low-precision modes: against the clips
            state_tolerance, scale = STATE_TOLERANCE[mode, path], clips
        elif mode == "float32" and model.device.type == "cpu":
            state_tolerance, scale = FLOAT32_STATE_TOLERANCE, clips
        for got, want in zip(state, expected_state):
            if state_tolerance is not None:
                assert_near(got.cpu(), want, state_tolerance, f"{where}, final state", scale=scale)
        if path == "packed":
            check_gradients(model, truth, input_ids, states, where)
    monkeypatch.undo()


def check_gradients(model, truth, input_ids, states, where):
    """The training kernel's gradients against autograd through the reference loop."""
    cpu_states = None if states is None else tuple(state.cpu() for state in states)
    weights = torch.randn(run(truth, input_ids.cpu(), cpu_states)[0].shape, generator=torch.Generator().manual_seed(0))
    gradients = []
    for candidate, ids, given_states in ((model, input_ids, states), (truth, input_ids.cpu(), cpu_states)):
        candidate.zero_grad(set_to_none=True)
        layers, _ = run(candidate, ids, given_states)
        (layers * weights.to(layers.device)).sum().backward()
        gradients.append({name: parameter.grad.cpu() for name, parameter in candidate.named_parameters()})
        candidate.zero_grad(set_to_none=True)
    for name, expected in gradients[1].items():
        assert_near(gradients[0][name].float(), expected, GRADIENT_TOLERANCE, f"{where}, gradient of {name}")


# The changes of state, applied to each mode's model.


def other_state(model, seed):
    other = tiny_model(seed=seed).quantize_weights(model.encoder.weight_quantization).state_dict()
    return {
        name: value.to(model.device, model.dtype if value.is_floating_point() else value.dtype)
        for name, value in other.items()
    }


def blend(tensor, value):
    """`tensor` halfway to `value` in place, through `.data` (int8 tensors rounded)."""
    if tensor.is_floating_point():
        tensor.data.mul_(0.5).add_(value, alpha=0.5)
    else:
        tensor.data.copy_(((tensor.float() + value.float()) / 2).round())


def fused_adamw_step(model, input_ids):
    quantization = model.encoder.weight_quantization
    model.quantize_weights(None).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    modeling_elmo_forward = model(input_ids).last_hidden_state
    modeling_elmo_forward.float().square().sum().backward()
    optimizer.step()
    model.zero_grad(set_to_none=True)
    model.quantize_weights(quantization).eval()


def data_copy(model, input_ids):
    """Every tensor of the state (an int8 model's int8 weights and scales too) written through `.data`."""
    with torch.no_grad():
        for name, value in other_state(model, 21).items():
            model.state_dict(keep_vars=True)[name].data.copy_(value)


def moving_average(model, input_ids):
    with torch.no_grad():
        for name, value in other_state(model, 22).items():
            blend(model.state_dict(keep_vars=True)[name], value)


def assign_state(model, input_ids):
    model.load_state_dict({name: value.clone() for name, value in other_state(model, 23).items()}, assign=True)


def train_eval_train(model, input_ids):
    model.train()
    model.eval()
    model.train()
    model.eval()


def dtype_round_trip(model, input_ids):
    dtype = model.dtype
    model.to(torch.float64).to(dtype)


STATE_CHANGES = [
    ("fused AdamW step", fused_adamw_step),
    (".data copy_", data_copy),
    ("EMA through .data", moving_average),
    ("load_state_dict(assign=True)", assign_state),
    ("train -> eval -> train -> eval", train_eval_train),
    ("dtype round trip", dtype_round_trip),
]


def mode_models(device="cpu"):
    models = {"float32": tiny_model(seed=1), "bfloat16": tiny_model(seed=1).to(torch.bfloat16)}
    if device == "cpu" and cpu_kernels.int8_products_available():
        models["int8"] = tiny_model(seed=1).quantize_weights("int8")
    return {mode: model.to(device) for mode, model in models.items()}


def run_harness(monkeypatch, input_ids, other_ids, fused=False, modes=None, device="cpu"):
    """Every mode (or those of `modes`) and path after every change of state (the fused step too when `fused` or on
    a CUDA device: Triton's interpreter is slow); raises AssertionError at the first disagreement."""
    input_ids, other_ids = input_ids.to(device), other_ids.to(device)
    for mode, model in mode_models(device).items():
        if modes is not None and mode not in modes:
            continue
        check_paths(monkeypatch, model, mode, input_ids, what="fresh model", fused=fused)
        for name, change in STATE_CHANGES:
            change(model, input_ids)
            check_paths(monkeypatch, model, mode, input_ids, what=f"after {name}", fused=fused)
        # A state carried from a batch of another size (rows past this batch are carried through, new rows start
        # from zeros).
        with torch.no_grad():
            states = tuple(state.to(device) for state in truth_model(model)(other_ids.cpu()).lstm_states)
        check_paths(monkeypatch, model, mode, input_ids, states=states, what="with a carried state")
        cache = ElmoTokenCache(model.character_encoder, input_ids.flatten(0, 1)[:5])
        check_paths(monkeypatch, model, mode, input_ids, token_cache=cache, what="token cache on")
        moving_average(model, input_ids)  # the cache's table must follow the weights
        check_paths(monkeypatch, model, mode, input_ids, token_cache=cache, what="token cache on, weights changed")
        check_paths(monkeypatch, model, mode, input_ids, what="token cache off")


@st.composite
def batches(draw, max_rows=4, max_words=6):
    """Right-padded character ids: 1-4 rows of 0-6 words (at least one word in the batch), words from a small
    vocabulary so that they repeat."""
    rows = draw(st.integers(1, max_rows))
    lengths = draw(st.lists(st.integers(0, max_words), min_size=rows, max_size=rows).filter(any))
    vocabulary = torch.randint(1, 262, (5, CHARS), generator=torch.Generator().manual_seed(draw(st.integers(0, 99))))
    vocabulary[:, CHARS // 2 :] = 0
    input_ids = torch.zeros(rows, max(lengths), CHARS, dtype=torch.long)
    for row, length in enumerate(lengths):
        words = draw(st.lists(st.integers(0, 4), min_size=length, max_size=length))
        input_ids[row, :length] = vocabulary[words]
    return input_ids


@settings(max_examples=8, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(input_ids=batches(), other_ids=batches(max_rows=5))
def test_every_path_agrees_with_the_reference_after_every_change(monkeypatch, input_ids, other_ids):
    run_harness(monkeypatch, input_ids, other_ids)


@pytest.mark.skipif(not triton_interpreter_available(), reason="Triton (the test extras) interprets the fused step")
@settings(max_examples=2, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(input_ids=batches(max_rows=3, max_words=4), other_ids=batches(max_rows=4, max_words=4))
def test_the_fused_step_agrees_too_under_tritons_interpreter(monkeypatch, input_ids, other_ids):
    with triton_interpreted():
        run_harness(monkeypatch, input_ids, other_ids, fused=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@settings(max_examples=3, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(input_ids=batches(), other_ids=batches(max_rows=5))
def test_every_cuda_path_agrees_with_the_reference_after_every_change(monkeypatch, input_ids, other_ids):
    """The graphs captured and replayed, the fused step compiled, the training kernel's gradients, on a GPU."""
    run_harness(monkeypatch, input_ids, other_ids, device="cuda")


@pytest.mark.parametrize(
    "mode, path", [("float32", "cpu_kernels"), ("bfloat16", "cpu_kernels"), ("int8", "cpu_kernels_int8")]
)
def test_a_planted_stale_copy_makes_the_harness_fail(monkeypatch, mode, path):
    """The fingerprint check skipped (copies kept whatever the weights): the harness must see it, in every mode, on
    every CPU. One sentence, because a single row uses a derived copy in every mode on every CPU (the projection's
    `(out, in)` copy where batches use plain products: bfloat16 without oneDNN's bfloat16, on AVX2 CPUs); the
    oneDNN-prepacked copies of batches are faked away too, as on such a CPU."""
    if mode == "int8" and not cpu_kernels.int8_products_available():
        pytest.skip("no int8 engine in this PyTorch")
    input_ids = torch.zeros(1, 4, CHARS, dtype=torch.long)
    input_ids[:, :, :3] = torch.arange(1, 13).view(1, 4, 3)
    with monkeypatch.context() as planted:
        planted.setattr(weight_cache, "_same", lambda *fingerprints: True)
        planted.setattr(cpu_kernels, "_onednn_bfloat16_available", lambda: False)
        planted.setattr(cpu_kernels, "_BFLOAT16_WARNED", [True])
        with pytest.raises(AssertionError, match=rf"after fused AdamW step, {mode} {path}"):
            run_harness(monkeypatch, input_ids, input_ids, modes=[mode])


def test_a_planted_stale_token_cache_makes_the_harness_fail(monkeypatch):
    """Only the token cache's table kept whatever the weights."""
    input_ids = torch.zeros(2, 3, CHARS, dtype=torch.long)
    input_ids[:, :, :2] = torch.arange(1, 13).view(2, 3, 2)
    original = weight_cache.derived_copy

    def stale_table(owner, key, sources, build):
        entry = weight_cache._COPIES.get(owner, {}).get(key)
        return entry.copy if key == "table" and entry is not None else original(owner, key, sources, build)

    with monkeypatch.context() as planted:
        planted.setattr(weight_cache, "derived_copy", stale_table)
        planted.setattr(importlib.import_module("elmo_hf.inference.embedder"), "derived_copy", stale_table)
        with pytest.raises(AssertionError, match=r"token cache on, weights changed"):
            run_harness(monkeypatch, input_ids, input_ids[:1])
