"""The model: its configuration, tokenizer, character ids, the biLM and its heads (`modeling_elmo.py`), and every
module the model file imports (the LSTM cell, the LSTM paths, the derived weight copies). These modules import only
each other, relatively, so that `save_pretrained` copies them all beside the weights and `trust_remote_code=True`
loads them without this package. This file imports nothing."""
