#!/usr/bin/env python3
"""A minimal safetensors reader and writer using only the standard library (struct, json).

Written independently of the C++ implementation (src/train/safetensors.cc) so that each checks
the other; the `safetensors` Python package is not needed. Format: an 8-byte little-endian header
length N, N bytes of JSON ({name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}),
then the raw little-endian row-major data, offsets relative to the end of the header.

Command line (used by tests/train_io/safetensors_test.cc):
  safetensors_lite.py dump FILE          print {"metadata": ..., "tensors": {name: {dtype, shape,
                                         values}}} as JSON on stdout
  safetensors_lite.py write-sample FILE  write the sample tensors of sample_tensors()
"""
import json
import struct
import sys

# dtype -> (struct format character, bytes per element). BF16 is decoded by hand.
DTYPES = {
    "F64": ("d", 8),
    "F32": ("f", 4),
    "F16": ("e", 2),
    "BF16": (None, 2),
    "I64": ("q", 8),
    "I32": ("i", 4),
    "U8": ("B", 1),
}
METADATA_KEY = "__metadata__"


def element_count(shape):
    count = 1
    for dim in shape:
        count *= dim
    return count


def decode(dtype, raw):
    """Bytes -> list of Python numbers."""
    fmt, size = DTYPES[dtype]
    count = len(raw) // size
    if dtype == "BF16":
        halves = struct.unpack("<%dH" % count, raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    return list(struct.unpack("<%d%s" % (count, fmt), raw))


def encode(dtype, values):
    """List of Python numbers -> bytes (BF16 by truncation; exact for values that fit)."""
    fmt, _ = DTYPES[dtype]
    if dtype == "BF16":
        words = [struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in values]
        return struct.pack("<%dH" % len(words), *words)
    return struct.pack("<%d%s" % (len(values), fmt), *values)


def read(path):
    """Returns (tensors, metadata); tensors maps name -> (dtype, shape, raw bytes)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: truncated (%d bytes)" % (path, len(blob)))
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise ValueError("%s: header length %d exceeds the file" % (path, header_len))
    header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    data = blob[8 + header_len :]
    metadata = header.pop(METADATA_KEY, {})
    tensors = {}
    covered = 0
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"]):
        begin, end = entry["data_offsets"]
        dtype, shape = entry["dtype"], entry["shape"]
        if begin != covered or end - begin != element_count(shape) * DTYPES[dtype][1]:
            raise ValueError("%s: tensor %s has bad data_offsets %s" % (path, name, [begin, end]))
        covered = end
        tensors[name] = (dtype, list(shape), data[begin:end])
    if covered != len(data):
        raise ValueError("%s: %d trailing bytes" % (path, len(data) - covered))
    return tensors, metadata


def write(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), written in that order."""
    header = {}
    if metadata:
        header[METADATA_KEY] = dict(metadata)
    offset = 0
    for name, dtype, shape, raw in tensors:
        assert len(raw) == element_count(shape) * DTYPES[dtype][1], name
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


def sample_value(dtype, index):
    """The sample tensors' element values; tests/train_io/safetensors_test.cc uses the same rule."""
    if dtype in ("F64", "F32", "F16", "BF16"):
        return (index - 3) * 0.25
    if dtype == "I64":
        return (1 << 40) + index * 7 - 5
    if dtype == "I32":
        return index * 7 - 5
    return (index * 37) % 256


def sample_tensors():
    """One [2, 3] tensor per dtype named sample.<dtype>, plus an empty one, in reverse name order."""
    tensors = []
    for dtype in sorted(DTYPES, reverse=True):
        values = [sample_value(dtype, index) for index in range(6)]
        tensors.append(("sample." + dtype, dtype, [2, 3], encode(dtype, values)))
    tensors.append(("sample.empty", "F32", [0, 4], b""))
    return tensors


def main(argv):
    if len(argv) != 3 or argv[1] not in ("dump", "write-sample"):
        sys.stderr.write("usage: safetensors_lite.py dump|write-sample FILE\n")
        return 2
    if argv[1] == "write-sample":
        write(argv[2], sample_tensors(), {"writer": "safetensors_lite.py"})
        return 0
    tensors, metadata = read(argv[2])
    out = {
        "metadata": metadata,
        "tensors": {
            name: {"dtype": dtype, "shape": shape, "values": decode(dtype, raw)}
            for name, (dtype, shape, raw) in tensors.items()
        },
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
