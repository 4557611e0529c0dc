"""Several examples in one row: a batch of padded rows -> fewer rows with no padding between.

Short examples (CoLA and SST-2 average 11-13 WordPieces) waste most of a padded row, and even a
length-bucketed batch pads each row to a multiple of 8. Packing places a batch's examples,
longest first, each into the first row with room left (first-fit decreasing, rows of
`max_seq_length`), one after another. The packed batch keeps the encoder's three names:
- `input_ids`, `segment_ids`: the examples' tokens, back to back, each as it was ([CLS] A [SEP]
  B [SEP]), zeros after the last;
- `input_mask`: each token's example number within its row (1, 2, ...; 0: padding), which the
  packed encoder (`modeling.encoder.packed_first_token_output`) turns into a block-diagonal
  attention mask and positions restarting at 0 for every example;
and adds `example_starts` [examples]: where each example's [CLS] lies in the row-major
flattened batch, in the batch's example order, so that per-example features (`label_ids`,
`example_index`, `is_real_example`) keep their shape and order. Rows are cut to the longest,
rounded up to a multiple of `width_multiple` (`datasets.rounded_width`, as trimmed batches are).

Not to be confused with `data_gen.packing`, which packs one example's texts into one row.
"""
from __future__ import annotations

from bert_tf2.data_gen.batching import LENGTH_MULTIPLE, SEQUENCE_FEATURES
from bert_tf2.data_gen.datasets import rounded_width


def _first_fit_decreasing(lengths, capacity):
    """Each example's row and offset in it: longest first, into the first row it fits."""
    import tensorflow as tf

    count = tf.shape(lengths)[0]
    order = tf.argsort(-lengths, stable=True)

    def place(state, length):
        used, members, _, _ = state
        row = tf.argmax(tf.cast(used + length <= capacity, tf.int32), output_type=tf.int32)
        offset = used[row]
        number = members[row] + 1
        hit = tf.one_hot(row, count, dtype=tf.int32)
        return used + hit * length, members + hit, row, tf.stack([offset, number])

    zeros = tf.zeros([count], tf.int32)
    _, _, rows, placed = tf.scan(place, tf.gather(lengths, order),
                                 initializer=(zeros, zeros, tf.constant(0), tf.zeros([2], tf.int32)))
    back = tf.argsort(order)  # from longest-first order back to the batch's order
    return tf.gather(rows, back), tf.gather(placed[:, 0], back), tf.gather(placed[:, 1], back)


def pack_batch(batch: dict, max_seq_length: int, sequence_features=SEQUENCE_FEATURES,
               width_multiple: int = LENGTH_MULTIPLE) -> dict:
    """`batch` (rows of one example each, `[examples, length]` sequence features) packed into
    rows of `max_seq_length` as the module docstring says, cut to the fullest row rounded up to
    `width_multiple` (`datasets.Batching.width_multiple`)."""
    import tensorflow as tf

    mask = tf.cast(batch["input_mask"], tf.int32)
    lengths = tf.reduce_sum(mask, axis=-1)
    rows, offsets, numbers = _first_fit_decreasing(lengths, max_seq_length)
    num_rows = tf.reduce_max(rows) + 1
    longest = tf.reduce_max(tf.math.unsorted_segment_max(offsets + lengths, rows, num_rows))
    width = rounded_width(longest, max_seq_length, width_multiple)
    starts = rows * width + offsets  # [examples]
    real = mask > 0
    positions = tf.range(tf.shape(mask)[1])[None, :]
    targets = tf.boolean_mask(starts[:, None] + positions, real)[:, None]  # every real token

    def scatter(values):
        flat = tf.scatter_nd(targets, tf.boolean_mask(values, real), [num_rows * width])
        return tf.reshape(flat, [num_rows, width])

    packed = {name: value for name, value in batch.items() if name not in sequence_features}
    for name in sequence_features:
        if name == "input_mask":
            packed[name] = scatter(tf.cast(numbers[:, None] * mask, batch[name].dtype))
        else:
            packed[name] = scatter(batch[name])
    packed["example_starts"] = starts
    return packed
