"""The interfaces of other ELMo packages on elmo-hf: `elmo_hf.compat.allennlp` (allennlp's `Elmo`, `batch_to_ids`,
`ElmoTokenEmbedder`, `_ElmoBiLm`, `_ElmoCharacterEncoder` and 0.9's `ElmoEmbedder`) and
`elmo_hf.compat.elmoformanylangs` (ELMoForManyLangs' `Embedder`). Import the module you need; this package imports
neither."""
