"""Adapters that let other libraries use ELMo: sentence-transformers (`sentence_transformers.py`), spaCy
(`spacy.py`) and TensorFlow Hub's ELMo signature (`tf_hub.py`). Each imports its library only when it is imported
itself; install the library with the matching extra, e.g. `pip install "elmo-hf[sentence-transformers]"`."""
