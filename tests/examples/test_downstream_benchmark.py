"""examples/downstream_benchmark.py end to end on a tiny slice: archives laid out as the decomp wheel and the
vaderSentiment sdist (built here, so nothing is fetched), a tiny biLM, every row, seed and probe, results.json."""

import io
import json
import shutil
import sys
import tarfile
import types
import zipfile

import pytest
import torch
from helpers import FIXED_TRAINED_MODEL, int8_lowest_cosine, load_script, tiny_config, tiny_model

from elmo_hf import DEFAULT_MODEL, ElmoModel, ElmoTokenizer

downstream_benchmark = load_script("downstream_benchmark")

TAGGED = [  # (words, upos): word identity decides the tag, so a head can learn it
    (["The", "dog", "runs", "."], ["DET", "NOUN", "VERB", "PUNCT"]),
    (["A", "cat", "sleeps", "."], ["DET", "NOUN", "VERB", "PUNCT"]),
    (["Dogs", "run"], ["NOUN", "VERB"]),
]


def ewt_graph(name, words, tags):
    nodes = [
        {"domain": "syntax", "type": "token", "position": position, "form": word, "upos": tag}
        for position, (word, tag) in reversed(list(enumerate(zip(words, tags), start=1)))
    ]
    nodes.append({"domain": "semantics", "type": "predicate", "form": "ignored"})
    return {"nodes": nodes, "graph": [["name", name]]}


def write_decomp_wheel(path, sentences_per_split=6):
    with zipfile.ZipFile(path, "w") as wheel:
        for split in ("train", "dev", "test"):
            graphs = {}
            for index in range(sentences_per_split):
                words, tags = TAGGED[index % len(TAGGED)]
                graphs[f"ewt-{split}-{index + 1}"] = ewt_graph(f"ewt-{split}-{index + 1}", words, tags)
            member = downstream_benchmark.EWT_MEMBER.format(split=split)
            wheel.writestr(member, json.dumps({"metadata": {}, "data": graphs}))


def write_vader_sdist(path, snippets=40):
    lines = []
    for index in range(snippets):
        score = [2.5, -1.75, 0.0, 3.0][index % 4]
        text = "A wonderful , moving film ." if score > 0 else "Dull and tedious ." if score < 0 else "A film ."
        lines.append(f"{index + 1}\t{score}\t{text}")
    snippets_file = io.BytesIO()
    with tarfile.open(fileobj=snippets_file, mode="w:gz") as inner:
        data = "\r\n".join(lines).encode("utf-8")
        info = tarfile.TarInfo("hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt")
        info.size = len(data)
        inner.addfile(info, io.BytesIO(data))
    with tarfile.open(path, "w:gz") as outer:
        info = tarfile.TarInfo("vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz")
        info.size = len(snippets_file.getvalue())
        outer.addfile(info, io.BytesIO(snippets_file.getvalue()))


@pytest.fixture
def data_dir(tmp_path):
    directory = tmp_path / "data"
    directory.mkdir()
    write_decomp_wheel(directory / "decomp-0.3.2-py3-none-any.whl")
    write_vader_sdist(directory / "vaderSentiment-3.3.2.tar.gz")
    return directory


def test_readers_take_the_syntax_tokens_in_order_and_label_snippets_by_sign(data_dir):
    splits = downstream_benchmark.load_ewt(data_dir / "decomp-0.3.2-py3-none-any.whl")
    assert [len(splits[split]) for split in ("train", "dev", "test")] == [6, 6, 6]
    assert splits["train"][0] == TAGGED[0]  # positions sorted, the semantics node left out
    assert splits["dev"][2] == TAGGED[2]
    reviews = downstream_benchmark.load_movie_reviews(data_dir / "vaderSentiment-3.3.2.tar.gz")
    examples = [example for split in ("train", "dev", "test") for example in reviews[split]]
    assert [len(reviews[split]) for split in ("train", "dev", "test")] == [24, 3, 3]  # 30 non-zero scores, 80/10/10
    assert sorted(examples) == sorted([("A wonderful , moving film .", 1)] * 20 + [("Dull and tedious .", 0)] * 10)
    assert downstream_benchmark.load_movie_reviews(data_dir / "vaderSentiment-3.3.2.tar.gz") == reviews  # seeded


def test_precomputed_layers_equal_the_biLM_run_on_each_sentence_alone():
    model = tiny_model().eval()
    tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    sentences = [words for words, _ in TAGGED]
    layers = downstream_benchmark.bilm_layers(model, tokenizer, sentences, 2, "test")
    for words, states in zip(sentences, layers):
        with torch.no_grad():
            batch = tokenizer([words], is_split_into_words=True, return_tensors="pt")
            alone = model(**batch, output_hidden_states=True)
        assert states.shape == (3, len(words) + 2, 2 * model.config.projection_dim)
        # numpy.allclose semantics: a padded batch blocks the GEMMs differently from one sentence, which on
        # some CPUs moves a float32 value of about 1 by one or two ulps.
        torch.testing.assert_close(states, torch.stack(alone.hidden_states, dim=1)[0], rtol=1e-5, atol=1e-6)


def test_rows_mix_the_layers_they_name():
    assert downstream_benchmark.row_config("baseline", 3)["scalar_mix_initial_weights"][0] == 0.0
    for row, layer in (("baseline", 0), ("top", 2)):
        weights = torch.tensor(downstream_benchmark.row_config(row, 3)["scalar_mix_initial_weights"])
        assert torch.equal(torch.softmax(weights, dim=0), torch.eye(3)[layer])  # exactly one layer, frozen
        assert downstream_benchmark.row_config(row, 3)["scalar_mix_trainable"] is False
    assert downstream_benchmark.row_config("input_output", 3) == {"use_output_elmo": True}


def test_a_row_reports_the_test_accuracy_of_its_epoch_best_on_dev(monkeypatch):
    scores = iter([0.50, 0.90, 0.70, 0.60, 0.60])  # dev, test / dev, test / dev: test only for a better dev
    monkeypatch.setattr(downstream_benchmark, "accuracy", lambda model, dataset, batch_size: next(scores))
    mix = types.SimpleNamespace(normalized_weights=torch.tensor([0.2, 0.3, 0.5]))
    model = types.SimpleNamespace(task_encoder=types.SimpleNamespace(input_mix=mix), train=lambda: None)
    callback = downstream_benchmark.BestEpochOnDev({"dev": None, "test": None}, 8)
    for epoch in (1, 2, 3):
        mix.normalized_weights = torch.tensor([0.2, 0.3, 0.5]) * epoch
        callback.on_epoch_end(None, types.SimpleNamespace(epoch=float(epoch)), None, model=model)
    assert callback.best == {"dev": 0.70, "test": 0.60, "epoch": 2, "layer_weights": pytest.approx([0.4, 0.6, 1.0])}
    scores = iter([0.50, 0.90, 0.70, 0.60, 0.60, 0.99])  # (dev, test) after each epoch
    last = downstream_benchmark.BestEpochOnDev({"dev": None, "test": None}, 8, last=True)
    for epoch in (1, 2, 3):
        last.on_epoch_end(None, types.SimpleNamespace(epoch=float(epoch)), None, model=model)
    assert (last.best["dev"], last.best["test"], last.best["epoch"]) == (0.60, 0.99, 3)  # --no-epoch-on-dev


def test_with_weight_averaging_each_epoch_is_scored_on_the_average(monkeypatch):
    model = types.SimpleNamespace(task_encoder=types.SimpleNamespace(input_mix=None), train=lambda: None, weights="raw")
    averaging = types.SimpleNamespace(put_average_in_model=lambda: setattr(model, "weights", "average"))
    seen = []
    monkeypatch.setattr(
        downstream_benchmark, "accuracy", lambda model, dataset, size: seen.append(model.weights) or 0.5
    )
    callback = downstream_benchmark.BestEpochOnDev({"dev": None, "test": None}, 8, weight_averaging=averaging)
    callback.on_epoch_end(None, types.SimpleNamespace(epoch=1.0), None, model=model)
    assert seen == ["average", "average"]  # dev and test
    assert downstream_benchmark.parse_arguments(["--model", "m", "--output-dir", "o"]).weight_average_decay == 0.0


def test_the_script_runs_end_to_end_and_writes_its_table(data_dir, tmp_path, capsys, one_thread, monkeypatch):
    model_dir = tmp_path / "bilm"
    model = tiny_model()
    model.save_pretrained(model_dir)
    ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token).save_pretrained(model_dir)
    results = downstream_benchmark.main(
        [
            "--model",
            str(model_dir),
            "--output-dir",
            str(tmp_path / "out"),
            "--data-dir",
            str(data_dir),
            "--seeds",
            "0",
            "1",
            "--pos-epochs",
            "2",
            "--sentiment-epochs",
            "2",
            "--probe-epochs",
            "2",
            "--task-hidden-size",
            "8",
            "--max-examples",
            "20",
            "--fractions",
            "0.5",
            "--rows",
            *downstream_benchmark.ROWS,
            "--min-updates",
            "0",
        ]
    )
    assert json.loads((tmp_path / "out" / "results.json").read_text()) == json.loads(json.dumps(results))
    for task in ("pos", "sentiment"):
        rows = results["tasks"][task]["rows"]
        assert set(rows) == set(downstream_benchmark.ROWS)
        for figures in rows.values():
            assert len(figures["test"]["seeds"]) == 2 and all(0.0 <= value <= 1.0 for value in figures["test"]["seeds"])
            assert all(epoch in (1, 2) for epoch in figures["epochs"])  # the epoch best on dev, of 2
    assert results["tasks"]["pos"]["labels"] == ["DET", "NOUN", "PUNCT", "VERB"]
    assert len(results["tasks"]["pos"]["probes"]) == 3
    for task in ("pos", "sentiment"):  # the scikit-learn baseline printed beside the rows
        assert 0.0 <= results["tasks"][task]["scikit_learn_baseline"]["test"] <= 1.0
        assert results["tasks"][task]["rows"]["without_elmo"]["layer_weights"] == [None, None]
        assert [sum(weights) for weights in results["tasks"][task]["rows"]["all"]["layer_weights"]] == [
            pytest.approx(1.0)
        ] * 2
    half = results["tasks"]["pos"]["fractions"]["0.5"]  # sample efficiency: every row, and the tagger
    assert set(half) == {*downstream_benchmark.ROWS, "scikit_learn_baseline"}
    assert len(half["scikit_learn_baseline"]["test"]["seeds"]) == 2
    table = capsys.readouterr().out
    assert "| pos (test accuracy, %) |" in table and "| sentiment (test accuracy, %) |" in table
    assert "(bag-of-words logistic regression) |" in table and "(feature-based logistic-regression tagger) |" in table
    assert "| 50% |" in table and "| learned layer weights" in table
    assert table.rstrip().endswith(" 1 thread")  # the run's time, on one thread (the fixture's)
    for task in ("pos", "sentiment"):  # ELMo's gain seed by seed, saved and printed
        rows, gain = results["tasks"][task]["rows"], results["tasks"][task]["elmo_gain"]["test"]
        assert gain["seeds"] == pytest.approx(
            [b - a for a, b in zip(rows["without_elmo"]["test"]["seeds"], rows["all"]["test"]["seeds"])]
        )
        assert f"| {task} | test | {100 * gain['mean']:+.2f} | " in table
    assert (tmp_path / "out" / "layer_weights.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Only a share of the tags, given at least 4 updates: 3 sentences are one batch, so 4 epochs instead of 2; with a
    # two-layer task biLSTM, which every head built must have.
    built_heads = []
    head_class = downstream_benchmark.ElmoForTokenClassification

    def build_and_keep(config):
        built_heads.append(head_class(config))
        return built_heads[-1]

    monkeypatch.setattr(downstream_benchmark, "ElmoForTokenClassification", build_and_keep)
    common = ["--model", str(model_dir), "--data-dir", str(data_dir), "--task-hidden-size", "8", "--seeds", "0"]
    small = downstream_benchmark.main(
        [*common, "--output-dir", str(tmp_path / "small"), "--tasks", "pos", "--pos-epochs", "2", "--no-epoch-on-dev"]
        + ["--fractions", "0.5", "--fractions-only", "--min-updates", "4", "--probe-epochs", "1", "--task-layers", "2"]
    )
    assert small["tasks"]["pos"]["rows"] == {} and small["tasks"]["pos"]["fractions"]["0.5"]["all"]["epochs"] == [4]
    assert len(built_heads) == 3  # the rows without ELMo, with the token layer, with ELMo
    assert {(head.task_encoder.lstm.num_layers, head.task_encoder.lstm.hidden_size) for head in built_heads} == {(2, 8)}
    table = capsys.readouterr().out
    assert "| 50% |" in table and "| task (metric)" not in table  # no empty table of the rows on all the data


@pytest.mark.parametrize("task", ["sentiment", "pos"])
def test_the_task_input_study_runs_and_appends_its_line(data_dir, tmp_path, task, one_thread):
    task_input_study = load_script("task_input_study")  # it imports downstream_benchmark, loaded above

    output = tmp_path / "study.jsonl"
    common = ["--task", task, "--data-dir", str(data_dir), "--output", str(output)]
    result = task_input_study.main(
        [
            *common,
            "--variant",
            '{"epochs": 2, "fraction": 0.5, "use_input_elmo": false}',
            "--seeds",
            "0",
            "1",
            "--cache",
            str(tmp_path / "layers.pt"),
        ]
    )
    assert len(result["test"]) == 2 and all(0.0 <= value <= 1.0 for value in result["test"])
    assert (tmp_path / "layers.pt").exists()
    baseline = task_input_study.main([*common, "--baseline"])
    assert 0.0 <= baseline["test"] <= 1.0
    sampled = task_input_study.main([*common, "--baseline", "--variant", '{"fraction": 0.5}', "--seeds", "0", "1"])
    assert sampled["fraction"] == 0.5 and len(sampled["test"]) == 2
    assert all(0.0 <= value <= 1.0 for value in sampled["test"])
    assert [json.loads(line) for line in output.read_text().splitlines()] == [result, baseline, sampled]


def test_the_task_input_study_writes_the_task_text_and_reads_another_biLM(data_dir, tmp_path, one_thread, monkeypatch):
    """--write-text gives run_bilm_pretraining.py the task's own sentences; --bilm then takes the biLM it trains (here
    a copy of the default model) for the layers, the task words and the record."""
    task_input_study = load_script("task_input_study")
    counts = task_input_study.main(["--task", "pos", "--data-dir", str(data_dir), "--write-text", str(tmp_path / "t")])
    assert counts == {"train": 6, "dev": 6}
    lines = (tmp_path / "t" / "train.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0].split() == TAGGED[0][0] and len(lines) == 6
    bilm = tmp_path / "adapted"
    shutil.copytree(DEFAULT_MODEL, bilm)
    loaded = []
    from_pretrained = ElmoModel.from_pretrained.__func__
    monkeypatch.setattr(
        ElmoModel,
        "from_pretrained",
        classmethod(lambda cls, path, **kw: loaded.append(path) or from_pretrained(cls, path, **kw)),
    )
    result = task_input_study.main(
        ["--task", "pos", "--data-dir", str(data_dir), "--bilm", str(bilm), "--variant", '{"epochs": 1}']
    )
    assert result["bilm"] == str(bilm) and loaded == [str(bilm)]
    assert 0.0 <= result["test"][0] <= 1.0


def test_the_task_input_study_linear_probe(data_dir, tmp_path, one_thread):
    """--linear-probe: a logistic regression on the cached layers' pooled features, C chosen on dev; sentences only."""
    task_input_study = load_script("task_input_study")
    common = ["--task", "sentiment", "--data-dir", str(data_dir), "--cache", str(tmp_path / "layers.pt")]
    result = task_input_study.main([*common, "--linear-probe"])
    # The fake reviews are two sentences repeated ("wonderful" 1, "dull" 0): the layers separate them exactly.
    assert result["dev"] == result["test"] == 1.0 and result["C"] in (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
    with pytest.raises(SystemExit):
        task_input_study.main(["--task", "pos", "--data-dir", str(data_dir), "--linear-probe"])


def test_the_task_input_study_fine_tunes_the_pretrained_biLM_at_its_own_learning_rate(
    data_dir, tmp_path, one_thread, monkeypatch
):
    task_input_study = load_script("task_input_study")
    optimizers = []

    class RecordedAdamW(torch.optim.AdamW):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            optimizers.append(self)

    monkeypatch.setattr(torch.optim, "AdamW", RecordedAdamW)
    variant = '{"epochs": 1, "freeze_bilm": false, "bilm_lr": 1e-3, "use_input_elmo": true}'
    cache = tmp_path / "layers.pt"
    result = task_input_study.main(
        ["--task", "pos", "--data-dir", str(data_dir), "--variant", variant, "--cache", str(cache)]
    )
    assert 0.0 <= result["test"][0] <= 1.0
    assert not cache.exists()  # the biLM ran inside the loop, nothing was precomputed
    head, bilm = optimizers[0].param_groups
    assert (head["lr"], bilm["lr"]) == (5e-3, 1e-3)
    pretrained = ElmoModel.from_pretrained(DEFAULT_MODEL)
    changes = [
        (trained.detach() - start).abs().max().item() for trained, start in zip(bilm["params"], pretrained.parameters())
    ]
    assert len(changes) == len(list(pretrained.parameters()))
    # One AdamW step of lr 1e-3 (6 training sentences, one batch) from the pretrained weights, not from a random start.
    assert 0.0 < max(changes) <= 1.1e-3


def test_the_task_input_study_starts_task_words_from_a_word_vectors_file(data_dir, tmp_path, one_thread, monkeypatch):
    task_input_study = load_script("task_input_study")
    vectors_file = tmp_path / "vectors.txt"
    vectors_file.write_text("the 1 2 3 4\ndog 0.5 0.5 0.5 0.5\nunseen 9 9 9 9\n", encoding="utf-8")
    started = []

    def recorded(model, **kwargs):
        message = initialise(model, **kwargs)
        task_words = model.task_encoder.task_words
        started.append((message, task_words.embedding.weight.detach().clone(), task_words.word_rows))
        return message

    initialise = task_input_study.initialise_task_words
    monkeypatch.setattr(task_input_study, "initialise_task_words", recorded)
    variant = {"epochs": 1, "min_count": 1, "use_input_elmo": False, "word_vectors": str(vectors_file)}
    task_input_study.main(["--task", "pos", "--data-dir", str(data_dir), "--variant", json.dumps(variant)])
    message, weight, rows = started[0]
    assert message.endswith(f"from {vectors_file}") and message.startswith("task words: 2 of ")
    assert weight.shape[1] == 4 and "unseen" not in rows  # the vocabulary is the training words
    assert weight[rows["the"]].tolist() == [1.0, 2.0, 3.0, 4.0] and weight[rows["dog"]].tolist() == [0.5] * 4
    # pretrained_vocab: a word never seen in training keeps its vector instead of becoming the unknown word
    variant["pretrained_vocab"] = True
    task_input_study.main(["--task", "pos", "--data-dir", str(data_dir), "--variant", json.dumps(variant)])
    message, weight, rows = started[1]
    assert message.startswith("task words: 3 of ") and weight[rows["unseen"]].tolist() == [9.0] * 4


def test_the_faster_modes_train_the_same_head_on_their_own_layers(data_dir, tmp_path, one_thread):
    load_script("task_input_study")  # imported by precision_downstream, as its own script folder would provide
    precision_downstream = load_script("precision_downstream")
    work_dir = tmp_path / "modes"
    arguments = ["--task", "pos", "--data-dir", str(data_dir), "--work-dir", str(work_dir)]
    arguments += ["--model", str(FIXED_TRAINED_MODEL)]  # the modes' bounds below hold on it, whatever the default
    arguments += ["--variant", '{"epochs": 1}']
    rows = precision_downstream.main([*arguments, "--modes", "float32", "bfloat16", "int8"])
    assert list(rows) == ["float32", "bfloat16", "int8"]
    assert sorted(path.name for path in work_dir.iterdir()) == ["pos-bfloat16.pt", "pos-float32.pt", "pos-int8.pt"]
    assert rows["float32"]["largest_difference"] == 0.0
    for mode in ("bfloat16", "int8"):  # their layers differ from float32's, within the modes' documented bounds
        lowest = 0.999 if mode == "bfloat16" else int8_lowest_cosine("downstream")
        assert 0.0 < rows[mode]["largest_difference"] < 0.1 and rows[mode]["lowest_cosine"] > lowest
        assert 0.0 <= rows[mode]["test"][0] <= 1.0
    with pytest.raises(ValueError, match="^--modes int8: float32 is the reference and must be among them$"):
        precision_downstream.main([*arguments, "--modes", "int8"])
    # --served: the float32-trained head scored on bfloat16's layers (the caches above are reused)
    served = precision_downstream.main([*arguments, "--modes", "float32", "bfloat16", "--served"])
    assert list(served) == ["float32", "bfloat16", "bfloat16, float32-trained head"]
    assert served["bfloat16, float32-trained head"]["score_cache"] == str(work_dir / "pos-bfloat16.pt")
    # scored on float32's own layers through --score-cache, the same head gives the float32 row exactly
    study = sys.modules["task_input_study"]
    float32_cache = str(work_dir / "pos-float32.pt")
    variant = json.dumps({**precision_downstream.RECIPE, "epochs": 1})
    same = study.main(
        ["--task", "pos", "--data-dir", str(data_dir), "--cache", float32_cache, "--score-cache", float32_cache]
        + ["--variant", variant]
    )
    assert (same["dev"], same["test"]) == (rows["float32"]["dev"], rows["float32"]["test"])
    # the noise control: float32's layers plus noise the size of bfloat16's deviation, layer by layer
    controlled = precision_downstream.main([*arguments, "--modes", "float32", "bfloat16", "noise"])
    exact, rounded = (torch.load(work_dir / f"pos-{mode}.pt") for mode in ("float32", "bfloat16"))
    noisy = torch.load(work_dir / "pos-noise.pt")
    for layer in range(exact["train"][0].shape[0]):
        rounding = torch.cat([(r[layer] - e[layer]).flatten() for e, r in zip(exact["train"], rounded["train"])])
        noise = torch.cat([(n[layer] - e[layer]).flatten() for e, n in zip(exact["train"], noisy["train"])])
        assert 0.5 < float(noise.std() / rounding.std()) < 2.0
    assert 0.0 < controlled["noise"]["largest_difference"] < 1.0
    with pytest.raises(ValueError, match="^--modes: noise takes the size of bfloat16's deviation"):
        precision_downstream.main([*arguments, "--modes", "float32", "noise"])


def test_a_crf_head_is_scored_by_its_viterbi_tags_not_by_the_argmax_of_its_emissions():
    torch.manual_seed(0)
    config = tiny_config(num_labels=3, use_crf=True, task_encoder_hidden_size=4, use_bilm_token_layer=True)
    head = downstream_benchmark.ElmoForTokenClassification(config).eval()
    with torch.no_grad():
        head.crf.transitions.fill_(-50.0)
        head.crf.transitions[:, 1] = 50.0  # every tag after the first is 1, whatever the emissions say
    layers = [torch.randn(3, words + 2, 2 * config.projection_dim) for words in (4, 2, 3)]
    char_ids = [torch.randint(1, 200, (words + 2, config.max_characters_per_token)) for words in (4, 2, 3)]
    labels = [torch.tensor([-100, *torch.randint(0, 3, (words,)).tolist(), -100]) for words in (4, 2, 3)]
    dataset = downstream_benchmark.LayersDataset(layers, char_ids, labels)
    (predictions, gold), *_ = downstream_benchmark.batch_predictions(head, dataset, batch_size=3)
    scored = gold != -100
    assert (predictions[~scored] == -1).all()
    batch = downstream_benchmark.collate([dataset[index] for index in range(3)])
    batch.pop("labels")
    with torch.no_grad():
        logits = head(**batch).logits
    viterbi = head.decode(logits, scored)
    assert [row[scored[index]].tolist() for index, row in enumerate(predictions)] == viterbi
    assert all(tags[1:] == [1] * (len(tags) - 1) for tags in viterbi)
    assert not torch.equal(predictions[scored], logits.argmax(-1)[scored])  # the argmax would score otherwise


def test_the_mix_and_crf_options_reach_every_head(data_dir, tmp_path, one_thread, monkeypatch):
    model_dir = tmp_path / "bilm"
    model = tiny_model()
    model.save_pretrained(model_dir)
    ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token).save_pretrained(model_dir)
    built_heads = []
    for name in ("ElmoForTokenClassification", "ElmoForSequenceClassification"):
        head_class = getattr(downstream_benchmark, name)
        monkeypatch.setattr(
            downstream_benchmark,
            name,
            lambda config, head_class=head_class: built_heads.append(head_class(config)) or built_heads[-1],
        )
    downstream_benchmark.main(
        ["--model", str(model_dir), "--data-dir", str(data_dir), "--output-dir", str(tmp_path / "out")]
        + ["--seeds", "0", "--rows", "all", "--max-examples", "6", "--task-hidden-size", "4", "--min-updates", "0"]
        + ["--pos-epochs", "1", "--sentiment-epochs", "1", "--probe-epochs", "1"]
        + ["--layer-norm", "--mix-l2-coef", "0.25", "--crf"]
    )
    tagger, classifier = built_heads
    for head in built_heads:
        assert head.task_encoder.input_mix.do_layer_norm and head.task_encoder.input_mix.l2_coef == 0.25
    assert tagger.crf is not None and not hasattr(classifier, "crf")  # a CRF for tags only
