"""What elmo_hf relies on in transformers, pinned: the private format of from_pretrained's loading_info, and the
forward-argument conventions (can_return_tuple, unknown arguments refused, no loss kwargs from the Trainer), and
loading with device_map="auto"."""

import pytest
import torch
from helpers import tiny_config, tiny_model
from transformers import PreTrainedModel, Trainer, TrainingArguments

from elmo_hf import ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel
from elmo_hf.model.modeling_elmo import _mismatched_keys


def test_loading_info_mismatched_keys_are_name_file_shape_expected_shape_triples(tmp_path):
    """ElmoPreTrainedModel.from_pretrained reads loading_info["mismatched_keys"], which transformers does not
    document: if this fails, transformers changed it and `_check_weights_match_config` must follow."""
    saved = tiny_model(seed=1)
    saved.save_pretrained(tmp_path)
    config = tiny_config(filters=[[1, 4], [2, 8], [3, 6]])  # the last bank has 6 filters instead of 8
    base_from_pretrained = PreTrainedModel.from_pretrained.__func__  # transformers' own, not ElmoModel's override
    model, loading_info = base_from_pretrained(
        ElmoModel, tmp_path, config=config, ignore_mismatched_sizes=True, output_loading_info=True
    )
    entries = sorted(loading_info["mismatched_keys"])
    assert [name for name, _, _ in entries] == [
        "character_encoder.convolutions.2.bias",
        "character_encoder.convolutions.2.weight",
        "character_encoder.highways.0.gate.bias",
        "character_encoder.highways.0.gate.weight",
        "character_encoder.highways.0.transform.bias",
        "character_encoder.highways.0.transform.weight",
        "character_encoder.projection.weight",
    ]
    for name, file_shape, expected_shape in entries:
        assert tuple(file_shape) == tuple(saved.state_dict()[name].shape), name
        assert tuple(expected_shape) == tuple(model.state_dict()[name].shape), name
    assert _mismatched_keys(loading_info) == loading_info["mismatched_keys"]


@pytest.mark.parametrize("changed", [None, {("a", (1,)), ("b", (2,))}, [("a", (1,), (2,), "extra")]])
def test_a_changed_loading_info_format_is_named(changed):
    with pytest.raises(RuntimeError, match=r"transformers changed the format of from_pretrained's loading_info"):
        _mismatched_keys({} if changed is None else {"mismatched_keys": changed})


HEADS = {
    ElmoModel: {},
    ElmoForPreTraining: dict(vocab_size=11, num_sampled_negatives=0),
    ElmoForTokenClassification: dict(num_labels=3),
    ElmoForSequenceClassification: dict(num_labels=2),
}


@pytest.mark.parametrize("model_class", HEADS, ids=lambda model_class: model_class.__name__)
def test_unknown_arguments_are_refused_and_return_dict_gives_a_tuple(model_class, tokenizer):
    model = model_class(tiny_config(**HEADS[model_class]))
    batch = tokenizer([["a", "b"], ["c"]], is_split_into_words=True, padding=True, return_tensors="pt")
    with pytest.raises(TypeError, match="unexpected keyword argument 'token_type_ids'"):
        model(**batch, token_type_ids=torch.zeros_like(batch["attention_mask"]))
    with torch.no_grad():
        as_dict = model.eval()(**batch)
        as_tuple = model(**batch, return_dict=False)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == len(as_dict.to_tuple())
    torch.testing.assert_close(as_tuple[0], as_dict.to_tuple()[0], rtol=0, atol=0)


@pytest.mark.parametrize("model_class", list(HEADS)[1:], ids=lambda model_class: model_class.__name__)
def test_the_trainer_passes_no_loss_kwargs(model_class, tmp_path):
    """The heads' losses are means over the batch: the Trainer must scale them for gradient accumulation itself
    rather than pass num_items_in_batch, which it does only to a forward with **kwargs."""
    model = model_class(tiny_config(**HEADS[model_class]))
    arguments = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    assert Trainer(model=model, args=arguments).model_accepts_loss_kwargs is False


@pytest.mark.parametrize("model_class", [ElmoModel, ElmoForTokenClassification], ids=lambda cls: cls.__name__)
def test_device_map_auto_loads_and_runs(model_class, tmp_path, tokenizer):
    """from_pretrained(device_map="auto") places the model through accelerate (without a GPU: on the CPU), and it
    computes what the model loaded without it computes. `_no_split_modules` names classes the model has."""
    model = model_class(tiny_config(**HEADS[model_class])).eval()
    model.save_pretrained(tmp_path)
    loaded = model_class.from_pretrained(tmp_path, device_map="auto").eval()
    assert {parameter.device.type for parameter in loaded.parameters()} == {"cpu"}
    assert set(loaded._no_split_modules) == {"ElmoModel", "ElmoCharacterEncoder", "ElmoBiLstm"}
    assert set(loaded._no_split_modules) <= {type(module).__name__ for module in loaded.modules()}
    batch = tokenizer([["a", "b", "c"], ["d"]], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected, output = model(**batch).to_tuple()[0], loaded(**batch).to_tuple()[0]
    torch.testing.assert_close(output, expected)  # (the head's products may round in another order)
