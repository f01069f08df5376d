"""Read the character vectors out of an installed R package's lazy-load data (`data/Rdata.rdx` + `Rdata.rdb`).

The corpus builder needs the text of `r-cran-janeaustenr` without an R installation. An R package's data folder
is a small database: `Rdata.rdx` is a gzip-compressed serialized list whose `variables` element maps each dataset's
name to `c(offset, length)` in `Rdata.rdb`, and each record there is a 4-byte big-endian length, one byte naming
the compression (`Z` zlib, `2` bzip2, `X` xz, `0` none) and the compressed serialized object. The serialization is
R's XDR format ("R Internals", section 1.8); this reader covers what datasets hold: vectors, pairlists, attributes,
symbols and references. Environments, closures and byte code are refused by name.
"""

import bz2
import gzip
import lzma
import struct
import zlib

from elmo_hf.user_errors import UserInputError

_NIL_LIKE = {254, 253, 242, 241, 252, 251, 247}  # NULL, global/empty/base env, unbound, missing arg, base namespace
_REFERENCE, _SYMBOL, _CHARACTER, _ALTREP = 255, 1, 9, 238
_PAIRLISTS = {2, 6, 239, 240}  # pairlist, language object, attribute pairlist, attribute language object
_INTEGERS, _DOUBLES, _ITEM_VECTORS = {10, 13}, {14}, {16, 19, 20}  # logical/integer, double, character/list/expr
_HAS_ATTRIBUTES, _HAS_TAG = 1 << 9, 1 << 10


class RVector(list):
    """An R vector as a list, with its attributes (`names`, `class`, ...) in `.attributes`."""

    def __init__(self, values, attributes=None):
        super().__init__(values)
        self.attributes = attributes or {}


class _XdrReader:
    def __init__(self, data):
        self.data, self.position, self.references = data, 0, []

    def integer(self):
        (value,) = struct.unpack_from(">i", self.data, self.position)
        self.position += 4
        return value

    def read(self):
        if self.data[:2] != b"X\n":
            raise UserInputError(f"not R's XDR serialization (starts with {self.data[:2]!r})")
        self.position = 2
        version = self.integer()
        self.integer(), self.integer()  # the writer's R version and the minimal reader version
        if version == 3:
            name_length = self.integer()
            self.position += name_length  # skips the native encoding's name
        return self.item()

    def item(self):
        flags = self.integer()
        kind = flags & 0xFF
        if kind in _NIL_LIKE:
            return None
        if kind == _REFERENCE:
            return self.references[(flags >> 8 or self.integer()) - 1]
        if kind == _SYMBOL:
            name = self.item()
            self.references.append(name)
            return name
        if kind in _PAIRLISTS:
            return self.pairlist(flags)
        if kind == _CHARACTER:
            length = self.integer()
            if length == -1:
                return None  # NA_character_
            text = self.data[self.position : self.position + length].decode("utf-8", "replace")
            self.position += length
            return text
        if kind == _ALTREP:
            return self.altrep()
        length = self.integer()
        if kind in _INTEGERS:
            values = list(struct.unpack_from(f">{length}i", self.data, self.position))
            self.position += 4 * length
        elif kind in _DOUBLES:
            values = list(struct.unpack_from(f">{length}d", self.data, self.position))
            self.position += 8 * length
        elif kind in _ITEM_VECTORS:
            values = [self.item() for _ in range(length)]
        else:
            raise UserInputError(f"R object type {kind} is not a dataset type (at byte {self.position})")
        attributes = self.item() if flags & _HAS_ATTRIBUTES else None
        return RVector(values, attributes)

    def pairlist(self, flags):
        """A pairlist as a dict from tag (or position) to value."""
        entries = {}
        while (flags & 0xFF) in _PAIRLISTS:
            if flags & _HAS_ATTRIBUTES:
                self.item()
            tag = self.item() if flags & _HAS_TAG else len(entries)
            entries[tag] = self.item()
            flags = self.integer()
        self.position -= 4
        self.item()  # the list's end (NULL)
        return entries

    def altrep(self):
        """A compact vector (R >= 3.5): only the compact integer sequence and wrappers appear in datasets."""
        info, state, _ = self.item(), self.item(), self.item()
        kind = info.get(0) if isinstance(info, dict) else None
        if kind == "compact_intseq":
            length, start, step = (int(value) for value in state)
            return RVector(range(start, start + step * length, step))
        if kind in ("wrap_integer", "wrap_real", "wrap_string", "wrap_logical"):
            return state.get(0) if isinstance(state, dict) else state[0]
        raise UserInputError(f"R compact vector {kind!r} is not supported")


def _decompress(record):
    method, payload = record[4:5], record[5:]
    if method == b"Z":
        return zlib.decompress(payload)
    if method == b"2":
        return bz2.decompress(payload)
    if method == b"X":
        return lzma.decompress(payload)
    if method == b"0":
        return payload
    return zlib.decompress(record[4:])  # the oldest layout: length, then zlib data with no method byte


def read_lazy_load_data(index_bytes, database_bytes):
    """{dataset name: RVector} from the bytes of an R package's `Rdata.rdx` and `Rdata.rdb`."""
    index = _XdrReader(gzip.decompress(index_bytes) if index_bytes[:2] == b"\x1f\x8b" else index_bytes).read()
    variables = dict(zip(index.attributes["names"], index))["variables"]
    datasets = {}
    for name, (offset, length) in zip(variables.attributes["names"], variables):
        datasets[name] = _XdrReader(_decompress(database_bytes[offset : offset + length])).read()
    return datasets
