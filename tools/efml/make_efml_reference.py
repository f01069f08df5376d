"""Build small random ELMoForManyLangs models in the package's exact on-disk layout and store its own outputs.

Run with the venv of `setup_efml_venv.sh` (ELMoForManyLangs 0.0.4.post2, unmodified, on torch 2.13 CPU):

    CUDA_VISIBLE_DEVICES= /tmp/efml-venv/bin/python tools/efml/make_efml_reference.py tests/data/efml

Writes, under OUT:
    sentences.json          the multilingual test sentences (accents, a decomposed accent, CJK, emoji, a word longer
                            than max_characters_per_token, unknown words and characters, a one-word sentence, a
                            literal "<bos>")
    <model>/                one model folder per variant, as `biLM.py train` writes it: config.json (its `vars(opt)`
                            dump; `config_path` is an absolute path of the "trainer's machine", as in the published
                            models, so the Embedder falls back to the config beside it), the model config, char.dic,
                            word.dic (only with a word embedding), token_embedder.pkl and encoder.pkl (torch.save of
                            the modules' state dicts)
    <model>.npz             `Embedder(model).sents2elmo(sentences, output_layer=k)` for k in -1, 0, 1, 2, -2 (keys
                            `layer_{k}_{i}` for sentence i), each from a fresh Embedder (the encoder is stateful: only
                            the first call of an Embedder starts from zero states), and `stateful_{call}_{i}`: two
                            successive calls on one Embedder with batch_size=2, `random.seed(7)` before each (the
                            order of its batches is shuffled with the global `random`), output_layer=-2
    README.json             what was run, and the LSTM token embedder's failure

Variants: "cnn_word" (char CNN + word embedding, relu, legacy torch-0.4 pickle format like the published files) and
"cnn_chars" (char CNN only, tanh, filters adding up to projection_dim: the projection is still applied). The LSTM
token embedder (`token_embedder.name == "lstm"`) crashes in its forward whenever it has characters (char_dim > 0):
this script records the exception instead of outputs.
"""

import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import efml_shim  # noqa: E402, F401  (must precede elmoformanylangs)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from elmoformanylangs import Embedder  # noqa: E402
from elmoformanylangs.frontend import Model  # noqa: E402
from elmoformanylangs.modules.embedding_layer import EmbeddingLayer  # noqa: E402

SENTENCES = [
    ["Le", "café", "était", "très", "bon", "."],
    ["Cafe\u0301", "naïve", "Ærø"],
    ["我", "爱", "北京", "天安门", "。"],
    ["I", "❤️", "🙂", "emoji", "!"],
    ["Donaudampfschifffahrtsgesellschaft", "ist", "lang"],
    ["qwxz"],
    ["the", "<bos>", "cat", "sat"],
]
# The "training text": its characters, in order of first appearance, make char.dic; its words make word.dic.
TRAINING_TEXT = "<bos> <eos> the cat sat on le café était très bon . 我 爱 北京 \u3000 I ! emoji lang ist Donau"
WORDS = [
    "the",
    "cat",
    ".",
    "café",
    "bon",
    "我",
    "北京",
    "!",
    "lang",
    "Donaudampf",
]  # "Donaudampf": the long word, truncated to 10 characters
OUTPUT_LAYERS = (-1, 0, 1, 2, -2)


def model_config(char_dim, word_dim, filters, activation, projection_dim, token_embedder="cnn"):
    return {
        "encoder": {
            "name": "elmo",
            "projection_dim": projection_dim,
            "cell_clip": 3,
            "proj_clip": 3,
            "dim": 12,
            "n_layers": 2,
        },
        "token_embedder": {
            "name": token_embedder,
            "activation": activation,
            "filters": filters,
            "n_highway": 2,
            "word_dim": word_dim,
            "char_dim": char_dim,
            "max_characters_per_token": 12,
        },
        "classifier": {"name": "sampled_softmax", "n_samples": 8},
        "dropout": 0.1,
    }


VARIANTS = {
    "cnn_word": (model_config(5, 6, [[1, 4], [2, 4], [3, 6]], "relu", 8), True),
    "cnn_chars": (model_config(4, 0, [[1, 3], [2, 5]], "tanh", 8), False),
}


def write_lexicon(path, tokens):
    with open(path, "w", encoding="utf-8") as file:
        for index, token in enumerate(tokens):
            file.write(f"{token}\t{index}\n")


def char_lexicon():
    chars = []
    for char in TRAINING_TEXT.replace(" ", ""):
        if char not in chars:
            chars.append(char)
    return [*chars, "<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"]


def write_model(folder, config, legacy_pickle, seed, weight_std=0.6):
    """A model folder as biLM.py writes it, with random weights: normal with `weight_std` (larger than its init, so
    clips and gates act), or the package's own initialisation when `weight_std` is None."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as file:
        json.dump(
            {
                "seed": seed,
                "gpu": -1,
                "train_path": "/home/trainer/data/train.txt",
                "config_path": "/home/trainer/configs/tiny.json",
                "model": "/home/trainer/models/tiny",
                "batch_size": 32,
                "max_sent_len": 20,
            },
            file,
        )
    with open(os.path.join(folder, "tiny.json"), "w", encoding="utf-8") as file:
        json.dump(config, file, indent=1)
    torch.manual_seed(seed)
    token_config = config["token_embedder"]
    chars = char_lexicon()
    write_lexicon(os.path.join(folder, "char.dic"), chars)
    char_layer = EmbeddingLayer(token_config["char_dim"], {c: i for i, c in enumerate(chars)}, fix_emb=False)
    word_layer = None
    if token_config["word_dim"]:
        words = ["<oov>", "<bos>", "<eos>", "<pad>", *WORDS]
        write_lexicon(os.path.join(folder, "word.dic"), words)
        word_layer = EmbeddingLayer(token_config["word_dim"], {w: i for i, w in enumerate(words)}, fix_emb=False)
    model = Model(config, word_layer, char_layer, use_cuda=False)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embedding" not in name and weight_std is not None:
                parameter.normal_(0.0, weight_std)
    keywords = {"_use_new_zipfile_serialization": False} if legacy_pickle else {}
    torch.save(model.token_embedder.state_dict(), os.path.join(folder, "token_embedder.pkl"), **keywords)
    torch.save(model.encoder.state_dict(), os.path.join(folder, "encoder.pkl"), **keywords)


def reference_outputs(folder):
    outputs = {}
    for layer in OUTPUT_LAYERS:
        vectors = Embedder(folder).sents2elmo(SENTENCES, output_layer=layer)
        for index, vector in enumerate(vectors):
            outputs[f"layer_{layer}_{index}"] = np.asarray(vector, dtype=np.float32)
    embedder = Embedder(folder, batch_size=2)
    for call in range(2):
        random.seed(7)
        for index, vector in enumerate(embedder.sents2elmo(SENTENCES, output_layer=-2)):
            outputs[f"stateful_{call}_{index}"] = np.asarray(vector, dtype=np.float32)
    return outputs


def lstm_token_embedder_failure(out):
    """The LSTM token embedder with characters, without and with a word embedding: its forward concatenates a 2-D
    and a 3-D tensor."""
    failures = {}
    for word_dim in (0, 6):
        folder = os.path.join(out, "_lstm_scratch")
        try:
            write_model(folder, model_config(4, word_dim, [[1, 4]], "relu", 8, token_embedder="lstm"), False, 3)
            Embedder(folder).sents2elmo(SENTENCES[:1])
            failure = None
        except Exception as error:  # the point is to record whatever it raises
            failure = f"{type(error).__name__}: {error}"
        failures[f"char_dim 4, word_dim {word_dim}"] = failure
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)
    return failures


def main(out):
    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "sentences.json"), "w", encoding="utf-8") as file:
        json.dump(SENTENCES, file, ensure_ascii=False, indent=1)
    for seed, (name, (config, legacy_pickle)) in enumerate(VARIANTS.items()):
        folder = os.path.join(out, name)
        write_model(folder, config, legacy_pickle, seed)
        np.savez_compressed(os.path.join(out, f"{name}.npz"), **reference_outputs(folder))
    import importlib.metadata

    with open(os.path.join(out, "README.json"), "w", encoding="utf-8") as file:
        json.dump(
            {
                "made_by": "tools/efml/make_efml_reference.py",
                "elmoformanylangs": importlib.metadata.version("elmoformanylangs"),
                "torch": torch.__version__,
                "numpy": np.__version__,
                "variants": sorted(VARIANTS),
                "lstm_token_embedder_with_chars": lstm_token_embedder_failure(out),
            },
            file,
            indent=1,
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/efml")
