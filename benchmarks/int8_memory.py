"""Resident memory and folder size of an int8 model against float32, at a model size (`--size`, default original).

    python benchmarks/int8_memory.py [--size original] [--work-dir /tmp/elmo-int8-memory]

Writes a random model of the size (the published layout's shapes: `benchmark_utils.SIZES`) as a float32 folder and,
after `quantize_weights("int8")`, as an int8 folder. Then, for each folder, a new process imports elmo_hf, loads the
folder with `from_pretrained`, embeds one sentence and one batch of 32 (so that every derived copy each mode keeps
is built), and reports its resident memory (VmRSS) after the imports and at the end (after `malloc_trim`, so that
freed temporaries that glibc keeps count in neither mode). The int8 tensors are read from the memory-mapped
safetensors file: their pages count once they are read, as file-backed RSS. Prints the CPU model, both
folders' sizes, and the model's share of the RSS (end minus imports) and the whole RSS per mode, with the ratios.
"""

import argparse
import json
import pathlib
import subprocess
import sys

from benchmark_utils import cpu_model

CHILD = """
import ctypes, json, sys
def rss():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS")) * 1024
import torch
torch.set_num_threads(1)
from elmo_hf import ElmoModel, ElmoTokenizer
imports = rss()
model = ElmoModel.from_pretrained(sys.argv[1]).eval()
tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
sentence = "the quick brown fox jumps over the lazy dog near the river bank".split()
with torch.inference_mode():
    model(**tokenizer([sentence], is_split_into_words=True, return_tensors="pt"))
    model(**tokenizer([sentence[: 3 + i % 10] for i in range(32)], is_split_into_words=True, padding=True,
                      return_tensors="pt"))
ctypes.CDLL("libc.so.6").malloc_trim(0)  # the temporaries' freed memory, which glibc may keep, back to the system
print(json.dumps({"imports": imports, "end": rss()}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="original", choices=["medium", "original"])
    parser.add_argument("--work-dir", default="/tmp/elmo-int8-memory")
    args = parser.parse_args()
    import torch

    from elmo_hf import ElmoConfig, ElmoModel

    dims = {"medium": dict(lstm_dim=2048, projection_dim=256, num_highway_layers=1), "original": {}}[args.size]
    work = pathlib.Path(args.work_dir) / args.size
    folders = {"float32": work / "float32", "int8": work / "int8"}
    if not (folders["int8"] / "config.json").is_file():
        torch.manual_seed(0)
        model = ElmoModel(ElmoConfig(**dims)).eval()
        model.save_pretrained(folders["float32"])
        model.quantize_weights("int8").save_pretrained(folders["int8"])
    sizes = {mode: sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) for mode, folder in folders.items()}
    memory = {}
    for mode, folder in folders.items():
        result = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True, check=True)
        memory[mode] = json.loads(result.stdout.strip().splitlines()[-1])
    mib = 2**20
    print(f"CPU: {cpu_model()}; size {args.size}")
    for mode in folders:
        model_rss = memory[mode]["end"] - memory[mode]["imports"]
        print(
            f"{mode:8s} folder {sizes[mode] / mib:7.1f} MiB  model RSS {model_rss / mib:7.1f} MiB  "
            f"process RSS {memory[mode]['end'] / mib:7.1f} MiB"
        )
    model_ratio = (memory["int8"]["end"] - memory["int8"]["imports"]) / (
        memory["float32"]["end"] - memory["float32"]["imports"]
    )
    print(
        f"int8 / float32: folder {sizes['int8'] / sizes['float32']:.3f}, model RSS {model_ratio:.3f}, "
        f"process RSS {memory['int8']['end'] / memory['float32']['end']:.3f}"
    )


if __name__ == "__main__":
    main()
