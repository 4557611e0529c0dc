"""TFRecords of `tf.train.Example`s: written in shards that appear complete or not at all, read
back into NumPy arrays.

Writing (`ShardedRecordWriter`): records go round-robin to the shards, as the original's writer
sends them. Each shard is written under its hidden temporary name (`process.atomic_files`) and
renamed to its real name only when every shard is complete; on any error the temporary files are
removed, so a failed run leaves no partial output (a killed process can leave a hidden `.tmp`
file, never a truncated shard). `serialize` makes the `tf.train.Example` of a feature dict, with
its features in sorted order: protobuf writes a map in an order that changes from process to
process otherwise, and the same features must give the same bytes.

Reading (`read_records`): every record of a file parsed by a feature spec (`FixedLen` features), as
arrays in file order: by tf.data on TensorFlow, else by `tfrecord_frames` and `compiled_examples`
(the same arrays; no TensorFlow needed).

TensorFlow (for remote file systems and for reading) is imported on first use: the command-line
tools import this module, and worker processes that re-import the main module must stay light.
Writing local files needs none: frames come from `tfrecord_frames`, the bytes from
`example_proto` (the same bytes as TensorFlow's `SerializeToString(deterministic=True)`).
"""
from __future__ import annotations

import os

from bert_tf2.data_gen import example_proto, tfrecord_frames
from bert_tf2.data_gen.compiled_examples import FixedSpec
from bert_tf2.data_gen.errors import DataError
from bert_tf2.data_gen.example_proto import FixedLen
from bert_tf2.process import environment, fault_points
from bert_tf2.process.atomic_files import is_remote, temporary_name


def _tf():
    import tensorflow as tf

    return tf


def serialize(features: dict, float_features=()) -> bytes:
    """A `tf.train.Example` of `{name: list of values}`: int64 lists, float lists for the names in
    `float_features` (the bytes of TensorFlow's deterministic serialisation)."""
    return example_proto.encode(features, float_features)


def fixed_len(shape, dtype: str = "int64") -> FixedLen:
    """A feature of `shape` (a list, [] for one value) and dtype `int64` or `float32`."""
    return FixedLen(tuple(shape), dtype)


def _tf_spec(spec: dict) -> dict:
    tf = _tf()
    return {name: tf.io.FixedLenFeature(list(f.shape), tf.int64 if f.dtype == "int64"
                                        else tf.float32) if isinstance(f, FixedLen) else f
            for name, f in spec.items()}


def read_records(path, spec: dict) -> dict:
    """Every tf.Example of `path` (a file or a list of files) parsed by `spec` (`FixedLen`
    features), as NumPy arrays in file order (int64 features stay int64)."""
    import numpy as np

    files = [path] if isinstance(path, str) else list(path)
    if environment.uses_tensorflow():
        tf = _tf()
        tf_spec = _tf_spec(spec)
        parse = tf.autograph.experimental.do_not_convert(  # no Python to convert
            lambda batch: tf.io.parse_example(batch, tf_spec))
        batches = list(tf.data.TFRecordDataset(files).batch(4096).map(parse).as_numpy_iterator())
    else:
        batches = []
        for name in files:
            if is_remote(name):
                raise DataError(f"{name}: remote files are read through TensorFlow; copy it to "
                                f"a local folder to read it without TensorFlow")
            try:
                data = tfrecord_frames.read_whole(name)
                starts, ends = tfrecord_frames.frame_bounds(data, name)
                batches.append(FixedSpec(spec).parse(data, starts, ends, where=f"{name}: ")
                               if len(starts) else None)
            except ValueError as e:
                raise DataError(str(e)) from None
        batches = [batch for batch in batches if batch is not None]
    if not batches:
        raise DataError(f"{', '.join(map(str, files))}: no records")
    return {name: np.concatenate([batch[name] for batch in batches]) for name in spec}


def check_output_files(paths: list, make_folders: bool = True) -> list:
    """The `--output_file` list: non-empty and without repeats; missing folders are created
    (unless `make_folders` is False: a check before anything is written)."""
    if not paths:
        raise ValueError("--output_file names no file")
    repeated = sorted({path for path in paths if paths.count(path) > 1})
    if repeated:
        raise ValueError(f"--output_file lists {', '.join(repeated)} more than once")
    for path in paths if make_folders else ():
        directory = os.path.dirname(path)
        if not directory:
            continue
        if is_remote(path):
            if not _tf().io.gfile.isdir(directory):
                _tf().io.gfile.makedirs(directory)
        else:
            os.makedirs(directory, exist_ok=True)
    return paths


class ShardedRecordWriter:
    """`with ShardedRecordWriter(paths) as writer: writer.write(record)`; renamed on success.

    Frames are made by `tfrecord_frames` (the bytes `tf.io.TFRecordWriter` writes), so local
    files need no TensorFlow; `write_dealt` takes many records, framed and dealt already.
    """

    def __init__(self, paths: list):
        self.paths = check_output_files(list(paths))
        self.written = 0
        self._temporary = [temporary_name(path) for path in self.paths]
        self._files = []

    def __enter__(self) -> "ShardedRecordWriter":
        try:
            for path in self._temporary:
                self._files.append(_tf().io.gfile.GFile(path, "wb") if is_remote(path)
                                   else open(path, "wb"))
        except Exception:
            self._discard()
            raise
        return self

    def write(self, record: bytes) -> None:
        self._write(self.written % len(self._files), tfrecord_frames.framed(record))
        self.written += 1

    def _write(self, shard: int, data: bytes) -> None:
        try:
            self._files[shard].write(data)
        except OSError as error:  # a full disk: name the output, not a hidden temporary file
            raise OSError(error.errno, error.strerror, self.paths[shard]) from None

    def write_dealt(self, chunks: list, count: int) -> None:
        """`count` framed records dealt in advance: `chunks[j]` holds, back to back, those whose
        index k (from 0) has `k % len(chunks) == j`, which is what round-robin sends to one shard.
        `len(chunks)` must be the number of shards; one write per shard."""
        if len(chunks) != len(self._files):
            raise ValueError(f"{len(chunks)} chunks for {len(self._files)} shards")
        for j, chunk in enumerate(chunks):
            self._write((self.written + j) % len(self._files), chunk)
            if j == 0 and self.written == 0:
                fault_points.reached("records")
        self.written += count

    def __exit__(self, error_type, error, traceback) -> None:
        if error_type is not None:
            self._discard()
            return
        try:
            for f in self._files:
                f.close()
            for temporary, path in zip(self._temporary, self.paths):
                if is_remote(path):
                    _tf().io.gfile.rename(temporary, path, overwrite=True)
                else:
                    os.replace(temporary, path)
        except BaseException:
            self._discard()
            raise

    def _discard(self) -> None:
        for f in self._files:
            try:
                f.close()
            except Exception:  # already failing; the removal below matters more
                pass
        for temporary in self._temporary:
            if is_remote(temporary):
                if _tf().io.gfile.exists(temporary):
                    _tf().io.gfile.remove(temporary)
            elif os.path.exists(temporary):
                os.remove(temporary)
