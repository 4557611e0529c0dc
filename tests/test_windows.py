"""Windows over long inputs and the max-context rule (`data_gen.windows`), by hand, and against
their TensorFlow twin (`data_gen.graph_windows`) on every case of a random sweep."""
import random

import tensorflow as tf

from bert_tf2.data_gen import graph_windows
from bert_tf2.data_gen.windows import fixed_stride_spans, max_context_windows, word_aligned_spans


def test_word_aligned_spans_by_hand():
    # Piece counts 1 2 3 1 1 4 1 2 1 3 1 1 (21 pieces); word starts 0 1 3 6 7 8 12 13 15 16
    # 19 20. Window of 14 pieces, stride 5:
    # - [0, 14) would cut the word at 13-14: end at the boundary 13 -> (0, 13);
    # - 0 + 5 = piece 5, inside the word at 3-5: start there -> (3, 16), 16 a boundary;
    # - 3 + 5 = piece 8, a word start -> (8, 21): the rest fits.
    # Spans are (start, length).
    lengths = [1, 2, 3, 1, 1, 4, 1, 2, 1, 3, 1, 1]
    assert word_aligned_spans(lengths, 14, 5) == [(0, 13), (3, 13), (8, 13)]
    assert word_aligned_spans(lengths, 21, 5) == [(0, 21)]                # fits: one window
    # A stride of a window or more: no overlap (starts at word starts 0, 13).
    assert word_aligned_spans(lengths, 14, 20) == [(0, 13), (13, 8)]
    # A word longer than any window is cut at the window's end (it is never moved whole into
    # the next window); a window that would start inside it starts at the next word instead.
    assert word_aligned_spans([20, 1, 1], 14, 5) == [(0, 14), (20, 2)]
    # [1, 20, 1]: (0, 14); 0 + 5 is inside the long word -> back to its start 1: (1, 14);
    # 1 + 5 is inside it again and it starts at 1 -> forward to the next word, 21: (21, 1).
    assert word_aligned_spans([1, 20, 1], 14, 5) == [(0, 14), (1, 14), (21, 1)]


def test_fixed_stride_spans_by_hand():
    assert fixed_stride_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]  # the last reaches token 9
    assert fixed_stride_spans(10, 4, 8) == [(0, 4), (4, 4), (8, 2)]  # stride capped at 4
    assert fixed_stride_spans(3, 4, 2) == [(0, 3)]
    assert fixed_stride_spans(0, 4, 2) == [(0, 0)]  # no tokens: one empty window


def test_max_context_by_hand():
    spans = [(0, 13), (3, 13), (8, 13)]
    # score = min(left, right) + 0.01 * length, all lengths 13 here:
    # piece 6: (0,13) min(6, 6) = 6, (3,16) min(3, 9) = 3 -> window 0
    # piece 8: (0,13) min(8, 4) = 4, (3,16) min(5, 7) = 5, (8,21) min(0, 12) = 0 -> window 1
    # piece 12: (0,13) 0, (3,16) min(9, 3) = 3, (8,21) min(4, 8) = 4 -> window 2
    assert max_context_windows(spans, [0, 6, 8, 12, 20]).tolist() == [0, 0, 1, 2, 2]
    # Ties: equal context and length -> the earlier window; equal context -> the longer one.
    assert max_context_windows([(0, 10), (5, 10)], [7]).tolist() == [0]  # 2 + .10 vs 2 + .10
    assert max_context_windows([(0, 10), (5, 8)], [7]).tolist() == [0]   # 2 + .10 vs 2 + .08
    assert max_context_windows([(0, 8), (3, 10)], [5]).tolist() == [1]   # 2 + .08 vs 2 + .10
    assert max_context_windows([(0, 4)], [9]).tolist() == [-1]           # in no window


def test_python_and_graph_windows_agree():
    """The TensorFlow twin cuts the same windows and picks the same max-context window, for a
    batch of random requests at once (SquadServing and NerServing window in their graphs)."""
    rng = random.Random(5)
    for _ in range(20):
        cases = [(rng.randint(0, 60), rng.randint(1, 20), rng.randint(1, 25))
                 for _ in range(rng.randint(1, 6))]
        doc_stride = rng.randint(1, 25)
        doc_length = tf.constant([n for n, _, _ in cases], tf.int64)
        room = tf.constant([w for _, w, _ in cases], tf.int64)
        layout = graph_windows.Layout.of(room, doc_length, doc_stride)
        request = tf.repeat(tf.range(len(cases), dtype=tf.int64), layout.counts)
        index = tf.ragged.range(layout.counts).flat_values
        start, length = layout.window(request, index)
        best = graph_windows.max_context(layout, request, index, start, length)
        expected_spans, expected_best = [], []
        for n, window, _ in cases:
            spans = fixed_stride_spans(n, window, doc_stride) if n else []
            best_window = max_context_windows(spans, range(n))
            expected_spans += spans
            expected_best += [[int(best_window[s + i] == w) for i in range(length)]
                              for w, (s, length) in enumerate(spans)]
        assert list(zip(start.numpy().tolist(), length.numpy().tolist())) == expected_spans
        assert [[int(v) for v in row] for row in best.to_list()] == expected_best
