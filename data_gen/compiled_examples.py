"""`example_proto.parse_fixed` compiled: `tf.train.Example` records parsed at tf.data's pace.

The backends without tf.data (JAX) read every record file of this project through here: the
pretraining records (`data_gen.pretraining.numpy_dataset`) and the fine-tuning feature caches
(`data_gen.records.read_records`). Parsing each record's protocol buffer in Python ran at about
4,600 pretraining sequences a second; here one compiled function (numba, releasing the GIL, so that
worker threads parse side by side) walks the bytes of a whole batch of records and writes every
value straight into its place in the batch's arrays.

The rule is `example_proto.parse_fixed`'s, and so `tf.io.parse_example`'s with `FixedLen`
features: any `tf.train.Example` (packed or unpacked value lists, fields in any order, unknown
fields skipped, a repeated feature name: the last one wins); a record without a feature of the
spec, with another number of values, with another kind of list, or whose bytes are not a
protocol buffer is a `ValueError` naming the record (and `where`: the file).
`tests/test_compiled_examples.py` holds it equal to the Python parser and to TensorFlow's.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bert_tf2.process import compiled

# Error codes of `_parse_batch` (per record): which rule the record broke.
_OK, _MALFORMED, _MISSING, _COUNT, _KIND = 0, 1, 2, 3, 4
_INT64, _FLOAT = 3, 2  # Feature's oneof field numbers: int64_list = 3, float_list = 2


@compiled.njit(nogil=True)
def _varint(data, at, end):
    """The varint at `data[at:]` as int64 (two's complement) and where the next field starts; -1
    for where when it runs past `end`."""
    value = np.int64(0)
    shift = 0
    while at < end:
        byte = np.int64(data[at])
        at += 1
        if shift < 64:
            value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return value, -1


@compiled.njit(nogil=True)
def _field(data, at, end):
    """The field at `data[at:end]`: (field number, wire type, where its value's bytes start and
    end); the end is also where the next field starts, -1 when the field is malformed or runs
    past `end`. A varint's bytes (wire 0) are read with `_varint`, a length-delimited value's
    (wire 2) are its payload."""
    key, at = _varint(data, at, end)
    if at < 0:
        return 0, 0, 0, -1
    field, wire = key >> 3, key & 7
    if wire == 0:
        return field, wire, at, _varint(data, at, end)[1]
    if wire == 2:
        size, at = _varint(data, at, end)
        if at < 0 or size < 0 or at + size > end:
            return field, wire, 0, -1
        return field, wire, at, at + size
    if wire == 5 or wire == 1:
        stop = at + (4 if wire == 5 else 8)
        return field, wire, at, stop if stop <= end else -1
    return field, wire, 0, -1


@compiled.njit(nogil=True)
def _match(data, start, end, names, name_starts):
    """The spec index of the feature named `data[start:end]`, or -1."""
    length = end - start
    for j in range(len(name_starts) - 1):
        if name_starts[j + 1] - name_starts[j] != length:
            continue
        same = True
        for k in range(length):
            if data[start + k] != names[name_starts[j] + k]:
                same = False
                break
        if same:
            return j
    return -1


@compiled.njit(nogil=True)
def _values(data, at, end, kind, size, out_int, out_float, row, column):
    """Writes the values of the Int64List/FloatList at `data[at:end]` into the row's columns;
    returns how many there were (-1: malformed)."""
    count = 0
    while at < end:
        field, wire, start, at = _field(data, at, end)
        if at < 0:
            return -1
        if field != 1:
            continue
        if kind == _INT64 and (wire == 0 or wire == 2):  # one value, or packed
            while start < at:
                value, start = _varint(data, start, at)
                if start < 0:
                    return -1
                if count < size:
                    out_int[row, column + count] = value
                count += 1
        elif kind == _FLOAT and (wire == 5 or wire == 2):  # one value, or packed
            if (at - start) % 4:
                return -1
            while start < at:
                if count < size:  # the float's bits (`out_float` is a uint32 view)
                    out_float[row, column + count] = (
                        np.uint32(data[start]) | (np.uint32(data[start + 1]) << np.uint32(8))
                        | (np.uint32(data[start + 2]) << np.uint32(16))
                        | (np.uint32(data[start + 3]) << np.uint32(24)))
                count += 1
                start += 4
        else:
            return -1
    return count


@compiled.njit(nogil=True)
def _feature(data, at, end, kind, size, out_int, out_float, row, column):
    """The Feature at `data[at:end]` into the row: its value count, -1 malformed, -2 another
    kind of list than the spec's."""
    count = 0
    while at < end:
        field, wire, start, at = _field(data, at, end)
        if at < 0:
            return -1
        if wire != 2 or field not in (1, 2, 3):
            continue
        if field != kind:
            return -2
        count = _values(data, start, at, kind, size, out_int, out_float, row, column)
        if count < 0:
            return -1
    return count  # no list at all: an empty one, as protobuf reads it


@compiled.njit(nogil=True)
def _record(data, start, end, names, name_starts, kinds, sizes, columns, out_int, out_float,
            row, seen, counts):
    """One Example into row `row`; returns (code, spec index the code concerns, the values
    counted)."""
    at = start
    while at < end:  # Example.features = 1
        field, wire, features, at = _field(data, at, end)
        if at < 0:
            return _MALFORMED, -1, 0
        if field != 1 or wire != 2:
            continue
        while features < at:  # Features.feature: map entries = 1
            field, wire, entry, features = _field(data, features, at)
            if features < 0:
                return _MALFORMED, -1, 0
            if field != 1 or wire != 2:
                continue
            name_start = name_end = value_start = value_end = -1
            while entry < features:  # the entry's key = 1 (the name), value = 2 (a Feature)
                field, wire, part, entry = _field(data, entry, features)
                if entry < 0:
                    return _MALFORMED, -1, 0
                if wire == 2 and field == 1:
                    name_start, name_end = part, entry
                elif wire == 2 and field == 2:
                    value_start, value_end = part, entry
            if name_start < 0:
                continue
            j = _match(data, name_start, name_end, names, name_starts)
            if j < 0:
                continue
            count = 0
            if value_start >= 0:
                count = _feature(data, value_start, value_end, kinds[j], sizes[j], out_int,
                                 out_float, row, columns[j])
            if count == -1:
                return _MALFORMED, j, 0
            seen[j] = row + 1  # a repeated name: the last one counts, as protobuf reads it
            counts[j] = count
    for j in range(len(sizes)):
        if seen[j] != row + 1:
            return _MISSING, j, 0
        if counts[j] == -2:
            return _KIND, j, 0
        if counts[j] != sizes[j]:
            return _COUNT, j, counts[j]
    return _OK, -1, 0


@compiled.njit(nogil=True)
def _parse_batch(data, starts, ends, rows, names, name_starts, kinds, sizes, columns, out_int,
                 out_float):
    """Every record `data[starts[i]:ends[i]]` into row `rows[i]`; (record, code, spec index,
    count) of the first that breaks a rule, record -1 when none does."""
    seen = np.zeros(len(sizes), np.int64)
    counts = np.zeros(len(sizes), np.int64)
    for i in range(len(starts)):
        code, j, count = _record(data, starts[i], ends[i], names, name_starts, kinds, sizes,
                                 columns, out_int, out_float, rows[i], seen, counts)
        if code != _OK:
            return i, code, j, count
    return -1, _OK, -1, 0


class FixedSpec:
    """A `{name: example_proto.FixedLen}` spec laid out for the compiled parser: the int64
    features side by side in one int64 matrix, the float32 ones in one float32 matrix."""

    def __init__(self, spec: dict):
        self.spec = dict(spec)
        self.names = list(spec)
        encoded = [name.encode("utf-8") for name in self.names]
        self._names = np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8)
        self._name_starts = np.cumsum([0] + [len(n) for n in encoded]).astype(np.int64)
        self._kinds = np.array([_INT64 if f.dtype == "int64" else _FLOAT for f in spec.values()],
                               np.int64)
        self._sizes = np.array([f.size for f in spec.values()], np.int64)
        self._columns = np.zeros(len(spec), np.int64)
        self.int_width = self.float_width = 0
        for j, feature in enumerate(spec.values()):
            if feature.dtype == "int64":
                self._columns[j], self.int_width = self.int_width, self.int_width + feature.size
            else:
                self._columns[j], self.float_width = (self.float_width,
                                                      self.float_width + feature.size)

    def parse(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
              where: str = "", int_dtype=np.int64) -> dict:
        """`{name: array [records, *shape]}` of the records `data[starts[i]:ends[i]]` (`data`: a
        uint8 array); int64 features as `int_dtype` (values that do not fit wrap, as a cast)."""
        return self.parse_pieces([(data, starts, ends, None, where, None)], len(starts),
                                 int_dtype)

    def parse_pieces(self, pieces: Sequence[tuple], rows: int, int_dtype=np.int64) -> dict:
        """One batch of `rows` records gathered from several byte arrays without copying them:
        each piece `(data, starts, ends, rows_of_them, where, numbers)` puts the records
        `data[starts[i]:ends[i]]` into rows `rows_of_them[i]` (None: 0, 1, ...); a record that
        breaks a rule is named by `where` (its file, or a function of i giving it) and
        `numbers[i]` (its place in the file; None: i)."""
        out_int = np.empty((rows, self.int_width), np.int64)
        out_float = np.empty((rows, self.float_width), np.float32)
        for data, starts, ends, at, where, numbers in pieces:
            starts = np.asarray(starts, np.int64)
            at = np.arange(len(starts)) if at is None else np.asarray(at, np.int64)
            record, code, j, count = _parse_batch(
                data, starts, np.asarray(ends, np.int64), at, self._names, self._name_starts,
                self._kinds, self._sizes, self._columns, out_int, out_float.view(np.uint32))
            if record >= 0:
                number = record if numbers is None else int(numbers[record])
                raise ValueError(self._message(number, code, j, count,
                                               where(record) if callable(where) else where))
        if int_dtype != np.int64:
            out_int = out_int.astype(int_dtype)
        out = {}
        for name, feature, column in zip(self.names, self.spec.values(), self._columns):
            source = out_int if feature.dtype == "int64" else out_float
            out[name] = source[:, column:column + feature.size].reshape((rows, *feature.shape))
        return out

    def parse_records(self, records: Sequence[bytes], where: str = "", int_dtype=np.int64) -> dict:
        """`parse` of a list of serialized records."""
        lengths = np.fromiter(map(len, records), np.int64, len(records))
        ends = np.cumsum(lengths)
        data = np.frombuffer(b"".join(records) or b"\0", dtype=np.uint8)
        return self.parse(data, ends - lengths, ends, where, int_dtype)

    def _message(self, record: int, code: int, j: int, count: int, where: str) -> str:
        name = self.names[j] if j >= 0 else None
        if code == _MISSING:
            return f"{where}record {record}: no feature {name!r}"
        if code == _COUNT:
            return (f"{where}record {record}: feature {name!r} has {count} values, "
                    f"{int(self._sizes[j])} expected")
        if code == _KIND:
            expected = "int64" if self._kinds[j] == _INT64 else "float"
            return f"{where}record {record}: feature {name!r} is not an {expected} list"
        return f"{where}record {record}: not a tf.train.Example (its bytes break off)"
