"""Sliding windows over token sequences, in the TensorFlow graph, as the original cuts them.

Served models that take raw text must cut long inputs into windows inside their graph exactly as
the runners cut them in Python: windows of `room` tokens starting at 0, stride, 2 * stride, ...
until one reaches the last token (`stride = min(room, doc_stride)`), and for each token its "max
context" window, the first maximising `min(left, right) + 0.01 * window length` (the original's
`_check_is_max_context`). `SquadServing` windows a context after its question; `NerServing` a
sentence's WordPieces.
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

NEG_INF = float("-inf")


class Layout(NamedTuple):
    """How each request's tokens are cut into windows (int64 `[batch]` each)."""
    room: tf.Tensor  # tokens a window holds (SQuAD: max_seq_length - len(query) - 3)
    stride: tf.Tensor  # min(room, doc_stride)
    doc_length: tf.Tensor  # tokens to cover
    counts: tf.Tensor  # windows

    @classmethod
    def of(cls, room, doc_length, doc_stride: int, empty_window: bool = False) -> "Layout":
        """`room`: tokens a window holds (at least 1), per request or for all. A request without
        tokens has no window, or, with `empty_window`, one empty window (as
        `windows.fixed_stride_spans` gives it: a text classified or embedded even so)."""
        room = tf.broadcast_to(tf.cast(room, tf.int64), tf.shape(doc_length))
        stride = tf.minimum(room, doc_stride)
        # Windows start at 0, stride, 2 * stride, ... up to the first that reaches the last token.
        counts = tf.where(doc_length > 0,
                          1 + (tf.maximum(doc_length - room, 0) + stride - 1) // stride,
                          1 if empty_window else 0)
        return cls(room, stride, doc_length, counts)

    def windows(self) -> tuple:
        """`(request, index)` of every window, in order: the request it belongs to and its
        number within it (int64 `[windows]` each)."""
        request = tf.repeat(tf.range(tf.size(self.counts, out_type=tf.int64)), self.counts)
        return request, tf.ragged.range(self.counts).flat_values

    def window(self, request, index) -> tuple:
        """`(start, length)` among the context's tokens of window `index` of `request`."""
        start = index * tf.gather(self.stride, request)
        return start, tf.minimum(tf.gather(self.room, request),
                                 tf.gather(self.doc_length, request) - start)


def window_positions(tokens: tf.RaggedTensor, request, start, length) -> tf.RaggedTensor:
    """Where in `tokens.flat_values` each window's tokens lie (`tokens[request][start:start +
    length]`): int64 `[windows, (length)]`, for `tf.gather`."""
    first = tf.gather(tokens.row_starts(), request) + start
    return tf.ragged.range(first, first + length)


def map_in_batches(fn, inputs: dict, batch_size: int, element_shape) -> tf.Tensor:
    """`fn` on the rows of `inputs` (a dict of `[rows, ...]` tensors) `batch_size` rows at a
    time, the float32 results concatenated: memory bounded by a batch of windows, not by how
    many windows a long request makes."""
    rows = tf.shape(next(iter(inputs.values())))[0]

    def step(begin, parts):
        chunk = {name: value[begin:begin + batch_size] for name, value in inputs.items()}
        return begin + batch_size, parts.write(begin // batch_size,
                                               tf.cast(fn(chunk), tf.float32))

    parts = tf.TensorArray(tf.float32, size=0, dynamic_size=True, infer_shape=False,
                           element_shape=element_shape)
    _, parts = tf.while_loop(lambda begin, _: begin < rows, step, [0, parts])
    return parts.concat()


def max_context(layout: Layout, request, index, doc_start, length) -> tf.RaggedTensor:
    """`_check_is_max_context` for every token of every window: bool `[windows, (length)]`.

    Each token is scored in every window of its request (`min(left, right) + 0.01 * window
    length`, in float64 as Python computes it); the first best window is its max context.
    """
    token = tf.ragged.range(doc_start, doc_start + length)  # [windows, (length)]
    window = token.value_rowids()
    owner = tf.gather(request, window)
    candidates = tf.ragged.range(tf.gather(layout.counts, owner))  # [tokens, (windows)]
    pair = candidates.value_rowids()
    position = tf.gather(token.flat_values, pair)
    start, span = layout.window(tf.gather(owner, pair), candidates.flat_values)
    end = start + span - 1
    score = (tf.cast(tf.minimum(position - start, end - position), tf.float64)
             + 0.01 * tf.cast(span, tf.float64))
    score = tf.where((position >= start) & (position <= end), score, NEG_INF)
    best = first_max(candidates.with_flat_values(score).to_tensor(NEG_INF))[0]
    return token.with_flat_values(best == tf.gather(index, window))


def first_max(values) -> tuple:
    """`(index, value)` of the first maximum of each row (`tf.argmax` does not promise the first);
    a row without columns gives index 0 and -inf."""
    best = tf.reduce_max(tf.concat([tf.fill([tf.shape(values)[0], 1], tf.cast(
        NEG_INF, values.dtype)), values], axis=1), axis=1)
    columns = tf.range(tf.shape(values, out_type=tf.int64)[1])
    first = tf.reduce_min(tf.where(values == best[:, None], columns, tf.int64.max), axis=1)
    return tf.where(first == tf.int64.max, tf.constant(0, tf.int64), first), best
