"""The path resolver (`elmo_hf/model/lstm_paths.py`): its docstring's table, cell by cell, and its warnings; the
registry of the paths; the request kept out of the saved config."""

import inspect
import json
import warnings

import pytest
import torch
from helpers import tiny_model

from elmo_hf import ElmoModel
from elmo_hf.model import lstm_paths
from elmo_hf.model.configuration_elmo import LSTM_IMPLEMENTATIONS
from elmo_hf.model.lstm_paths import (
    ALL_LSTM_FUNCTIONS,
    LSTM_PATHS,
    lstm_path,
    reference_lstm_forward,
    resolve_lstm_path,
)

# The four situations of the table.
SITUATIONS = {
    "A": dict(device_type="cpu"),  # CPU, nothing needs a gradient, no dropout
    "B": dict(device_type="cpu", grad_mode=True, needs_grad=True),  # grad mode on
    "C": dict(device_type="cuda"),  # CUDA, grad mode off, no state, no dropout
    "D": dict(device_type="cuda", stateful=True),  # grad mode off otherwise
}
# requested -> the path in situations A, B, C, D (None: as "auto", with a warning)
TABLE = {
    "auto": ("cpu_kernels", "packed", "fused", "reference"),
    "reference": ("reference", "reference", "reference", "reference"),
    "packed": ("cpu_kernels", "packed", "packed", "packed"),
    "cuda_graphs": (None, None, "cuda_graphs", None),
    "fused": (None, None, "fused", None),
}


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(lstm_paths, "_WARNED", set())


def resolve(implementation, situation, **overrides):
    facts = dict(SITUATIONS[situation], fused_step_available=lambda: True)
    facts.update(overrides)
    return resolve_lstm_path(implementation, **facts)


@pytest.mark.parametrize("implementation", LSTM_IMPLEMENTATIONS)
def test_the_table_cell_by_cell(implementation):
    assert set(TABLE) == set(LSTM_IMPLEMENTATIONS)
    for situation, expected in zip("ABCD", TABLE[implementation]):
        if expected is None:
            with pytest.warns(UserWarning, match=rf"lstm_implementation='{implementation}' cannot run here .*"):
                path = resolve(implementation, situation)
            assert path == resolve("auto", situation)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert resolve(implementation, situation) == expected
        assert resolve("auto", situation) in LSTM_PATHS


def test_more_situations():
    assert resolve("auto", "A", weight_quantization="int8") == "cpu_kernels_int8"
    assert resolve("packed", "A", weight_quantization="int8") == "cpu_kernels_int8"
    assert resolve("auto", "C", fused_step_available=lambda: False) == "cuda_graphs"
    assert resolve("auto", "A", dropout=0.1) == "reference"  # grad mode off: the readable loop, with dropout
    assert resolve("auto", "A", dropout=0.1, grad_mode=True) == "packed"
    assert resolve("auto", "A", grad_mode=True) == "cpu_kernels"  # a frozen biLM under a head
    assert resolve("auto", "C", grad_mode=True) == "packed"
    assert resolve("auto", "C", dropout=0.1) == "reference"
    assert resolve("auto", "D", device_type="mps") == "reference"


def test_a_request_that_cannot_run_warns_once_and_names_the_path_used():
    with pytest.warns(UserWarning) as caught:
        assert resolve("fused", "A") == "cpu_kernels"
        assert resolve("fused", "A") == "cpu_kernels"
    assert len(caught) == 1
    assert str(caught[0].message) == (
        "lstm_implementation='fused' cannot run here (cpu, grad mode off, no state, dropout 0.0); running the "
        "'cpu_kernels' path"
    )
    with pytest.warns(UserWarning, match=r"'fused' cannot run here \(no Triton.*running the 'cuda_graphs' path"):
        assert resolve("fused", "C", fused_step_available=lambda: False) == "cuda_graphs"


def test_int8_weights_outside_the_cpu_kernels_are_an_error():
    for implementation, situation in [("auto", "B"), ("auto", "C"), ("reference", "A")]:
        with pytest.raises(ValueError, match=r"weights quantized to int8 run only on a CPU"):
            resolve(implementation, situation, weight_quantization="int8")
    with pytest.raises(ValueError, match=r"lstm_implementation must be one of .*, got 'graphs'"):
        resolve("graphs", "A")


def test_the_model_reads_its_facts():
    model = tiny_model(seed=0)
    input_ids = torch.ones(2, 3, model.config.max_characters_per_token, dtype=torch.long)
    with torch.no_grad():
        assert lstm_path(model, input_ids) == "cpu_kernels"
        model.config.lstm_implementation = "cuda_graphs"
        with pytest.warns(UserWarning, match=r"running the 'cpu_kernels' path"):
            assert lstm_path(model, input_ids) == "cpu_kernels"
    model.config.lstm_implementation = "auto"
    assert lstm_path(model, input_ids) == "packed"


def test_every_path_is_one_registered_function_of_one_signature():
    assert sorted(ALL_LSTM_FUNCTIONS.keys()) == sorted(LSTM_PATHS)
    signature = inspect.signature(reference_lstm_forward)
    for path in LSTM_PATHS:
        assert inspect.signature(ALL_LSTM_FUNCTIONS[path]) == signature, path
    assert ALL_LSTM_FUNCTIONS.get_interface(None, reference_lstm_forward) is reference_lstm_forward
    with pytest.raises(KeyError, match=r"LSTM path 'graphs' is not registered .*'cpu_kernels'"):
        ALL_LSTM_FUNCTIONS.get_interface("graphs", reference_lstm_forward)


@pytest.mark.parametrize("grad_mode, path", [(False, "cpu_kernels"), (True, "packed")])
def test_forward_calls_the_resolved_path_once(monkeypatch, grad_mode, path):
    model = tiny_model(seed=0)
    input_ids = torch.randint(1, 262, (2, 3, model.config.max_characters_per_token))
    calls = []

    def recorded(*args):
        calls.append(args[0])
        return registered(*args)

    registered = ALL_LSTM_FUNCTIONS[path]
    monkeypatch.setitem(ALL_LSTM_FUNCTIONS, path, recorded)
    with torch.set_grad_enabled(grad_mode):
        output = model(input_ids)
    assert calls == [model]
    monkeypatch.undo()
    with torch.no_grad():
        torch.testing.assert_close(output.last_hidden_state, model(input_ids).last_hidden_state, rtol=0, atol=1e-6)


def test_save_pretrained_does_not_write_the_requested_path(tmp_path):
    model = tiny_model(seed=0)
    model.config.lstm_implementation = "reference"
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "lstm_implementation" not in saved
    assert ElmoModel.from_pretrained(tmp_path).config.lstm_implementation == "auto"
    assert ElmoModel.from_pretrained(tmp_path, lstm_implementation="packed").config.lstm_implementation == "packed"
    # A config.json written before the request stopped being saved keeps it.
    (tmp_path / "config.json").write_text(json.dumps({**saved, "lstm_implementation": "reference"}))
    assert ElmoModel.from_pretrained(tmp_path).config.lstm_implementation == "reference"
