"""Test helper: writes a minimal TensorFlow bundle checkpoint (one shard, one uncompressed table block), so the
converter's error paths can be exercised on checkpoints that differ from the real fixture in one variable."""

import struct

import numpy as np

DTYPE_ENUMS = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int32): 3, np.dtype(np.int64): 9}


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, wire_type, payload):
    key = _varint(number << 3 | wire_type)
    if wire_type == 2:
        return key + _varint(len(payload)) + payload
    return key + _varint(payload)


def _block(entries):
    """A table block without prefix compression: one restart point at 0."""
    body = b"".join(_varint(0) + _varint(len(key)) + _varint(len(value)) + key + value for key, value in entries)
    return body + struct.pack("<II", 0, 1)


def write_tf_checkpoint(prefix, arrays):
    data, entries = bytearray(), [(b"", _field(1, 0, 1))]  # header: num_shards = 1
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        shape = b"".join(_field(2, 2, _field(1, 0, dim)) for dim in array.shape)
        entry = (
            _field(1, 0, DTYPE_ENUMS[array.dtype])
            + _field(2, 2, shape)
            + _field(4, 0, len(data))
            + _field(5, 0, array.nbytes)
        )
        entries.append((name.encode(), entry))
        data += array.astype(array.dtype.newbyteorder("<")).tobytes()
    with open(f"{prefix}.data-00000-of-00001", "wb") as data_file:
        data_file.write(bytes(data))
    table = bytearray()
    data_block = _block(entries)
    data_handle = _varint(0) + _varint(len(data_block))
    table += data_block + b"\0" * 5
    metaindex = _block([])
    metaindex_handle = _varint(len(table)) + _varint(len(metaindex))
    table += metaindex + b"\0" * 5
    index = _block([(entries[-1][0] + b"\xff", data_handle)])
    index_handle = _varint(len(table)) + _varint(len(index))
    table += index + b"\0" * 5
    footer = (metaindex_handle + index_handle).ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57)
    with open(f"{prefix}.index", "wb") as index_file:
        index_file.write(bytes(table + footer))
