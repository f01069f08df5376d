"""Accuracy and macro-averaged F1 of class predictions, as an `evaluate` module that works offline: scikit-learn's
`accuracy_score` and `f1_score`, as `evaluate`'s own `accuracy` and `f1` modules compute them."""

import datasets
import evaluate
from sklearn.metrics import accuracy_score, f1_score

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
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions: list[int], references: list[int]) -> dict[str, float]:
        if not references:
            raise ValueError("classification_f1 needs at least one prediction")
        return {
            "accuracy": float(accuracy_score(references, predictions)),
            "macro_f1": float(f1_score(references, predictions, average="macro", zero_division=0)),
        }
