"""Using a model: `ElmoEmbedder` and its files (`embedder.py`), perplexity (`perplexity.py`), the ONNX export
(`onnx_export.py`) and the tagging pipeline (`pipelines.py`). This file imports nothing."""
