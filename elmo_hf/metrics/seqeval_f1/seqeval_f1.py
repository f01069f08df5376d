"""Token accuracy of any tag set and, when the tags are IOB, entity-level precision, recall and F1 (the CoNLL-2003
evaluation), as an `evaluate` module that works offline. The entity scores are the `seqeval` library's."""

from collections.abc import Iterable
from typing import Any

import datasets
import evaluate
from seqeval.metrics import accuracy_score, classification_report, f1_score, precision_score, recall_score

_DESCRIPTION = """
Token accuracy for every tag set (part-of-speech tags, chunks, entities). When every tag is O or PREFIX-TYPE with
PREFIX one of B, I, E, S, also entity scores from `seqeval`'s default (CoNLL, conlleval.pl) mode: an entity is a run
that starts with B-X (or with I-X after O or another type) and continues with I-X; a predicted entity counts when its
type, start and end all match a gold entity.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of list of str): predicted tags of each sentence.
    references (list of list of str): gold tags, same lengths.
Returns:
    accuracy (float), always. With IOB tags also precision, recall, f1 (floats, micro-averaged over entities) and
    for every entity type X a dict `X` with precision, recall, f1 and number (gold entities of that type).
"""

ENTITY_PREFIXES = ("B", "I", "E", "S")


def is_entity_tag_set(tags: Iterable[str]) -> bool:
    """Whether every tag in `tags` is O or B-/I-/E-/S-TYPE, so that entity scores mean something."""
    for tag in tags:
        prefix, separator, entity_type = tag.partition("-")
        if tag != "O" and not (prefix in ENTITY_PREFIXES and separator and entity_type):
            return False
    return True


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SeqevalF1(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions: list[list[str]], references: list[list[str]]) -> dict[str, Any]:
        for index, (predicted, gold) in enumerate(zip(predictions, references)):
            if len(predicted) != len(gold):
                raise ValueError(f"sentence {index}: {len(predicted)} predicted tags for {len(gold)} gold tags")
        results = {"accuracy": accuracy_score(references, predictions)}
        tag_set = {tag for sentence in [*predictions, *references] for tag in sentence}
        if not is_entity_tag_set(tag_set):
            return results
        if tag_set - {"O"}:  # with no entity at all, seqeval's report would average over no types (a numpy warning)
            report = classification_report(references, predictions, output_dict=True, zero_division=0)
            for entity_type, scores in report.items():
                if not entity_type.endswith(" avg"):  # skip the micro/macro/weighted averages
                    results[entity_type] = {
                        "precision": float(scores["precision"]),
                        "recall": float(scores["recall"]),
                        "f1": float(scores["f1-score"]),
                        "number": int(scores["support"]),
                    }
        results["precision"] = float(precision_score(references, predictions, zero_division=0))
        results["recall"] = float(recall_score(references, predictions, zero_division=0))
        results["f1"] = float(f1_score(references, predictions, zero_division=0))
        return results
