"""bilm-tf's own trainer on the shipped model's configuration: the anchor for benchmark_training.py.

    BILMTF_VENV/bin/python benchmarks/bilm_tf_training.py --train-file ptb/train.txt --vocab-file vocab.txt \
        [--config shipped|larger] [--batches 200] [--threads 2] [--work-dir /tmp/elmo-bilmtf-train] [--json OUT]

Run it with the venv that `../shared/peer/setup_bilmtf_venv.sh` builds (PyPI `bilm` 0.1.post5, the original
bilm-tf, on tensorflow-cpu 2.15 through `tf.compat.v1`). It writes bilm-tf's options.json for the configuration
(`benchmark_utils.TRAINING_CONFIGS` and `TRAINING_SHARED`, as benchmark_training.py: the same char CNN, LSTM,
projection, clips, skip connections, dropout, 1,024 negatives, Adagrad at 0.2 with bilm-tf's initial accumulator of
1) with batch 64 and 20 unrolled steps, runs
`bilm.training.train` for --batches batches and reads the elapsed times it prints every 100 batches. Words/s are
taken between the first and the last report (the first 100 batches, graph building included, are left out): each
batch trains on 64 x 20 tokens, every one predicted in both directions. bilm-tf carries the LSTM state from batch to
batch instead of starting each sentence from zeros; the work per token is the same.
"""

import argparse
import contextlib
import io
import json
import os
import pathlib
import re
import sys

from benchmark_utils import TRAINING_CONFIGS, TRAINING_SHARED

BATCH_SIZE, UNROLL_STEPS, REPORT_EVERY = 64, 20, 100


def bilm_tf_options(config_name, vocab_size, batches):
    config = {**TRAINING_SHARED, **TRAINING_CONFIGS[config_name]}
    return {
        "bidirectional": True,
        "char_cnn": {
            "activation": "relu",
            "embedding": {"dim": config["char_embedding_dim"]},
            "filters": config["filters"],
            "max_characters_per_token": config["max_characters_per_token"],
            "n_characters": 261,
            "n_highway": config["num_highway_layers"],
        },
        "dropout": config["pretraining_dropout"],
        "lstm": {
            "cell_clip": config["cell_clip"],
            "dim": config["lstm_dim"],
            "n_layers": config["num_lstm_layers"],
            "proj_clip": config["proj_clip"],
            "projection_dim": config["projection_dim"],
            "use_skip_connections": config["use_skip_connections"],
        },
        "all_clip_norm_val": 10.0,
        "n_epochs": 1,
        "n_train_tokens": batches * BATCH_SIZE * UNROLL_STEPS,
        "batch_size": BATCH_SIZE,
        "n_tokens_vocab": vocab_size,
        "unroll_steps": UNROLL_STEPS,
        "n_negative_samples_batch": config["num_sampled_negatives"],
        "learning_rate": 0.2,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-file", required=True, help="one sentence per line")
    parser.add_argument("--vocab-file", required=True, help="bilm-tf's vocab.txt: <S>, </S>, <UNK>, then the words")
    parser.add_argument("--config", choices=list(TRAINING_CONFIGS), default="shipped")
    parser.add_argument("--batches", type=int, default=200, help="a multiple of 100, at least 200")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work-dir", type=pathlib.Path, default=pathlib.Path("/tmp/elmo-bilmtf-train"))
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args(argv)
    if args.batches < 2 * REPORT_EVERY or args.batches % REPORT_EVERY:
        parser.error(f"--batches must be a multiple of {REPORT_EVERY} and at least {2 * REPORT_EVERY}")

    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(args.threads))
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
    import tensorflow.compat.v1 as tf

    tf.disable_v2_behavior()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    sys.modules["tensorflow"] = tf  # bilm-tf is TF1 code: it gets the v1 API under the old name
    from bilm.data import BidirectionalLMDataset, UnicodeCharsVocabulary
    from bilm.training import train

    vocab_size = sum(1 for line in open(args.vocab_file, encoding="utf-8") if line.strip())
    options = bilm_tf_options(args.config, vocab_size, args.batches)
    save_dir = args.work_dir / args.config
    save_dir.mkdir(parents=True, exist_ok=True)
    vocabulary = UnicodeCharsVocabulary(args.vocab_file, options["char_cnn"]["max_characters_per_token"])
    data = BidirectionalLMDataset(args.train_file, vocabulary, test=False, shuffle_on_load=False)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        train(options, data, 1, str(save_dir), str(save_dir))
    reports = [float(seconds) for seconds in re.findall(r"Total time: ([0-9.]+)", printed.getvalue())]
    timed_batches = (len(reports) - 1) * REPORT_EVERY
    seconds = reports[-1] - reports[0]
    tokens = timed_batches * BATCH_SIZE * UNROLL_STEPS
    result = {
        "config": args.config,
        "threads": args.threads,
        "tf": tf.__version__,
        "timed_batches": timed_batches,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "perplexities": re.findall(r"train_perplexity=([0-9.]+)", printed.getvalue()),
    }
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
