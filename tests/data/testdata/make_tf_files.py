#!/usr/bin/python3
"""Independent writer of TensorFlow data files, used to check the library's readers.

Uses only the Python standard library and the public definitions of the formats
(TFRecord framing with masked CRC32C, tf.train.Example protobuf wire encoding).
It does not use TensorFlow or protobuf, so the files it writes are an external
reference for the library's TFRecord, Example-parsing and text-line readers.

Usage: make_tf_files.py OUTPUT_DIR

Writes (deterministically, byte-identical on every run):
  records.tfrecord           raw records b"hello", b"", b"\\x00\\xffbinary\\n",
                             bytes(i % 251 for i in range(1000))
  examples.tfrecord          5 Examples (id, xy, label, name; #3 has "extra";
                             #4 encodes "xy" unpacked)
  examples_missing.tfrecord  2 Examples, the second lacks "xy"
  lines_a.txt                "alpha\\nbeta\\n\\ngamma" (no trailing newline)
  lines_b.txt                "one\\r\\ntwo\\r\\n" (CRLF)
  lines_c.txt                empty file
  shard-0.tfrecord .. shard-3.tfrecord
                             file k holds b"k<k>-r<r>" for r in 0..2
  records.tfrecord.gz        records.tfrecord, GZIP-compressed (gzip module, mtime 0)
  records.tfrecord.zlib      records.tfrecord, ZLIB-compressed (zlib module)
  lines_b.txt.gz             lines_b.txt, GZIP-compressed
  two_members.txt.gz         two gzip members one after the other: b"a\\nb\\n", then b"c\\n"

See EXPECTED.md next to the output files for the decoded contents.
"""

import gzip
import os
import struct
import sys
import zlib

# ---------------------------------------------------------------------------
# CRC32C (Castagnoli), reflected polynomial 0x82F63B78, table driven.

_CRC32C_POLY = 0x82F63B78


def _make_crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            if c & 1:
                c = (c >> 1) ^ _CRC32C_POLY
            else:
                c >>= 1
        table.append(c)
    return table


_CRC_TABLE = _make_crc_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283

_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


# ---------------------------------------------------------------------------
# TFRecord framing.


def frame_record(data):
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + data +
            struct.pack("<I", masked_crc32c(data)))


def write_tfrecord(path, records):
    with open(path, "wb") as f:
        for r in records:
            f.write(frame_record(r))


# ---------------------------------------------------------------------------
# Protobuf wire encoding, by hand.

_WT_VARINT = 0
_WT_FIXED64 = 1
_WT_LEN = 2
_WT_FIXED32 = 5


def varint(value):
    if value < 0:
        value += 1 << 64  # two's complement; encodes as 10 bytes
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field, wire_type):
    return varint((field << 3) | wire_type)


def len_field(field, payload):
    return tag(field, _WT_LEN) + varint(len(payload)) + payload


def bytes_list(values):
    # BytesList { repeated bytes value = 1; }
    return b"".join(len_field(1, v) for v in values)


def float_list(values, packed=True):
    # FloatList { repeated float value = 1 [packed = true]; }
    if packed:
        return len_field(1, b"".join(struct.pack("<f", v) for v in values))
    return b"".join(tag(1, _WT_FIXED32) + struct.pack("<f", v) for v in values)


def int64_list(values):
    # Int64List { repeated int64 value = 1 [packed = true]; }
    return len_field(1, b"".join(varint(v) for v in values))


def feature_bytes(values):
    return len_field(1, bytes_list(values))  # Feature.bytes_list = 1


def feature_float(values, packed=True):
    return len_field(2, float_list(values, packed))  # Feature.float_list = 2


def feature_int64(values):
    return len_field(3, int64_list(values))  # Feature.int64_list = 3


def example(features):
    """features: list of (name, encoded Feature message) in the wanted order."""
    feats = b""
    for name, feat in features:
        entry = len_field(1, name.encode("utf-8")) + len_field(2, feat)
        feats += len_field(1, entry)  # Features.feature (map) = 1
    return len_field(1, feats)  # Example.features = 1


def standard_example(i, packed_xy=True, with_xy=True, extra=False):
    feats = [("id", feature_int64([i]))]
    if with_xy:
        feats.append(("xy", feature_float([i * 0.5, -i * 1.25], packed_xy)))
    feats.append(("label", feature_int64([i * (-3) - 1])))
    feats.append(("name", feature_bytes([b"ex%d" % i])))
    if extra:
        feats.append(("extra", feature_float([7.0])))
    return example(feats)


# ---------------------------------------------------------------------------


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: make_tf_files.py OUTPUT_DIR\n")
        return 2
    out = argv[1]
    os.makedirs(out, exist_ok=True)

    def p(name):
        return os.path.join(out, name)

    write_tfrecord(p("records.tfrecord"), [
        b"hello",
        b"",
        b"\x00\xffbinary\n",
        bytes(i % 251 for i in range(1000)),
    ])

    write_tfrecord(p("examples.tfrecord"), [
        standard_example(i, packed_xy=(i != 4), extra=(i == 3))
        for i in range(5)
    ])

    write_tfrecord(p("examples_missing.tfrecord"), [
        standard_example(0),
        standard_example(1, with_xy=False),
    ])

    write_bytes(p("lines_a.txt"), b"alpha\nbeta\n\ngamma")
    write_bytes(p("lines_b.txt"), b"one\r\ntwo\r\n")
    write_bytes(p("lines_c.txt"), b"")

    for k in range(4):
        write_tfrecord(p("shard-%d.tfrecord" % k),
                       [b"k%d-r%d" % (k, r) for r in range(3)])

    # Compressed copies (TF's compression_type "GZIP" and "ZLIB"); mtime 0
    # keeps the gzip header the same on every run.
    with open(p("records.tfrecord"), "rb") as f:
        records = f.read()
    write_bytes(p("records.tfrecord.gz"), gzip.compress(records, compresslevel=9, mtime=0))
    write_bytes(p("records.tfrecord.zlib"), zlib.compress(records, 9))
    write_bytes(p("lines_b.txt.gz"), gzip.compress(b"one\r\ntwo\r\n", compresslevel=9, mtime=0))
    write_bytes(p("two_members.txt.gz"),
                gzip.compress(b"a\nb\n", compresslevel=9, mtime=0) + gzip.compress(b"c\n", compresslevel=9, mtime=0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
