"""Offline `evaluate` metric modules shipped with elmo-hf: load them by path, e.g.
`evaluate.load(elmo_hf.metrics.metric_path("seqeval_f1"))` (`evaluate.load("seqeval")` needs the network)."""

import pathlib

METRICS = ("seqeval_f1", "classification_f1")


def metric_path(name: str) -> str:
    """The folder of the shipped metric module `name` (one of `METRICS`), for `evaluate.load`."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; shipped metrics are {METRICS}")
    return str(pathlib.Path(__file__).resolve().parent / name)
