"""What the benchmark scripts share: the machine's description, the one timer, the shared peer folder's harness and
workload, the random weights of each size, and the scripts of `examples/` loaded as modules.

The scripts run as `python benchmarks/NAME.py`, so Python puts this folder first on `sys.path` and `import
benchmark_utils` needs nothing more. Only the standard library is imported at the top (torch and elmo_hf inside the
functions that need them): `allennlp_on_device.py` imports this module in allennlp's venv and `bilm_tf_training.py`
in bilm-tf's, where elmo_hf is not installed.
"""

import importlib.util
import os
import pathlib
import subprocess
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# The shared peer folder: allennlp's and bilm-tf's benchmark scripts, their venv recipes, the workload, the harness.
PEER_DIR = REPO_ROOT.parent / "shared" / "peer"
# The model sizes: arguments of the peer folder's make_random_elmo.py (the published hdf5 layout, random weights).
SIZES = {
    "small": ["--dim", "1024", "--proj", "128", "--n-highway", "1"],
    "medium": ["--dim", "2048", "--proj", "256", "--n-highway", "1"],
    "original": ["--dim", "4096", "--proj", "512", "--n-highway", "2"],
}
# The shared harness's modes (`benchlib.run_suite`): length-sorted and unsorted batches of 32, single sentences.
MODES = ("sorted", "unsorted", "batch1")
# The sentences whose vectors (every layer) are compared between the sides of a benchmark.
CHECK_SENTENCES = 8
# The training configurations of benchmark_training.py and bilm_tf_training.py: the shipped model's (the news and
# PTB models, elmo_hf.DEFAULT_MODEL), and one with twice its LSTM and projection.
TRAINING_CONFIGS = {
    "shipped": {"lstm_dim": 512, "projection_dim": 128},
    "larger": {"lstm_dim": 1024, "projection_dim": 256},
    "medium": {"lstm_dim": 2048, "projection_dim": 256},  # the published medium model's LSTM (for a GPU)
    # The published original model's shape (bilm-tf's options.json), with the 1B Word Benchmark's vocabulary and
    # 8,192 negatives, so that the softmax's dense gradient and update cost what they cost there (for a GPU).
    "original": {
        "lstm_dim": 4096,
        "projection_dim": 512,
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "num_highway_layers": 2,
        "max_characters_per_token": 50,
        "num_sampled_negatives": 8192,
        "vocab_size": 793471,
    },
}
TRAINING_SHARED = {  # the rest of the shipped model's configuration (a configuration's own fields replace these)
    "char_embedding_dim": 16,
    "filters": [[width, 25 * width] for width in range(1, 7)],
    "num_highway_layers": 1,
    "num_lstm_layers": 2,
    "max_characters_per_token": 20,
    "cell_clip": 3.0,
    "proj_clip": 3.0,
    "use_skip_connections": True,
    "num_sampled_negatives": 1024,
    "pretraining_dropout": 0.15,
}


def cpu_model():
    """lscpu's "Model name" (the name every figure in RESULTS.md is filed under), else /proc/cpuinfo's."""
    try:
        output = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        prefix = "Model name"
    except (OSError, subprocess.CalledProcessError):
        output = pathlib.Path("/proc/cpuinfo").read_text()
        prefix = "model name"
    return next((line.split(":", 1)[1].strip() for line in output.splitlines() if line.startswith(prefix)), "?")


def machine_line():
    """CPU model, cores and the load average (other jobs on a shared machine make timings noisy)."""
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    return f"{cpu_model()}, {os.cpu_count()} cores, load average {load}"


def worker_environment(omp_wait=None):
    """The environment of a timed process: this one's, with the OpenMP wait policy set when `omp_wait` is given
    (PASSIVE stops idle OpenMP threads spinning, which on an oversubscribed machine slows every 2-thread op)."""
    environment = dict(os.environ)
    if omp_wait is not None:
        environment["OMP_WAIT_POLICY"] = omp_wait
    return environment


def wait_for(device):
    """Block until `device` (a name or a torch.device) has finished its queued work; a no-op on the CPU."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def rate(function, work, device="cpu", min_seconds=0.3, repeats=5):
    """The timer of every micro-timing here: `work` per second of `function()`, the median of `repeats` timings, each
    over enough calls to last about `min_seconds` (calibrated after one untimed call), waiting for `device` around
    each timing. Whole workloads are timed by the shared harness instead (`peer_harness`), as the peers are."""
    function()
    calls, elapsed = 1, 0.0
    while elapsed < 0.05:  # calibrate: calls per ~0.05 s
        wait_for(device)
        start = time.perf_counter()
        for _ in range(calls):
            function()
        wait_for(device)
        elapsed = time.perf_counter() - start
        calls *= 2
    calls = max(1, int(calls * min_seconds / max(elapsed, 1e-9) / 2))
    rates = []
    for _ in range(repeats):
        wait_for(device)
        start = time.perf_counter()
        for _ in range(calls):
            function()
        wait_for(device)
        rates.append(work * calls / (time.perf_counter() - start))
    return sorted(rates)[len(rates) // 2]


def peer_harness(peer_dir=PEER_DIR):
    """The shared peer folder's timing harness and workload: `(benchlib, make_workload)`. The folder's modules import
    each other by name, so it goes first on `sys.path` (once); its other modules (e.g. `allennlp_elmo_shim`) are then
    importable too."""
    peer_dir = pathlib.Path(peer_dir)
    if not (peer_dir / "workload.py").is_file():
        raise ValueError(f"peer folder {peer_dir} lacks workload.py (pass --peer-dir)")
    if str(peer_dir) not in sys.path:
        sys.path.insert(0, str(peer_dir))
    import benchlib
    from workload import make_workload

    return benchlib, make_workload


def prepare(work_dir, peer_dir, size):
    """Random weights of `size` in the published layout (the peer folder's make_random_elmo.py), converted with our
    converter; both made once in `work_dir` and reused. Returns (hdf5 dir, converted checkpoint dir)."""
    from elmo_hf.convert.convert_bilm_tf import convert_hdf5

    work_dir, peer_dir = pathlib.Path(work_dir), pathlib.Path(peer_dir)
    source = work_dir / size
    if not (source / "weights.hdf5").is_file():
        subprocess.run([sys.executable, str(peer_dir / "make_random_elmo.py"), str(source), *SIZES[size]], check=True)
    checkpoint = work_dir / f"{size}-hf"
    if not (checkpoint / "model.safetensors").is_file():
        model, _, report = convert_hdf5(source / "options.json", source / "weights.hdf5")
        model.save_pretrained(checkpoint)
        print(
            f"{size}: converted, max difference to bilm-tf's arithmetic "
            f"{report['verification_max_abs_difference']:.2e}",
            flush=True,
        )
    return source, checkpoint


def in_precision(model, precision):
    """`model` computing in `precision`: "float32" as it is, "bfloat16" (`model.to(torch.bfloat16)`) or "int8"
    (`model.quantize_weights("int8")`)."""
    import torch

    if precision == "bfloat16":
        return model.to(torch.bfloat16)
    if precision == "int8":
        return model.quantize_weights("int8")
    return model


def write_report(output, payload, lines):
    """OUTPUT.json (`payload`) and OUTPUT.log (`lines`), the parent folder made if needed."""
    import json

    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(json.dumps(payload, indent=1))
    output.with_suffix(".log").write_text("\n".join(lines) + "\n")


def load_example(name):
    """`examples/NAME.py` imported as the module NAME (the examples are scripts, not a package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "examples" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before running it: its dataclasses look their module up by name
        spec.loader.exec_module(module)
    return sys.modules[name]
