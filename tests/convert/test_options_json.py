"""bilm-tf's options.json <-> ElmoConfig (elmo_hf.convert.convert_bilm_tf): every key read, bilm-tf's defaults and
quirks, and errors that name the options key."""

import json

import pytest

from elmo_hf import ElmoConfig
from elmo_hf.convert.convert_bilm_tf import config_from_options, options_from_config


def test_config_from_options_reads_every_field(fixtures_dir):
    config = config_from_options(fixtures_dir / "allennlp_elmo" / "options.json")
    assert config.filters == [[1, 4], [2, 8], [3, 16], [4, 32], [5, 64]]
    assert (config.char_embedding_dim, config.num_highway_layers, config.activation) == (4, 2, "relu")
    assert (config.lstm_dim, config.projection_dim, config.num_lstm_layers) == (64, 16, 2)
    assert config.use_skip_connections is True
    no_skip = config_from_options(fixtures_dir / "bilm_tf_model" / "options.json")
    assert no_skip.use_skip_connections is False


def test_training_dropout_option_becomes_pretraining_dropout(fixtures_dir):
    options = json.loads((fixtures_dir / "tiny_char_bilm_ckpt" / "options.json").read_text())
    assert config_from_options(options).pretraining_dropout == options.get("dropout", 0.0)
    options["dropout"] = 0.25
    assert config_from_options(options).pretraining_dropout == 0.25
    options["dropout"] = 1.0
    with pytest.raises(
        ValueError, match=r"options 'dropout': pretraining_dropout must be a number in \[0, 1\), got 1.0"
    ):
        config_from_options(options)


def test_training_options_with_261_characters_are_accepted(fixtures_dir):
    config = config_from_options(fixtures_dir / "tiny_char_bilm_ckpt" / "options.json")
    assert config.num_characters == 262 and config.lstm_dim == 32


def test_options_round_trip():
    config = ElmoConfig(lstm_dim=64, projection_dim=16, filters=[[1, 4]], cell_clip=None, pretraining_dropout=0.1)
    again = config_from_options(json.loads(json.dumps(options_from_config(config))))
    assert again.to_dict() == config.to_dict()


def test_missing_optional_keys_take_bilm_tf_defaults():
    options = options_from_config(ElmoConfig(lstm_dim=64, projection_dim=16))
    for key in ("n_layers", "cell_clip", "proj_clip", "use_skip_connections"):
        del options["lstm"][key]
    config = config_from_options(options)
    assert config.num_lstm_layers == 1 and config.cell_clip is None and config.proj_clip is None
    assert config.use_skip_connections is False


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("char_cnn", "activation", "gelu", "options 'char_cnn.activation': activation must be one of"),
        ("char_cnn", "n_characters", 300, "options 'char_cnn.n_characters' must be 261 or 262, got 300"),
        ("lstm", "dim", "4096", "options 'lstm.dim': lstm_dim must be a positive int, got '4096'"),
        ("lstm", "cell_clip", -1, "options 'lstm.cell_clip': cell_clip must be a positive number or None"),
        ("char_cnn", "filters", [[1, 4], [2]], "options 'char_cnn.filters': filters[1] must be a [width, count]"),
        ("lstm", "projection_dim", 128, "options 'lstm.projection_dim': projection_dim must be smaller than lstm_dim"),
    ],
)
def test_bad_option_values_name_the_key(section, key, value, message):
    options = options_from_config(ElmoConfig(lstm_dim=64, projection_dim=16))
    options[section][key] = value
    with pytest.raises(ValueError) as error:
        config_from_options(options)
    assert message in str(error.value)


def test_missing_required_key_is_named():
    options = options_from_config(ElmoConfig())
    del options["lstm"]["projection_dim"]
    with pytest.raises(ValueError, match=r"options is missing the key 'lstm.projection_dim'"):
        config_from_options(options)


def test_unidirectional_options_are_rejected():
    options = options_from_config(ElmoConfig()) | {"bidirectional": False}
    with pytest.raises(ValueError, match="'bidirectional' must be true"):
        config_from_options(options)


def test_a_null_highway_count_means_no_highway_layers():
    options = options_from_config(ElmoConfig(lstm_dim=64, projection_dim=16))
    options["char_cnn"]["n_highway"] = None
    assert config_from_options(options).num_highway_layers == 0
