"""Resident memory (VmRSS) of a fresh process after each import step, and where the model's own memory goes.

    python tools/import_memory.py [--checkpoint /tmp/elmo-bench/original-hf]

Each import chain runs in its own fresh interpreter, so the figures do not depend on the order. With a checkpoint
(a converted model, e.g. the benchmark's work dir), also: after `from_pretrained`, after one single-sentence
forward, and after one forward of 32 sentences (which builds the oneDNN-packed weights). This explains the fixed part
of the peak RSS that `benchmark_elmo.py` reports; allennlp's process before loading its weights is printed by the
peer's own harness ("before load").
"""

import argparse
import subprocess
import sys

STEPS = [
    ("import torch", "import torch"),
    ("+ import transformers", "import torch, transformers"),
    ("+ from transformers import PreTrainedModel", "import torch; from transformers import PreTrainedModel"),
    ("+ import elmo_hf", "import torch; from transformers import PreTrainedModel; import elmo_hf"),
]

RSS_OF_SELF = """
def rss_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS"))
"""

MODEL_STEPS = """
import torch
from elmo_hf import ElmoModel, ElmoTokenizer
torch.set_num_threads(2)
print(f"{'import elmo_hf':45s} {rss_mb():7.0f} MB")
model = ElmoModel.from_pretrained(CHECKPOINT).eval()
tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
print(f"{'+ from_pretrained (weights memory-mapped)':45s} {rss_mb():7.0f} MB")
sentence = "the quick brown fox jumped over the lazy dog again and again".split()
with torch.inference_mode():
    model(**tokenizer([sentence], is_split_into_words=True, return_tensors="pt"))
    print(f"{'+ one single-sentence forward':45s} {rss_mb():7.0f} MB")
    model(**tokenizer([sentence] * 32, is_split_into_words=True, return_tensors="pt"))
    print(f"{'+ one forward of 32 sentences (packs weights)':45s} {rss_mb():7.0f} MB")
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="a converted model directory (optional)")
    args = parser.parse_args(argv)
    for label, statement in STEPS:
        code = RSS_OF_SELF + f"{statement}\nprint({label!r}.ljust(45), f'{{rss_mb():7.0f}} MB')"
        subprocess.run([sys.executable, "-c", code], check=True)
    if args.checkpoint is not None:
        code = RSS_OF_SELF + f"CHECKPOINT = {args.checkpoint!r}\n" + MODEL_STEPS
        subprocess.run([sys.executable, "-c", code], check=True)


if __name__ == "__main__":
    main()
