"""Training helpers: the language model's word vocabulary and collator (`word_vocabulary.py`), the heads' task word
vectors (`task_words.py`), the example scripts' training length (`training_schedule.py`) and weight averaging
(`weight_averaging.py`). This file imports nothing."""
