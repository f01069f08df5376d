"""Entity-level precision, recall and F1 of IOB-tagged sequences (the CoNLL-2003 evaluation), as an `evaluate`
module that works offline."""

import datasets
import evaluate

_DESCRIPTION = """
Entity-level scores for sequence labelling with IOB1, IOB2 (BIO) or IOBES-free tags: an entity is a maximal run that
starts with B-X (or with I-X after a tag of another type or O) and continues with I-X. A predicted entity counts when
its type, start and end all match a gold entity. Also returns token accuracy and per-type scores.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of list of str): predicted tags of each sentence.
    references (list of list of str): gold tags, same lengths.
Returns:
    precision, recall, f1, accuracy (floats), and for every entity type X a dict `X` with precision, recall, f1 and
    number (gold entities of that type).
"""


def entities(tags):
    """The set of (type, start, end) entity spans in one sentence's IOB tags (end exclusive)."""
    spans = set()
    current_type, start = None, None
    for position, tag in enumerate([*tags, "O"]):
        prefix, _, entity_type = tag.partition("-")
        if prefix not in ("B", "I", "O") or (prefix != "O" and not entity_type):
            raise ValueError(f"tag {tag!r} at position {position} is not an IOB tag (O, B-TYPE or I-TYPE)")
        continues = prefix == "I" and entity_type == current_type
        if current_type is not None and not continues:
            spans.add((current_type, start, position))
            current_type = None
        if prefix == "B" or (prefix == "I" and not continues):
            current_type, start = entity_type, position
    return spans


def safe_ratio(numerator, denominator):
    return numerator / denominator if denominator else 0.0


def f1(precision, recall):
    return safe_ratio(2 * precision * recall, precision + recall)


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SeqevalF1(evaluate.Metric):
    def _info(self):
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

    def _compute(self, predictions, references):
        gold_total, predicted_total, correct = {}, {}, {}
        right_tokens = all_tokens = 0
        for index, (predicted, gold) in enumerate(zip(predictions, references)):
            if len(predicted) != len(gold):
                raise ValueError(f"sentence {index}: {len(predicted)} predicted tags for {len(gold)} gold tags")
            right_tokens += sum(p == g for p, g in zip(predicted, gold))
            all_tokens += len(gold)
            gold_spans, predicted_spans = entities(gold), entities(predicted)
            for spans, counts in ((gold_spans, gold_total), (predicted_spans, predicted_total)):
                for entity_type, _, _ in spans:
                    counts[entity_type] = counts.get(entity_type, 0) + 1
            for entity_type, _, _ in gold_spans & predicted_spans:
                correct[entity_type] = correct.get(entity_type, 0) + 1
        results = {}
        for entity_type in sorted(set(gold_total) | set(predicted_total)):
            precision = safe_ratio(correct.get(entity_type, 0), predicted_total.get(entity_type, 0))
            recall = safe_ratio(correct.get(entity_type, 0), gold_total.get(entity_type, 0))
            results[entity_type] = {
                "precision": precision,
                "recall": recall,
                "f1": f1(precision, recall),
                "number": gold_total.get(entity_type, 0),
            }
        precision = safe_ratio(sum(correct.values()), sum(predicted_total.values()))
        recall = safe_ratio(sum(correct.values()), sum(gold_total.values()))
        results.update(
            precision=precision, recall=recall, f1=f1(precision, recall), accuracy=safe_ratio(right_tokens, all_tokens)
        )
        return results
