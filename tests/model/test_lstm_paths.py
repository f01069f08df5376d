"""The path resolver (`elmo_hf/model/lstm_paths.py`): its docstring's table, cell by cell, and its warnings."""

import warnings

import pytest
import torch
from helpers import tiny_model

from elmo_hf.model import lstm_paths
from elmo_hf.model.configuration_elmo import LSTM_IMPLEMENTATIONS
from elmo_hf.model.lstm_paths import LSTM_PATHS, lstm_path, resolve_lstm_path

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
