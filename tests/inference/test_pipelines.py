"""The ELMo tagging pipeline (task "elmo-token-classification") on raw text, and the stock task left alone."""

import pytest
import torch
from helpers import tiny_config
from transformers import pipeline
from transformers.pipelines.token_classification import TokenClassificationPipeline

from elmo_hf import ElmoForTokenClassification, ElmoTokenClassificationPipeline

TEXT = "John Smith lives in  Paris with Mary Ann Lee."
ID2LABEL = {0: "O", 1: "B-PER", 2: "I-PER"}
LABEL2ID = {label: index for index, label in ID2LABEL.items()}


def tagger(seed=4, **overrides):
    """A head whose random weights (seed 4, TEXT) predict O, B-PER and I-PER, with a B-PER I-PER run."""
    torch.manual_seed(seed)
    model = ElmoForTokenClassification(tiny_config(num_labels=3, id2label=ID2LABEL, **overrides))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    return model.eval()


def predicted_words(model, tokenizer, text):
    """[(word, start, end, tag, score)] for each word of `text`, from the model's own argmax."""
    encoding = tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
    with torch.no_grad():
        probabilities = model(input_ids=encoding["input_ids"]).logits.softmax(-1)[0]  # (words, num_labels)
    rows = []
    for position, (start, end) in enumerate(encoding["offset_mapping"][0].tolist()[1:-1], start=1):
        tag = int(probabilities[position].argmax())
        rows.append((text[start:end], start, end, ID2LABEL[tag], float(probabilities[position, tag])))
    return rows


def group_by_hand(rows):
    """IOB2 grouping: a B- tag or a change of type starts an entity, I- of the same type extends it, O ends it."""
    groups = []
    previous = None
    for word, start, end, tag, score in rows:
        kind = tag.split("-", 1)[-1]
        if tag == "O":
            previous = None
            continue
        if tag.startswith("I-") and previous == kind:
            groups[-1]["words"].append(word)
            groups[-1]["end"] = end
            groups[-1]["scores"].append(score)
        else:
            groups.append({"entity_group": kind, "words": [word], "start": start, "end": end, "scores": [score]})
        previous = kind
    return [
        {
            "entity_group": group["entity_group"],
            "score": pytest.approx(sum(group["scores"]) / len(group["scores"]), rel=1e-5),
            "word": " ".join(group["words"]),
            "start": group["start"],
            "end": group["end"],
        }
        for group in groups
    ]


def test_the_elmo_pipeline_comes_by_task_name_or_by_pipeline_class(tokenizer):
    assert type(pipeline("elmo-token-classification", model=tagger(), tokenizer=tokenizer)) is (
        ElmoTokenClassificationPipeline
    )
    chosen = pipeline(
        "token-classification", model=tagger(), tokenizer=tokenizer, pipeline_class=ElmoTokenClassificationPipeline
    )
    assert type(chosen) is ElmoTokenClassificationPipeline


def test_no_aggregation_tags_every_word_with_offsets_into_the_raw_text(tokenizer):
    model = tagger()
    rows = predicted_words(model, tokenizer, TEXT)
    assert [row[0] for row in rows] == ["John", "Smith", "lives", "in", "Paris", "with", "Mary", "Ann", "Lee", "."]
    tags = {row[3] for row in rows}
    assert tags == {"O", "B-PER", "I-PER"}, "the fixture must exercise every tag"

    ner = pipeline("elmo-token-classification", model=model, tokenizer=tokenizer)
    everything = ner(TEXT, ignore_labels=[])
    assert [(e["word"], e["start"], e["end"], e["entity"], e["index"]) for e in everything] == [
        (word, start, end, tag, index) for index, (word, start, end, tag, _) in enumerate(rows, start=1)
    ]
    assert [float(e["score"]) for e in everything] == pytest.approx([row[4] for row in rows], rel=1e-5)
    for entity in everything:
        assert TEXT[entity["start"] : entity["end"]] == entity["word"]
    # By default the "O" words are left out, as in transformers.
    assert ner(TEXT) == [entity for entity in everything if entity["entity"] != "O"]


def test_simple_aggregation_groups_b_and_i_tags_as_computed_by_hand(tokenizer):
    model = tagger()
    rows = predicted_words(model, tokenizer, TEXT)
    expected = group_by_hand(rows)
    assert any(" " in group["word"] for group in expected), "the fixture must have a multi-word entity"
    ner = pipeline("elmo-token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple")
    entities = ner(TEXT)
    assert entities == expected
    for entity in entities:
        assert TEXT[entity["start"] : entity["end"]].split() == entity["word"].split()


def test_a_batch_of_texts_gives_each_text_its_own_entities(tokenizer):
    model = tagger()
    texts = [TEXT, "Ann Lee met John ."]
    ner = pipeline("elmo-token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple")
    expected = [group_by_hand(predicted_words(model, tokenizer, text)) for text in texts]
    assert ner(texts) == expected
    # batch_size=2 runs both texts through the model at once, the shorter one padded.
    assert ner(texts, batch_size=2) == expected


def test_pre_split_words_get_offsets_into_the_words_joined_by_spaces(tokenizer):
    model = tagger()
    words = TEXT.replace("  ", " ").replace(".", " .").split()
    ner = pipeline("elmo-token-classification", model=model, tokenizer=tokenizer)
    (entities,) = ner(words, is_split_into_words=True, ignore_labels=[])
    joined = " ".join(words)
    assert [entity["word"] for entity in entities] == words
    assert [joined[entity["start"] : entity["end"]] for entity in entities] == words


def test_crf_head_tags_by_viterbi_not_by_argmax(tokenizer):
    model = tagger(use_crf=True)
    with torch.no_grad():
        model.crf.transitions[1, 1] = -1e4  # B-PER can never follow B-PER
    argmax_tags = [row[3] for row in predicted_words(model, tokenizer, TEXT)]
    assert ("B-PER", "B-PER") in set(zip(argmax_tags, argmax_tags[1:])), "the fixture must break the rule"

    encoding = tokenizer(TEXT, return_special_tokens_mask=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(input_ids=encoding["input_ids"]).logits
    viterbi = [ID2LABEL[tag] for tag in model.decode(logits, encoding["special_tokens_mask"] == 0)[0]]
    ner = pipeline("elmo-token-classification", model=model, tokenizer=tokenizer)
    entities = ner(TEXT, ignore_labels=[])
    assert [entity["entity"] for entity in entities] == viterbi
    batched = ner([TEXT, "Ann Lee met John ."], batch_size=2, ignore_labels=[])[0]
    assert [entity["entity"] for entity in batched] == viterbi
    assert ("B-PER", "B-PER") not in set(zip(viterbi, viterbi[1:]))
    probabilities = logits.softmax(-1)[0]
    assert [float(entity["score"]) for entity in entities] == pytest.approx(
        [float(probabilities[entity["index"], LABEL2ID[entity["entity"]]]) for entity in entities], rel=1e-5
    )


def test_sub_word_strategies_are_refused_as_for_any_slow_tokenizer(tokenizer):
    ner = pipeline("elmo-token-classification", model=tagger(), tokenizer=tokenizer)
    with pytest.raises(ValueError, match="Slow tokenizers cannot handle subwords"):
        ner(TEXT, aggregation_strategy="first")


def tiny_bert_tagger():
    """A BERT tagger and a word-level fast tokenizer, built locally (no network)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForTokenClassification, PreTrainedTokenizerFast

    vocab = {word: index for index, word in enumerate(["[UNK]", "[PAD]", "john", "lives", "in", "paris", "."])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
        num_labels=3,
        id2label=ID2LABEL,
    )
    return BertForTokenClassification(config).eval(), fast


def test_importing_elmo_hf_leaves_the_stock_token_classification_task_alone():
    import elmo_hf  # noqa: F401  (imported at the top already; here to state the test's premise)

    bert, fast = tiny_bert_tagger()
    for task in ("token-classification", "ner"):
        assert type(pipeline(task, model=bert, tokenizer=fast)) is TokenClassificationPipeline


def test_other_tokenizers_get_the_stock_pipeline_behaviour():
    bert, fast = tiny_bert_tagger()
    text = "john lives in paris ."
    ours = pipeline("elmo-token-classification", model=bert, tokenizer=fast, aggregation_strategy="simple")
    stock = TokenClassificationPipeline(model=bert, tokenizer=fast, aggregation_strategy="simple")
    assert type(ours) is ElmoTokenClassificationPipeline
    assert ours(text, ignore_labels=[]) == stock(text, ignore_labels=[])
