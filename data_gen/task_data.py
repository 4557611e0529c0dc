"""What every fine-tuning task's data code shares: the error for bad input, and reading features.

`DataError` is raised for bad task input by every reader (GLUE, SQuAD, CoNLL); its message starts
with 'PATH:LINE: ' (or 'PATH: ' for whole-file problems) so that users can find the fault.
`read_records` reads a features file written by a runner back into NumPy arrays.
"""
from __future__ import annotations


class DataError(ValueError):
    """Bad task input; the message starts with 'PATH:LINE: ' ('PATH: ' for whole-file problems)."""


def read_records(path, spec: dict) -> dict:
    """Every tf.Example of `path` (a file or a list of files) parsed by `spec`, as NumPy arrays
    in file order (int64 features stay int64)."""
    import numpy as np
    import tensorflow as tf

    files = [path] if isinstance(path, str) else list(path)
    batches = list(tf.data.TFRecordDataset(files).batch(4096)
                   .map(lambda batch: tf.io.parse_example(batch, spec)).as_numpy_iterator())
    if not batches:
        raise DataError(f"{', '.join(map(str, files))}: no records")
    return {name: np.concatenate([batch[name] for batch in batches]) for name in spec}
