"""What a runtime is: the one interface through which every export answers raw texts.

A runtime is either a task's LiteRT fast path (`tasks/*/litert_serving.py`, on
`inference.litert_runtime`) or an export's SavedModel text signature
(`inference.saved_model_text`). It has `input_names` (the texts a call takes, in order),
`list_inputs` (those that take a list of texts per row: multiple choice's `choices`),
`warm_up(batches)` (whatever the first requests would otherwise pay for, done now), and a call,
`runtime(*texts)`, one list per input name -> `{output: array or list over the rows}`.

Requests and file lines arrive as rows, `{input: text}`; `predict_rows` turns them into one call,
and `jsonable` writes an output value as JSON. The model server and `batch_predict.py` both use
them, so a row gives the same answer through either.
"""
from __future__ import annotations

import numpy as np

WARM_BATCHES = (1, 2, 4, 8)  # the batch sizes a server runs before it says it is ready


def list_inputs(runtime) -> frozenset:
    """The inputs of `runtime` that take a list of texts per row."""
    return frozenset(getattr(runtime, "list_inputs", ()))


def predict_rows(runtime, rows: list) -> dict:
    """`rows` (`{input: text}` each) through `runtime` as one call."""
    return runtime(*[[row[name] for row in rows] for name in runtime.input_names])


def jsonable(value):
    """One output value as JSON: numbers as they are, strings decoded; a list may be ragged (a
    tagger's words and tags per text)."""
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    value = np.asarray(value)
    if value.dtype.kind in "SO":
        return np.vectorize(lambda b: b.decode("utf-8") if isinstance(b, bytes) else b,
                            otypes=[object])(value).tolist()
    return value.tolist()
