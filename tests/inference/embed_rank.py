"""One process of a distributed `elmo-hf embed` test (tests/inference/test_distributed_embed.py), started by torchrun or
accelerate launch: joins the process group once, then runs `elmo_hf.cli.main` in it for each argument list in the
JSON file given as argv[1] (the command uses a group that is already set up).

Every chunk this process saves is listed in `chunks-RANK.json` beside that file. With ELMO_TEST_FAIL_AFTER_CHUNKS=N,
process 1 dies (os._exit, as a killed process would) right after saving its N-th chunk: a run killed mid-way."""

import json
import os
import pathlib
import sys

import torch.distributed as dist

from elmo_hf import cli
from elmo_hf.inference import embedder

argv_file = pathlib.Path(sys.argv[1])
rank = os.environ["RANK"]
fail_after = int(os.environ.get("ELMO_TEST_FAIL_AFTER_CHUNKS", "0")) if rank == "1" else 0
write_chunk, saved = embedder._write_chunk, []


def write_chunk_and_record(work_dir, chunk, *args):
    write_chunk(work_dir, chunk, *args)
    saved.append([work_dir.name, chunk])
    (argv_file.parent / f"chunks-{rank}.json").write_text(json.dumps(saved), encoding="utf-8")
    if len(saved) == fail_after:
        os._exit(3)


embedder._write_chunk = write_chunk_and_record
dist.init_process_group("gloo")
for argv in json.loads(argv_file.read_text(encoding="utf-8")):
    cli.main(argv)
dist.barrier()
dist.destroy_process_group()
