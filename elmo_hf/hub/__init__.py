"""The Hub side: the generated model card (`model_card.py` and its template `model_card.md`) and the model shipped
in the package (`shipped_models.py`). This file imports nothing."""
