"""Sharded TFRecord output that appears complete or not at all.

Records go round-robin to the shards, as the original's writer sends them. Each shard is written
under a hidden temporary name (`.NAME.tmp-PID` beside it) and renamed to its real name only when
every shard is complete; on any error the temporary files are removed, so a failed run leaves no
partial output (a killed process can leave a hidden `.tmp-` file, never a truncated shard).
TensorFlow (for its record writer and file systems) is imported on first use: the command-line
module imports this one, and worker processes that re-import the main module must stay light.
"""
import os


def _tf():
    import tensorflow as tf

    return tf


def temporary_name(path: str) -> str:
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.tmp-{os.getpid()}")


def check_output_files(paths: list) -> list:
    """The `--output_file` list: non-empty and without repeats; missing folders are created."""
    if not paths:
        raise ValueError("--output_file names no file")
    repeated = sorted({path for path in paths if paths.count(path) > 1})
    if repeated:
        raise ValueError(f"--output_file lists {', '.join(repeated)} more than once")
    tf = _tf()
    for path in paths:
        directory = os.path.dirname(path)
        if directory and not tf.io.gfile.isdir(directory):
            tf.io.gfile.makedirs(directory)
    return paths


class ShardedRecordWriter:
    """`with ShardedRecordWriter(paths) as writer: writer.write(record)`; renamed on success."""

    def __init__(self, paths: list):
        self.paths = check_output_files(list(paths))
        self.written = 0
        self._temporary = [temporary_name(path) for path in self.paths]
        self._writers = []

    def __enter__(self) -> "ShardedRecordWriter":
        try:
            self._writers = [_tf().io.TFRecordWriter(path) for path in self._temporary]
        except Exception:
            self._discard()
            raise
        return self

    def write(self, record: bytes) -> None:
        self._writers[self.written % len(self._writers)].write(record)
        self.written += 1

    def __exit__(self, error_type, error, traceback) -> None:
        if error_type is not None:
            self._discard()
            return
        try:
            for writer in self._writers:
                writer.close()
            for temporary, path in zip(self._temporary, self.paths):
                _tf().io.gfile.rename(temporary, path, overwrite=True)
        except BaseException:
            self._discard()
            raise

    def _discard(self) -> None:
        for writer in self._writers:
            try:
                writer.close()
            except Exception:  # already failing; the removal below matters more
                pass
        gfile = _tf().io.gfile
        for temporary in self._temporary:
            if gfile.exists(temporary):
                gfile.remove(temporary)


def write_text_atomically(path: str, text: str) -> None:
    gfile, temporary = _tf().io.gfile, temporary_name(path)
    with gfile.GFile(temporary, "w") as f:
        f.write(text)
    gfile.rename(temporary, path, overwrite=True)
