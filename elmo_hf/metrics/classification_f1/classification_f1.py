"""Accuracy and macro-averaged F1 of class predictions, as an `evaluate` module that works offline."""

import datasets
import evaluate

_DESCRIPTION = """
Accuracy, and the unweighted mean over classes of each class's F1 (macro-F1). A class is counted when it occurs in
the references or in the predictions.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of int): predicted class ids.
    references (list of int): gold class ids.
Returns:
    accuracy, macro_f1 (floats).
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ClassificationF1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("classification_f1 needs at least one prediction")
        scores = []
        for label in sorted(set(predictions) | set(references)):
            true_positive = sum(p == label and r == label for p, r in zip(predictions, references))
            predicted = sum(p == label for p in predictions)
            gold = sum(r == label for r in references)
            scores.append(2 * true_positive / (predicted + gold))
        accuracy = sum(p == r for p, r in zip(predictions, references)) / len(references)
        return {"accuracy": accuracy, "macro_f1": sum(scores) / len(scores)}
