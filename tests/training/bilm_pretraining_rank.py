"""Runs examples/run_bilm_pretraining.py's main on one process of a `torchrun` group (or alone), then writes this
process's weights to `<output_dir>/rank<N>.safetensors` and its logged history to `<output_dir>/rank<N>.json`, so
that tests can compare the processes' weights and losses.

    python -m torch.distributed.run --nproc_per_node 2 tests/training/bilm_pretraining_rank.py <script arguments>
"""

import json
import os
import sys

from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/, for helpers
from helpers import load_script  # noqa: E402

run_bilm_pretraining = load_script("run_bilm_pretraining")

if __name__ == "__main__":
    trainer = run_bilm_pretraining.main(sys.argv[1:])
    rank = trainer.args.process_index
    output_dir = trainer.args.output_dir
    save_file(
        {name: tensor.contiguous() for name, tensor in trainer.model.state_dict().items()},
        os.path.join(output_dir, f"rank{rank}.safetensors"),
    )
    with open(os.path.join(output_dir, f"rank{rank}.json"), "w", encoding="utf-8") as history:
        json.dump(trainer.state.log_history, history)
    run_bilm_pretraining.leave_process_group()
