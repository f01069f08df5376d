"""Conversion of original checkpoints: bilm-tf's hdf5 weights and TF checkpoints (`convert_bilm_tf.py`, with the
TF-free reader `tf_checkpoint_reader.py`), ELMoForManyLangs folders (`convert_elmoformanylangs.py`), what both
share (`convert_common.py`), and the published models by name (`published.py`). This file imports nothing."""
