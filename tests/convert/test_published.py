"""`elmo-hf convert --published NAME`: the published files fetched from a loopback HTTP server (allennlp's tiny
fixture pair under the published paths), a resumed download, a truncated one, and the names."""

import json

import pytest
from hub_server import FileServer
from huggingface_hub import hf_hub_download

from elmo_hf import ElmoModel
from elmo_hf.cli import main
from elmo_hf.convert.published import BASE_URL_VARIABLE, download, published_model


def run_convert(arguments, capsys):
    """Run `elmo-hf convert ARGUMENTS`; returns (exit status, stderr)."""
    try:
        main(["convert", *arguments])
        status = 0
    except SystemExit as stop:
        status = stop.code
    return status, capsys.readouterr().err


def test_complete_download_converts_and_pushes(published_server, loopback_hub, tmp_path, capsys):
    output, downloads = tmp_path / "elmo-pubmed", tmp_path / "downloads"
    status, err = run_convert(
        ["--published", "pubmed", "--output-dir", str(output), "--download-dir", str(downloads)]
        + ["--push-to-hub", "elmo-org/elmo-pubmed"],
        capsys,
    )
    assert status == 0, err
    assert "saved to" in err and "pushed to elmo-org/elmo-pubmed" in err
    model = published_model("pubmed")
    assert [(path, range_header) for path, range_header, _ in published_server.requests] == [
        (f"/elmo/{model.options_path}", None),
        (f"/elmo/{model.weights_path}", None),
    ]
    weights_file = downloads / "pubmed" / "elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5"
    assert weights_file.read_bytes() == published_server.weights
    assert not list(downloads.rglob("*.part"))
    report = json.loads((output / "conversion_report.json").read_text())
    assert report["source_weights"] == weights_file.name and report["datasets_converted"] == 33
    config = ElmoModel.from_pretrained(output).config  # the fixture's options: LSTM 64, projection 16, 2 layers
    assert (config.lstm_dim, config.projection_dim, config.num_lstm_layers) == (64, 16, 2)
    card = open(hf_hub_download("elmo-org/elmo-pubmed", "README.md"), encoding="utf-8").read()
    assert "PubMed" in card

    # A second run finds the complete files and asks for nothing.
    status, err = run_convert(
        ["--published", "pubmed", "--output-dir", str(tmp_path / "again"), "--download-dir", str(downloads)], capsys
    )
    assert status == 0, err
    assert len(published_server.requests) == 2


def test_broken_download_is_refused_then_resumed(published_server, tmp_path, capsys):
    model = published_model("small")
    weights_path = f"/elmo/{model.weights_path}"
    total = len(published_server.weights)
    published_server.cut_after[weights_path] = 10_000
    downloads = tmp_path / "downloads"
    arguments = ["--published", "small", "--output-dir", str(tmp_path / "out"), "--download-dir", str(downloads)]

    status, err = run_convert(arguments, capsys)
    assert status == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {published_server.url}/{model.weights_path}: ")
    assert f"download truncated: 10000 of {total} bytes arrived; run the same command again to resume" in err
    partial = downloads / "small" / "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5.part"
    assert partial.stat().st_size == 10_000
    assert not (tmp_path / "out").exists()

    status, err = run_convert(arguments, capsys)
    assert status == 0, err
    # The second run asked for the rest only, and got exactly the missing bytes.
    assert published_server.requests[-1] == (weights_path, "bytes=10000-", total - 10_000)
    assert (downloads / "small" / partial.name.removesuffix(".part")).read_bytes() == published_server.weights
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_left_over_partial_file_is_continued(published_server, tmp_path):
    url = f"{published_server.url}/{published_model('original').weights_path}"
    destination = tmp_path / "weights.hdf5"
    (tmp_path / "weights.hdf5.part").write_bytes(published_server.weights[:12345])
    download(url, str(destination), progress=False)
    assert published_server.requests == [
        (f"/elmo/{published_model('original').weights_path}", "bytes=12345-", len(published_server.weights) - 12345)
    ]
    assert destination.read_bytes() == published_server.weights


def test_short_file_that_the_server_calls_complete_is_refused(
    fixtures_dir, monkeypatch, loopback_only, tmp_path, capsys
):
    """A weights file cut short at its source (Content-Length agrees with it) fails the converter's check."""
    model = published_model("portuguese-brwac")
    weights = (fixtures_dir / "allennlp_elmo" / "lm_weights.hdf5").read_bytes()
    options = (fixtures_dir / "allennlp_elmo" / "options.json").read_bytes()
    files = {f"/elmo/{model.options_path}": options, f"/elmo/{model.weights_path}": weights[: len(weights) // 2]}
    with FileServer(files) as server:
        monkeypatch.setenv(BASE_URL_VARIABLE, server.url)
        with pytest.raises(SystemExit) as stop:
            main(
                ["convert", "--published", model.name, "--output-dir", str(tmp_path / "out")]
                + ["--download-dir", str(tmp_path / "downloads")]
            )
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {tmp_path / 'downloads' / model.name / 'elmo_pt_weights_dgx1.hdf5'}: not a readable")
    assert not (tmp_path / "out").exists()


def test_unknown_name_lists_the_known_ones(capsys):
    status, err = run_convert(["--published", "large"], capsys)
    assert status == 2
    assert err == (
        "error: --published: unknown model 'large'; known: small, medium, original, original-5.5b, pubmed, "
        "portuguese-wikipedia, portuguese-brwac\n"
    )


def test_published_excludes_local_files(capsys):
    status, err = run_convert(["--published", "small", "--options", "options.json"], capsys)
    assert (status, err) == (
        2,
        "error: --options: does not apply to --published (the published files are downloaded)\n",
    )
    status, err = run_convert(["--weights", "w.hdf5", "--output-dir", "out"], capsys)
    assert (status, err) == (2, "error: --options: required with --weights or --tf-checkpoint\n")


def test_published_addresses(monkeypatch):
    monkeypatch.delenv(BASE_URL_VARIABLE, raising=False)
    small = published_model("small")
    assert small.urls() == (
        "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x1024_128_2048cnn_1xhighway/"
        "elmo_2x1024_128_2048cnn_1xhighway_options.json",
        "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x1024_128_2048cnn_1xhighway/"
        "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5",
    )
    assert small.urls("http://mirror/elmo/")[1] == (
        "http://mirror/elmo/2x1024_128_2048cnn_1xhighway/elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5"
    )
