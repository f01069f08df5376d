"""The published ELMo weights by name: where each pair of files lives, downloading it, and converting it.

    elmo-hf convert --published original --output-dir elmo-original [--push-to-hub ORG/elmo-original]

`PUBLISHED_MODELS` lists the bilm-tf weights that allennlp published (the four English sizes of Peters et al.,
2018, and the contributed PubMed and Portuguese models), each an options.json and a weights .hdf5 under
`PUBLISHED_BASE_URL`. The environment variable ELMO_HF_PUBLISHED_BASE_URL (or the `base_url` argument) replaces
that address, for a mirror or a test server.

`download` streams a file to `<name>.part` beside its destination with a progress bar, and renames it only once
every byte the server announced has arrived. A broken download leaves its `.part`; the next run asks the server for
the rest (an HTTP Range request) and continues the file instead of starting again. What arrives is then checked by
the converter, which reads the options, checks every weight's shape against them and compares the converted model
with bilm-tf's arithmetic before anything is saved (`convert_bilm_tf.convert_hdf5`).
"""

import http.client
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..user_errors import UnwritableOutputError, UserInputError

PUBLISHED_BASE_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
BASE_URL_VARIABLE = "ELMO_HF_PUBLISHED_BASE_URL"
CHUNK_BYTES = 1 << 20

ONE_BILLION_WORDS = (
    "The 1 Billion Word Language Model Benchmark (Chelba et al., 2013), about 800 million tokens of news text."
)


@dataclass(frozen=True)
class PublishedModel:
    name: str  # the name `--published` takes
    options_path: str  # the options.json, relative to the base address
    weights_path: str  # the weights .hdf5, relative to the base address
    repo_name: str  # the checkpoint folder's (and Hub repo's) name
    training_data: str  # for the model card
    datasets: tuple[str, ...] = ()  # Hub dataset ids for the card's metadata

    def urls(self, base_url: str | None = None) -> tuple[str, str]:
        """(options URL, weights URL) under `base_url`, else ELMO_HF_PUBLISHED_BASE_URL, else the published one."""
        base = (base_url or os.environ.get(BASE_URL_VARIABLE) or PUBLISHED_BASE_URL).rstrip("/")
        return f"{base}/{self.options_path}", f"{base}/{self.weights_path}"

    def files(self, input_dir: str | os.PathLike[str]) -> tuple[str, str]:
        """(options path, weights path) of this model's files under their published names in `input_dir`."""
        folder = os.fspath(input_dir)
        return os.path.join(folder, os.path.basename(self.options_path)), os.path.join(
            folder, os.path.basename(self.weights_path)
        )


def _english(
    name: str,
    stem: str,
    repo_name: str,
    training_data: str = ONE_BILLION_WORDS,
    datasets: tuple[str, ...] = ("lm1b",),
) -> PublishedModel:
    return PublishedModel(
        name, f"{stem}/elmo_{stem}_options.json", f"{stem}/elmo_{stem}_weights.hdf5", repo_name, training_data, datasets
    )


PUBLISHED_MODELS = (
    _english("small", "2x1024_128_2048cnn_1xhighway", "elmo-small"),
    _english("medium", "2x2048_256_2048cnn_1xhighway", "elmo-medium"),
    _english("original", "2x4096_512_2048cnn_2xhighway", "elmo-original"),
    _english(
        "original-5.5b",
        "2x4096_512_2048cnn_2xhighway_5.5B",
        "elmo-original-5.5b",
        "5.5 billion tokens: Wikipedia (1.9 billion) and the monolingual news crawl data of WMT 2008-2012 "
        "(3.6 billion).",
        (),
    ),
    PublishedModel(
        "pubmed",
        "contributed/pubmed/elmo_2x4096_512_2048cnn_2xhighway_options.json",
        "contributed/pubmed/elmo_2x4096_512_2048cnn_2xhighway_weights_PubMed_only.hdf5",
        "elmo-pubmed",
        "PubMed abstracts (biomedical text); a model contributed to allennlp.",
    ),
    PublishedModel(
        "portuguese-wikipedia",
        "contributed/pt/wikipedia/options.json",
        "contributed/pt/wikipedia/elmo_pt_weights.hdf5",
        "elmo-portuguese-wikipedia",
        "Portuguese Wikipedia; a model contributed to allennlp.",
    ),
    PublishedModel(
        "portuguese-brwac",
        "contributed/pt/brwac/options.json",
        "contributed/pt/brwac/elmo_pt_weights_dgx1.hdf5",
        "elmo-portuguese-brwac",
        "brWaC, a web corpus of Brazilian Portuguese; a model contributed to allennlp.",
    ),
)
# The four English sizes: their files have distinct published names, so they can share one folder.
ENGLISH_MODELS = ("small", "medium", "original", "original-5.5b")


def published_model(name: str) -> PublishedModel:
    """The `PublishedModel` called `name`; an unknown name raises a `UserInputError` listing the known ones."""
    for model in PUBLISHED_MODELS:
        if model.name == name:
            return model
    known = ", ".join(model.name for model in PUBLISHED_MODELS)
    raise UserInputError(f"--published: unknown model {name!r}; known: {known}")


def default_download_dir() -> str:
    """Where downloads are kept between runs: $ELMO_HF_CACHE, else $XDG_CACHE_HOME/elmo_hf, else ~/.cache/elmo_hf;
    then `published/`."""
    cache = os.environ.get("ELMO_HF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "elmo_hf"
    )
    return os.path.join(cache, "published")


def download(url: str, destination: str, progress: bool = True, timeout: float = 60) -> str:
    """Fetch `url` to `destination` (a file path), continuing `destination + ".part"` when an earlier run left one.

    The file gets its final name only once it holds every byte the server announced; a server that stops early
    raises a `UserInputError` that keeps the `.part` for the next run. A complete `destination` is not fetched
    again. Returns `destination`.
    """
    if os.path.isfile(destination):
        return destination
    partial = destination + ".part"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
    except OSError as error:
        raise UnwritableOutputError(destination, error) from error
    offset = os.path.getsize(partial) if os.path.isfile(partial) else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:  # nothing after `offset`: the partial file is stale, start again
            os.remove(partial)
            return download(url, destination, progress, timeout)
        raise UserInputError(f"{url}: the server answered {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise UserInputError(f"{url}: cannot connect ({reason})") from None
    with response:
        if offset and response.status == 206:
            start = _content_range_start(response.headers.get("Content-Range"))
            if start != offset:
                raise UserInputError(f"{url}: asked for bytes from {offset}, the server sent from {start}")
            mode = "ab"
        else:  # a full answer (the server ignores Range): start again
            offset, mode = 0, "wb"
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length is not None else None
        received = _receive(response, partial, mode, offset, total, destination, progress)
    if total is not None and received != total:
        raise UserInputError(
            f"{url}: download truncated: {received} of {total} bytes arrived; run the same command again to resume "
            f"({partial} is kept)"
        )
    os.replace(partial, destination)
    return destination


def _receive(
    response: http.client.HTTPResponse,
    partial: str,
    mode: str,
    offset: int,
    total: int | None,
    destination: str,
    progress: bool,
) -> int:
    """Append the body of `response` to `partial` (opened with `mode`) with a progress bar; the bytes it then holds.
    A file that cannot be written is an `UnwritableOutputError` for `destination`, which keeps what arrived."""
    from tqdm.auto import tqdm

    received = offset
    bar = tqdm(
        total=total,
        initial=offset,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=os.path.basename(destination),
        disable=None if progress else True,  # None: shown on a terminal only
    )
    try:
        with bar, open(partial, mode) as output:
            try:
                while chunk := response.read(CHUNK_BYTES):
                    output.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
            except (http.client.IncompleteRead, ConnectionError, TimeoutError) as error:
                if isinstance(error, http.client.IncompleteRead):
                    output.write(error.partial)
                    received += len(error.partial)
    except OSError as error:
        kept = os.path.getsize(partial) if os.path.isfile(partial) else 0
        raise UnwritableOutputError(
            destination,
            error,
            needed=None if total is None else total - kept,
            kept=f"the {kept} bytes that arrived are kept in {partial}: run the same command again to resume"
            if kept
            else None,
        ) from error
    return received


def _content_range_start(header: str | None) -> int | None:
    match = re.fullmatch(r"bytes (\d+)-\d+/(?:\d+|\*)", (header or "").strip())
    return int(match.group(1)) if match else None


def fetch_published(
    name: str, download_dir: str | None = None, base_url: str | None = None, progress: bool = True
) -> tuple[str, str]:
    """Download the options and weights of the published model `name` into `download_dir/name/` (default:
    `default_download_dir()`), resuming any broken download. Returns (options path, weights path)."""
    model = published_model(name)
    folder = os.path.join(download_dir or default_download_dir(), model.name)
    options_url, weights_url = model.urls(base_url)
    options_path = download(options_url, os.path.join(folder, options_url.rsplit("/", 1)[-1]), progress=progress)
    weights_path = download(weights_url, os.path.join(folder, weights_url.rsplit("/", 1)[-1]), progress=progress)
    return options_path, weights_path


def card_options(
    model: PublishedModel, repo_id: str | None, output_dir: str, revision: str | None = None
) -> dict[str, Any]:
    """The model card's fields for a published model converted to `output_dir` (and pushed to `repo_id`)."""
    return {
        "repo_id": repo_id or output_dir,
        "revision": revision if repo_id else None,
        "title": f"ELMo {model.name} ({os.path.basename(model.weights_path)})",
        "datasets": model.datasets,
        "training_data": model.training_data,
    }


def convert_published(
    name: str,
    output_dir: str | None = None,
    download_dir: str | None = None,
    repo_id: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    base_url: str | None = None,
    progress: bool = True,
) -> tuple[str, dict[str, Any]]:
    """Download (or resume), verify and convert the published model `name` into `output_dir` (default: its repo
    name in the current folder), and push it to the Hub repo `repo_id` when given.
    Returns (output folder, conversion report)."""
    from .convert_bilm_tf import convert_hdf5
    from .convert_common import check_repo_id, push_to_hub

    model = published_model(name)
    repo_id = check_repo_id(repo_id) if repo_id else None
    output_dir = output_dir or model.repo_name
    options_path, weights_path = fetch_published(name, download_dir, base_url, progress)
    _, _, report = convert_hdf5(
        options_path, weights_path, output_dir, card_options(model, repo_id, output_dir, revision)
    )
    if repo_id is not None:
        push_to_hub(output_dir, repo_id, private=private, revision=revision)
    return output_dir, report


def convert_all(
    input_dir: str,
    output_dir: str,
    namespace: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    names: Sequence[str] | None = None,
) -> dict[str, tuple[str, str | None, dict[str, Any]]]:
    """Convert (and push, when `namespace` is given) the models named in `names` (default: the four English sizes)
    from their files in `input_dir`, under their published names. Every file is checked before anything is
    converted. Returns {model name: (output folder, repo id or None, conversion report)}."""
    from .convert_bilm_tf import convert_hdf5
    from .convert_common import check_repo_id, push_to_hub

    names = list(ENGLISH_MODELS if names is None else names)
    selected = [published_model(name) for name in names]
    missing = [path for model in selected for path in model.files(input_dir) if not os.path.isfile(path)]
    if missing:
        raise UserInputError(f"{input_dir}: missing published files {[os.path.basename(path) for path in missing]}")
    file_names = {os.path.basename(path) for model in selected for path in model.files(input_dir)}
    if len(file_names) < 2 * len(selected):
        raise UserInputError(f"--models: {names} share file names; convert them one at a time")
    results = {}
    for model in selected:
        folder = os.path.join(output_dir, model.repo_name)
        repo_id = check_repo_id(f"{namespace}/{model.repo_name}") if namespace else None
        _, _, report = convert_hdf5(*model.files(input_dir), folder, card_options(model, repo_id, folder, revision))
        if repo_id is not None:
            push_to_hub(folder, repo_id, private=private, revision=revision)
        print(f"{model.name}: saved to {folder}" + (f", pushed to {repo_id}" if repo_id else ""), file=sys.stderr)
        results[model.name] = (folder, repo_id, report)
    return results
