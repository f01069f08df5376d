"""ElmoConfig: the published defaults and one validation pass that names the bad field."""

import pytest

from elmo_hf import ElmoConfig
from elmo_hf.model.configuration_elmo import ElmoConfigFieldError


def test_defaults_are_the_published_original_model():
    config = ElmoConfig()
    assert (config.lstm_dim, config.projection_dim, config.num_lstm_layers) == (4096, 512, 2)
    assert config.num_filters == 2048 and config.num_highway_layers == 2
    assert (config.char_embedding_dim, config.max_characters_per_token, config.num_characters) == (16, 50, 262)
    assert config.cell_clip == 3.0 and config.proj_clip == 3.0 and config.use_skip_connections
    assert config.hidden_size == 1024


@pytest.mark.parametrize(
    "fields, field, message",
    [
        ({"cell_clip": -1}, "cell_clip", "cell_clip must be a positive number or None, got -1"),
        ({"filters": [[1, 4], [2]]}, "filters", "filters[1] must be a [width, count] pair of positive ints, got [2]"),
        ({"projection_dim": 64}, "projection_dim", "projection_dim must be smaller than lstm_dim (64), got 64"),
        ({"use_crf": 1}, "use_crf", "use_crf must be a bool, got 1"),
    ],
)
def test_a_bad_value_is_a_value_error_that_names_its_field(fields, field, message):
    with pytest.raises(ElmoConfigFieldError) as raised:
        ElmoConfig(**{"lstm_dim": 64, "projection_dim": 16, **fields})
    assert isinstance(raised.value, ValueError) and raised.value.field == field
    assert str(raised.value).startswith(message)
