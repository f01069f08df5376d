"""What allennlp's own ELMo tests import from allennlp besides its ELMo modules, for running them on elmo-hf.

The tests beside this file are allennlp's (Apache-2.0, see their headers). They build their inputs with allennlp's data
classes (`Token`, `TextField`, `Instance`, `Batch`, `Vocabulary`, the ELMo and single-id token indexers,
`SimpleDataLoader`) and run under `AllenNlpTestCase`. allennlp does not install beside a modern torch, so this module
holds small stand-ins written for elmo-hf that give the same tensors for what those tests do: character ids from
`elmo_hf.compat.allennlp.batch_to_ids` (equal to allennlp's, tests/compat/test_compat_allennlp.py), padded with zeros;
word ids with allennlp's vocabulary order (padding 0, unknown 1, then by count, ties in first-seen order).
"""

import contextlib
import io
import pathlib
import shutil
import sys
import tempfile
import unittest
from collections import Counter

import torch
from helpers import fixtures_path

from elmo_hf import cli
from elmo_hf.compat.allennlp import MAX_CHARACTERS, batch_to_ids
from elmo_hf.user_errors import USER_ERROR_EXIT_STATUS, UserInputError

PADDING_TOKEN, UNKNOWN_TOKEN = "@@PADDING@@", "@@UNKNOWN@@"


def _fixtures_root():
    """A folder laid out as allennlp's `test_fixtures/`: `elmo/` is the reference fixtures' `allennlp_elmo/`."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="allennlp_fixtures_"))
    (root / "elmo").symlink_to(fixtures_path() / "allennlp_elmo", target_is_directory=True)
    return root


class AllenNlpTestCase:
    """allennlp 2.10.1's test base class, pytest style: `FIXTURES_ROOT`, and a fresh `TEST_DIR` for each test."""

    FIXTURES_ROOT = _fixtures_root()

    def setup_method(self):
        self.TEST_DIR = pathlib.Path(tempfile.mkdtemp(prefix="allennlp_tests_"))

    def teardown_method(self):
        shutil.rmtree(self.TEST_DIR, ignore_errors=True)


def unittest_style(test_case):
    """allennlp 0.9's test classes were `unittest.TestCase`s, set up in `setUp`: `test_case` (pytest style) as one."""

    class UnittestStyle(unittest.TestCase, test_case):
        def setUp(self):
            self.setup_method()

        def tearDown(self):
            self.teardown_method()

    return UnittestStyle


class Token:
    def __init__(self, text):
        self.text = text


class Vocabulary:
    """Word ids per namespace: padding 0, unknown 1, then the counted words, most frequent first."""

    def __init__(self, counts=None):
        self._words = {}
        for namespace, counter in (counts or {}).items():
            ordered = sorted(counter.items(), key=lambda item: -item[1])  # stable: ties keep first-seen order
            self._words[namespace] = [PADDING_TOKEN, UNKNOWN_TOKEN, *(word for word, _ in ordered)]

    @classmethod
    def from_instances(cls, instances):
        counts = {}
        for instance in instances:
            for field in instance.fields.values():
                for indexer in field.token_indexers.values():
                    if isinstance(indexer, SingleIdTokenIndexer):
                        counts.setdefault(indexer.namespace, Counter()).update(token.text for token in field.tokens)
        return cls(counts)

    def get_token_to_index_vocabulary(self, namespace="tokens"):
        return {word: index for index, word in enumerate(self._words.get(namespace, [PADDING_TOKEN, UNKNOWN_TOKEN]))}

    def get_token_index(self, word, namespace="tokens"):
        return self.get_token_to_index_vocabulary(namespace).get(word, 1)


class ELMoTokenCharactersIndexer:
    """Each token's 50 character ids (key "elmo_tokens"), padded with all-zero tokens."""

    def tokens_to_indices(self, tokens, vocabulary):
        ids = batch_to_ids([[token.text for token in tokens]])[0] if tokens else torch.zeros(0, MAX_CHARACTERS)
        return {"elmo_tokens": ids.long().tolist()}

    def as_padded_tensor_dict(self, tokens, padding_lengths):
        rows = tokens["elmo_tokens"]
        padding = [[0] * MAX_CHARACTERS] * (padding_lengths["elmo_tokens"] - len(rows))
        return {"elmo_tokens": torch.tensor(rows + padding, dtype=torch.long).view(-1, MAX_CHARACTERS)}


class SingleIdTokenIndexer:
    """Each token's word id in `namespace` (key "tokens"), padded with 0."""

    def __init__(self, namespace="tokens"):
        self.namespace = namespace

    def tokens_to_indices(self, tokens, vocabulary):
        return {"tokens": [vocabulary.get_token_index(token.text, self.namespace) for token in tokens]}

    def as_padded_tensor_dict(self, tokens, padding_lengths):
        rows = tokens["tokens"]
        return {"tokens": torch.tensor(rows + [0] * (padding_lengths["tokens"] - len(rows)), dtype=torch.long)}


class TextField:
    def __init__(self, tokens, token_indexers):
        self.tokens, self.token_indexers = tokens, token_indexers


class Instance:
    def __init__(self, fields):
        self.fields = fields


class Batch:
    """Instances indexed with a vocabulary, then padded to the longest and stacked: `as_tensor_dict()` gives
    `{field: {indexer name: {key: tensor}}}` as allennlp's."""

    def __init__(self, instances):
        self.instances = list(instances)
        self.vocabulary = Vocabulary()

    def index_instances(self, vocabulary):
        self.vocabulary = vocabulary

    def as_tensor_dict(self):
        tensors = {}
        for name in self.instances[0].fields:
            fields = [instance.fields[name] for instance in self.instances]
            longest = max(len(field.tokens) for field in fields)
            tensors[name] = {}
            lengths = {"elmo_tokens": longest, "tokens": longest}
            for indexer_name, indexer in fields[0].token_indexers.items():
                indices = [indexer.tokens_to_indices(field.tokens, self.vocabulary) for field in fields]
                padded = [indexer.as_padded_tensor_dict(row, lengths) for row in indices]
                tensors[name][indexer_name] = {key: torch.stack([row[key] for row in padded]) for key in padded[0]}
        return tensors


class SimpleDataLoader:
    """Batches of `batch_size` instances in order, as tensor dicts."""

    def __init__(self, instances, batch_size):
        self.instances, self.batch_size = list(instances), batch_size
        self.vocabulary = Vocabulary()

    def index_with(self, vocabulary):
        self.vocabulary = vocabulary

    def __iter__(self):
        for start in range(0, len(self.instances), self.batch_size):
            batch = Batch(self.instances[start : start + self.batch_size])
            batch.index_instances(self.vocabulary)
            yield batch.as_tensor_dict()


def main():
    """allennlp's `main()` (`allennlp.commands`), for the command these tests run: `allennlp elmo ARGS` from
    `sys.argv` is `elmo-hf embed ARGS`. Its user errors (one line on stderr, exit status 2) are raised as
    `UserInputError`, as allennlp raised its ConfigurationError."""
    command, *arguments = sys.argv[1:]
    if command != "elmo":
        raise ValueError(f"only allennlp's elmo command is available here, got {command!r}")
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return cli.main(["embed", *arguments, "--quiet"])
    except SystemExit as exit:
        if exit.code != USER_ERROR_EXIT_STATUS:
            raise
        raise UserInputError(stderr.getvalue().strip()) from None
    finally:
        sys.stderr.write(stderr.getvalue())
