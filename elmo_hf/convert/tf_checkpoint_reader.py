"""A TensorFlow-free reader of TensorFlow (V2 "tensor bundle") checkpoints: `PREFIX.index` + `PREFIX.data-*`.

The `.index` file is an SSTable in LevelDB's table format: uncompressed blocks of prefix-compressed key/value
entries, an index block pointing at them, and a 48-byte footer. Each key is a variable name; its value is a
serialized `BundleEntryProto` (dtype, shape, shard, offset, size), except the empty key, which holds the
`BundleHeaderProto`. The tensor itself is `size` raw little-endian bytes at `offset` in data shard `shard_id`.
Only the protobuf fields needed here are decoded, by hand: no TensorFlow and no protobuf package.
"""

import os
import struct
from typing import Any

import numpy as np

from ..user_errors import UserInputError

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_TRAILER_SIZE = 5  # 1 byte compression type + 4 bytes crc
# TensorFlow DataType enum values -> NumPy dtypes (the ones a bilm-tf checkpoint uses, and a few more).
TF_DTYPES: dict[int, type[np.generic]] = {1: np.float32, 2: np.float64, 3: np.int32, 9: np.int64, 19: np.float16}
# One variable's index entry: (dtype, shape, shard_id, offset, size).
TensorEntry = tuple[type[np.generic], tuple[int, ...], int, int, int]


def _varint(buffer: bytes, position: int) -> tuple[int, int]:
    """Decode a base-128 varint at `position`; returns (value, next position)."""
    value, shift = 0, 0
    while True:
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _protobuf_fields(buffer: bytes) -> dict[int, list[Any]]:
    """{field number: [values]} of a serialized protobuf message (varints as ints, length-delimited as bytes)."""
    fields: dict[int, list[Any]] = {}
    position = 0
    while position < len(buffer):
        key, position = _varint(buffer, position)
        number, wire_type = key >> 3, key & 7
        value: int | bytes
        if wire_type == 0:
            value, position = _varint(buffer, position)
        elif wire_type == 2:
            length, position = _varint(buffer, position)
            value, position = bytes(buffer[position : position + length]), position + length
        elif wire_type == 5:
            value, position = struct.unpack_from("<I", buffer, position)[0], position + 4
        elif wire_type == 1:
            value, position = struct.unpack_from("<Q", buffer, position)[0], position + 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type} (field {number})")
        fields.setdefault(number, []).append(value)
    return fields


def _block_entries(data: bytes, offset: int, size: int, source: str) -> list[tuple[bytes, bytes]]:
    """The (key, value) entries of the table block at `offset` (LevelDB block format, restarts ignored)."""
    if data[offset + size] != 0:
        raise UserInputError(f"{source}: compressed index blocks are not supported (type {data[offset + size]})")
    block = data[offset : offset + size]
    num_restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 * (num_restarts + 1)
    entries, position, key = [], 0, b""
    while position < end:
        shared, position = _varint(block, position)
        unshared, position = _varint(block, position)
        value_length, position = _varint(block, position)
        key = key[:shared] + bytes(block[position : position + unshared])
        position += unshared
        entries.append((key, bytes(block[position : position + value_length])))
        position += value_length
    return entries


def read_tf_checkpoint_index(prefix: str) -> dict[str, TensorEntry]:
    """{variable name: (dtype, shape, shard_id, offset, size)} from `prefix + '.index'`."""
    source = prefix + ".index"
    if not os.path.isfile(source):
        raise UserInputError(f"{source}: no such file (give the checkpoint prefix, e.g. model.ckpt-60)")
    with open(source, "rb") as index_file:
        data = index_file.read()
    if len(data) < FOOTER_SIZE or struct.unpack_from("<Q", data, len(data) - 8)[0] != TABLE_MAGIC:
        raise UserInputError(f"{source}: not a TensorFlow checkpoint index (bad table magic)")
    footer = data[len(data) - FOOTER_SIZE :]
    _, position = _varint(footer, 0)  # metaindex handle: offset...
    _, position = _varint(footer, position)  # ...and size (unused: no filter blocks)
    index_offset, position = _varint(footer, position)
    index_size, _ = _varint(footer, position)
    variables = {}
    for _, handle in _block_entries(data, index_offset, index_size, source):
        block_offset, position = _varint(handle, 0)
        block_size, _ = _varint(handle, position)
        for key, value in _block_entries(data, block_offset, block_size, source):
            if key == b"":
                continue  # BundleHeaderProto: shard count and endianness (checked on read)
            entry = _protobuf_fields(value)
            if 7 in entry:
                raise UserInputError(f"{source}: variable {key.decode()} is stored in slices, which is not supported")
            dtype = entry.get(1, [0])[0]
            if dtype not in TF_DTYPES:
                raise UserInputError(f"{source}: variable {key.decode()} has unsupported TensorFlow dtype enum {dtype}")
            shape_fields = _protobuf_fields(entry[2][0]) if 2 in entry else {}
            shape = tuple(_protobuf_fields(dim).get(1, [0])[0] for dim in shape_fields.get(2, []))
            variables[key.decode("utf-8")] = (
                TF_DTYPES[dtype],
                shape,
                entry.get(3, [0])[0],
                entry.get(4, [0])[0],
                entry.get(5, [0])[0],
            )
    return variables


def read_tf_checkpoint(prefix: str) -> dict[str, np.ndarray]:
    """{variable name: NumPy array} for every variable of the checkpoint at `prefix`."""
    variables = read_tf_checkpoint_index(prefix)
    shards = {}
    arrays = {}
    for name, (dtype, shape, shard_id, offset, size) in variables.items():
        if shard_id not in shards:
            num_shards = 1 + max(shard for _, _, shard, _, _ in variables.values())
            path = f"{prefix}.data-{shard_id:05d}-of-{num_shards:05d}"
            if not os.path.isfile(path):
                raise UserInputError(f"{path}: checkpoint data shard is missing")
            with open(path, "rb") as shard_file:
                shards[shard_id] = shard_file.read()
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if size != expected:
            raise UserInputError(f"{prefix}: variable {name} holds {size} bytes, expected {expected} for shape {shape}")
        raw = shards[shard_id][offset : offset + size]
        arrays[name] = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape).copy()
    return arrays
