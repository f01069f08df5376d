"""Write tests/data/allennlp/allennlp_elmo_reference.npz: real allennlp 2.10.1 outputs on the allennlp test weights.

Run with the peer venv (../shared/peer/setup_peervenv.sh), not the project's:

    /tmp/elmo-peer-venv/bin/python tools/make_allennlp_reference.py

It imports allennlp's unmodified ELMo code through ../shared/peer/allennlp_elmo_shim.py and runs it on
../shared/fixtures/allennlp_elmo (options.json + lm_weights.hdf5, not copied) for every `Elmo` argument that
`elmo_hf.compat.allennlp.Elmo` takes, and stores the outputs (float32, a few hundred KB at most). Every `Elmo` is
built afresh and put in eval mode (dropout off); allennlp's biLM is always stateful, so a case of one call is the
stateless result, and the `stateful` case runs a stream of batches of 4, 2 and 3 rows through one `Elmo`.

allennlp 2.10.1 no longer ships `ElmoEmbedder` (removed in 1.0). Its 0.9 semantics are computed here from
`_ElmoBiLm`, as 0.9's `ElmoEmbedder.batch_to_embeddings` did: `batch_to_ids`, the biLM's activations, each layer's
`remove_sentence_boundaries`, the layers stacked on axis 1, each sentence cut to its length. 0.9's `_ElmoBiLm` was
stateful too: `embedder_stateful` keeps one biLM over consecutive batches (what 0.9's `embed_sentences` and
`embed_file` did), `embedder_stateless` resets it before each batch.

The lower-level modules are stored too: `_ElmoBiLm`'s layers over the same stream and on empty and blank words,
`_ElmoCharacterEncoder`'s token vectors, `Elmo(None, None, 2, module=_ElmoBiLm(...))` and `ElmoTokenEmbedder`.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT = REPO_ROOT / "tests" / "data" / "allennlp" / "allennlp_elmo_reference.npz"

# Sentences of several lengths, a word longer than 50 characters, non-ASCII words and punctuation.
SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    ["ELMo", "reads", "characters", ",", "not", "word", "pieces"],
    ["Short", "."],
    ["Ünïcödé", "wörds", "and", "a", "really" * 10, "long", "one", "too", "!"],
    ["Stateful", "rows", "continue", "where", "they", "stopped"],
    ["Yes"],
    ["A", "third", "batch", "has", "three", "rows", "of", "different", "lengths", "here", "."],
    ["Padding", "is", "zero"],
    ["Rates", "rose", "again", "in", "May", "."],
]
BATCH = SENTENCES[:4]
BLANK_WORDS = [["The", "", "cat"], [" ", "sat"], ["no", "blanks", "here"]]  # any string is a word in allennlp
STREAM_ROWS = [4, 2, 3]  # the stateful stream: rows of consecutive batches
MIX_PARAMETERS = [0.3, -0.5, 1.2]
# Index 0 is padding, as in an allennlp vocabulary.
VOCABULARY = ["@@PADDING@@", "@@UNKNOWN@@", *sorted({word for sentence in BATCH for word in sentence})]
# Every Elmo argument, one case each: (name, keyword arguments beyond options_file and weight_file).
ELMO_CASES = [
    ("one", {"num_output_representations": 1}),
    ("two", {"num_output_representations": 2}),
    ("requires_grad", {"num_output_representations": 1, "requires_grad": True}),
    ("layer_norm", {"num_output_representations": 1, "do_layer_norm": True}),
    ("dropout", {"num_output_representations": 1, "dropout": 0.3}),
    ("mix", {"num_output_representations": 2, "scalar_mix_parameters": MIX_PARAMETERS}),
    ("boundaries", {"num_output_representations": 1, "keep_sentence_boundaries": True}),
    (
        "boundaries_layer_norm",
        {"num_output_representations": 1, "keep_sentence_boundaries": True, "do_layer_norm": True},
    ),
    ("no_boundaries", {"num_output_representations": 1, "keep_sentence_boundaries": False}),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", default=os.environ.get("ELMO_FIXTURES", REPO_ROOT.parent / "shared" / "fixtures"))
    parser.add_argument("--peer", default=REPO_ROOT.parent / "shared" / "peer", help="folder of allennlp_elmo_shim.py")
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args()
    sys.path.insert(0, str(args.peer))
    import allennlp_elmo_shim  # noqa: F401  (before allennlp)
    import torch
    from allennlp.modules.elmo import Elmo, _ElmoBiLm, _ElmoCharacterEncoder, batch_to_ids
    from allennlp.modules.token_embedders.elmo_token_embedder import ElmoTokenEmbedder
    from allennlp.nn.util import remove_sentence_boundaries

    torch.manual_seed(0)
    options = str(Path(args.fixtures) / "allennlp_elmo" / "options.json")
    weights = str(Path(args.fixtures) / "allennlp_elmo" / "lm_weights.hdf5")
    out = {"sentences": np.array(json.dumps(SENTENCES)), "vocabulary": np.array(json.dumps(VOCABULARY))}
    char_ids = batch_to_ids(BATCH)
    out["batch_to_ids"] = char_ids.numpy()

    def elmo(**kwargs):
        return Elmo(options, weights, **kwargs).eval()

    def store(prefix, output):
        for index, representation in enumerate(output["elmo_representations"]):
            out[f"{prefix}/representation_{index}"] = representation.detach().numpy()
        out[f"{prefix}/mask"] = output["mask"].numpy()

    def store_layers(prefix, output):
        for index, activation in enumerate(output["activations"]):
            out[f"{prefix}/activation_{index}"] = activation.numpy()
        out[f"{prefix}/mask"] = output["mask"].numpy()

    for name, kwargs in ELMO_CASES:
        model = elmo(**kwargs)
        output = model(char_ids)
        store(f"elmo/{name}", output)
        out[f"elmo/{name}/output_dim"] = np.array(model.get_output_dim())
        if name == "requires_grad":  # gradients of the mix and of the character embedding reach the biLM
            (output["elmo_representations"][0] ** 2).sum().backward()
            out[f"elmo/{name}/grad_scalar_parameters"] = np.array(
                [parameter.grad.item() for parameter in model.scalar_mix_0.scalar_parameters]
            )
            out[f"elmo/{name}/grad_gamma"] = model.scalar_mix_0.gamma.grad.numpy()
            out[f"elmo/{name}/grad_char_embedding"] = (
                model._elmo_lstm._token_embedder._char_embedding_weights.grad.numpy()
            )

    # A 4-dimensional input (batch of groups of sentences) comes back in the same shape.
    model = elmo(num_output_representations=1)
    store("elmo/four_dims", model(char_ids.view(2, 2, *char_ids.shape[1:])))

    # vocab_to_cache: word ids instead of characters (the characters are ignored when word ids are given).
    word_ids = torch.tensor(
        [
            [VOCABULARY.index(word) for word in sentence] + [0] * (char_ids.shape[1] - len(sentence))
            for sentence in BATCH
        ]
    )
    out["word_ids"] = word_ids.numpy()
    model = elmo(num_output_representations=1, vocab_to_cache=VOCABULARY)
    store("elmo/vocab_word_inputs", model(char_ids, word_ids))
    model = elmo(num_output_representations=1, vocab_to_cache=VOCABULARY)
    store("elmo/vocab_characters", model(char_ids))

    # Stateful: one Elmo over consecutive batches of 4, 2 and 3 rows; row i continues row i. Then the state is
    # reset (allennlp's Elmo has no reset_states(): users reset its biLM's LSTM, as here).
    model = elmo(num_output_representations=1)
    used = 0
    for step, rows in enumerate(STREAM_ROWS):
        store(f"elmo/stateful_{step}", model(batch_to_ids(SENTENCES[used : used + rows])))
        used += rows
    model._elmo_lstm._elmo_lstm.reset_states()
    store("elmo/after_reset", model(char_ids))

    # The lower-level modules: _ElmoBiLm's every layer with the boundaries (a stream, as above), on words that are
    # empty or blank too; _ElmoCharacterEncoder (padding positions included); Elmo over a given module;
    # ElmoTokenEmbedder.
    bilm = _ElmoBiLm(options, weights).eval()
    used = 0
    for step, rows in enumerate(STREAM_ROWS):
        with torch.no_grad():
            store_layers(f"bilm/stateful_{step}", bilm(batch_to_ids(SENTENCES[used : used + rows])))
        used += rows
    with torch.no_grad():
        store_layers("bilm/blank_words", _ElmoBiLm(options, weights).eval()(batch_to_ids(BLANK_WORDS)))
        output = _ElmoCharacterEncoder(options, weights).eval()(char_ids)
    out["char_encoder/token_embedding"] = output["token_embedding"].numpy()
    out["char_encoder/mask"] = output["mask"].numpy()
    model = Elmo(None, None, 2, dropout=0.0, module=_ElmoBiLm(options, weights)).eval()
    store("elmo/module", model(char_ids))
    out["token_embedder"] = ElmoTokenEmbedder(options, weights, dropout=0.0).eval()(char_ids).detach().numpy()

    # allennlp 0.9's ElmoEmbedder, from _ElmoBiLm: batches of 3 sentences in input order.
    def batch_to_embeddings(bilm, batch):
        output = bilm(batch_to_ids(batch))
        without = [remove_sentence_boundaries(layer, output["mask"]) for layer in output["activations"]]
        activations = torch.cat([layer.unsqueeze(1) for layer, _ in without], dim=1)  # (batch, 3, words, dim)
        return activations, without[0][1]

    for name, reset in (("embedder_stateful", False), ("embedder_stateless", True)):
        bilm = _ElmoBiLm(options, weights).eval()
        for start in range(0, len(SENTENCES), 3):
            if reset:
                bilm._elmo_lstm.reset_states()
            with torch.no_grad():
                activations, mask = batch_to_embeddings(bilm, SENTENCES[start : start + 3])
            for row in range(activations.shape[0]):
                length = int(mask[row].sum())
                out[f"{name}/{start + row}"] = activations[row, :, :length].numpy()

    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.output, **out)
    import allennlp

    print(
        f"wrote {len(out)} arrays to {args.output} ({Path(args.output).stat().st_size:,} bytes), "
        f"allennlp {allennlp.__version__}, torch {torch.__version__}"
    )


if __name__ == "__main__":
    main()
