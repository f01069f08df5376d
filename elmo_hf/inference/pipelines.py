"""The token-classification pipeline for ELMo: one tag per word, character offsets into the raw text.

Importing this module registers the task "elmo-token-classification" (`import elmo_hf` imports it).
"""

from collections.abc import Iterator
from typing import Any

from transformers import AutoModelForTokenClassification
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.pipelines.token_classification import AggregationStrategy, TokenClassificationPipeline

from ..model.modeling_elmo import decoded_tags
from ..model.tokenization_elmo import ElmoTokenizer

# The task name `import elmo_hf` registers for this pipeline; the stock "token-classification" task stays untouched.
ELMO_TOKEN_CLASSIFICATION_TASK = "elmo-token-classification"


class ElmoTokenClassificationPipeline(TokenClassificationPipeline):
    r"""
    The token-classification pipeline, taught [`ElmoTokenizer`]'s input: `input_ids` of shape
    `(batch, words, max_characters_per_token)`, one "token" per whole word. With any other tokenizer it behaves
    exactly as transformers' `TokenClassificationPipeline`. Importing `elmo_hf` registers it as the task
    "elmo-token-classification"; `pipeline("token-classification", pipeline_class=ElmoTokenClassificationPipeline)`
    gives it too. The stock "token-classification" task is left alone.

    With an [`ElmoTokenizer`]:
        - every word gets one tag, so `aggregation_strategy="simple"` never splits a word; "first", "average"
          and "max" (made for sub-word tokenizers) are refused, as for any slow tokenizer.
        - `word` is the word as it appears in the input, `start`/`end` its character offsets there; an entity
          group's `word` is its words joined by single spaces (`text[start:end]` is the exact span).
        - the tags come from [`~ElmoForTokenClassification.decode`]: the Viterbi path when the head has a CRF
          (`config.use_crf`), the argmax of the logits otherwise. `score` is the softmax of the word's logits
          (the CRF's emission scores) at the chosen tag, not a CRF marginal.
        - `stride` is not supported: a sentence is encoded whole (see `ElmoTokenizer.max_words`).
    """

    def preprocess(  # type: ignore[override]  # a generator, as the base class's is (its annotation says dict)
        self, sentence: str | list[str], offset_mapping: Any = None, **preprocess_params: Any
    ) -> Iterator[dict[str, Any]]:
        if not isinstance(self.tokenizer, ElmoTokenizer):
            yield from super().preprocess(sentence, offset_mapping=offset_mapping, **preprocess_params)
            return
        if preprocess_params["is_split_into_words"]:
            if not isinstance(sentence, list):
                raise ValueError(f"with is_split_into_words=True the input must be a list of words, got {sentence!r}")
            words, delimiter = sentence, preprocess_params["delimiter"]
            sentence = delimiter.join(words)  # the text that `start`/`end` index into
            inputs = self.tokenizer(
                words, is_split_into_words=True, return_special_tokens_mask=True, return_tensors="pt"
            )
            word_offsets, start = [], 0
            for word in words:
                word_offsets.append((start, start + len(word)))
                start += len(word) + len(delimiter)
            inputs["offset_mapping"] = [[(0, 0), *word_offsets, (0, 0)]]  # (1, words, 2), boundaries (0, 0)
        else:
            if not isinstance(sentence, str):
                raise ValueError(f"the input must be a string (words need is_split_into_words=True), got {sentence!r}")
            inputs = self.tokenizer(
                sentence, return_special_tokens_mask=True, return_offsets_mapping=True, return_tensors="pt"
            )
        model_inputs = dict(inputs)  # every value (1, words, ...)
        if offset_mapping is not None:
            model_inputs["offset_mapping"] = offset_mapping
        model_inputs["sentence"] = sentence
        model_inputs["is_last"] = True
        yield model_inputs

    # TokenClassificationPipeline's own (untyped) signature, which differs from the base Pipeline's annotations.
    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        outputs = super()._forward(model_inputs)
        if isinstance(self.tokenizer, ElmoTokenizer):
            words = outputs["special_tokens_mask"] == 0  # (batch, words)
            # (batch, words), -1 at boundaries and padding, so that batched outputs split per sentence
            outputs["tags"] = decoded_tags(self.model, outputs["logits"], words)
        return outputs

    def postprocess(  # type: ignore[override]  # TokenClassificationPipeline's signature, as _forward
        self,
        all_outputs: list[dict[str, Any]],
        aggregation_strategy: AggregationStrategy = AggregationStrategy.NONE,
        ignore_labels: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        if not isinstance(self.tokenizer, ElmoTokenizer):
            return super().postprocess(all_outputs, aggregation_strategy, ignore_labels)
        (outputs,) = all_outputs  # a sentence is one chunk
        ignore_labels = ["O"] if ignore_labels is None else ignore_labels
        scores = outputs["logits"][0].float().softmax(-1).numpy()  # (words, num_labels)
        tags = outputs["tags"][0].tolist()  # (words,)
        offsets = outputs["offset_mapping"][0]
        entities = []
        for position, tag in enumerate(tags):
            if tag < 0:
                continue
            start, end = (int(offset) for offset in offsets[position])
            entities.append(
                {
                    "entity": self.model.config.id2label[tag],
                    "score": scores[position, tag],
                    "index": position,
                    "word": outputs["sentence"][start:end],
                    "start": start,
                    "end": end,
                }
            )
        if aggregation_strategy != AggregationStrategy.NONE:
            entities = self.group_entities(entities)
        return [entity for entity in entities if entity.get("entity", entity.get("entity_group")) not in ignore_labels]


# The stock "token-classification" task is left as transformers defines it, for every other model in the process;
# pipeline("token-classification", model=..., pipeline_class=ElmoTokenClassificationPipeline) also gives this one.
PIPELINE_REGISTRY.register_pipeline(
    ELMO_TOKEN_CLASSIFICATION_TASK,
    pipeline_class=ElmoTokenClassificationPipeline,
    pt_model=AutoModelForTokenClassification,
    type="text",
)

__all__ = ["ELMO_TOKEN_CLASSIFICATION_TASK", "ElmoTokenClassificationPipeline"]
