"""Windows over a long token sequence, and the window each token is read from ("max context").

A text longer than the model's `max_seq_length` is cut into overlapping windows, and each token
is scored by exactly one of them: the window where it has the most context, the first maximising
`min(tokens left of it, tokens right of it) + 0.01 * window length` (the original run_squad's
`_check_is_max_context`). Two ways of cutting:
- `fixed_stride_spans`: the original run_squad's, windows of `window` tokens starting at 0,
  stride, 2 * stride, ... until one reaches the last token, `stride = min(window, doc_stride)`;
- `word_aligned_spans`: run_ner's, windows that start at a word's first piece and end at a word
  boundary, so that no word is read from a truncated run of pieces.
`pair_windows` applies the fixed-stride cut to one example that may be a pair (classification,
feature extraction): windows over the longer text, the shorter one whole in every window.
Spans are `(start, length)` pairs. `data_gen.graph_windows` is the TensorFlow twin of
`fixed_stride_spans` and `max_context_windows`, for models that window raw text in their graph.
"""
from __future__ import annotations

import bisect
from typing import Sequence

import numpy as np


def fixed_stride_spans(num_tokens: int, window: int, doc_stride: int) -> list:
    """`(start, length)` windows over `num_tokens` tokens (one empty window for no tokens)."""
    if window < 1 and num_tokens:
        raise ValueError(f"windows of {window} tokens cannot cover {num_tokens}")
    spans, start = [], 0
    while True:
        length = min(num_tokens - start, window)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, doc_stride)


def pair_windows(length_a: int, length_b: int | None, max_seq_length: int,
                 doc_stride: int) -> tuple:
    """`(windows, long)`: each window's `(A span, B span or None)` and which text is cut ("a" or
    "b"), for a text of `length_a` tokens and, unless `length_b` is None or 0, a second text.

    A single text: windows of `max_seq_length - 2` tokens (`fixed_stride_spans`). A pair: the
    longer text (B on a tie) is cut into windows of what `max_seq_length - 3` leaves beside the
    shorter one, kept whole, or, if the pair does not fit and the shorter text is longer than
    `(max_seq_length - 3) // 2`, its first that many tokens. What fits is one window."""
    if not length_b:
        return [((start, length), None) for start, length in
                fixed_stride_spans(length_a, max_seq_length - 2, doc_stride)], "a"
    budget = max_seq_length - 3
    long = "b" if length_b >= length_a else "a"
    long_length, short = (length_b, length_a) if long == "b" else (length_a, length_b)
    if length_a + length_b > budget:
        short = min(short, budget // 2)
    spans = fixed_stride_spans(long_length, budget - short, doc_stride)
    return [((0, short), span) if long == "b" else (span, (0, short)) for span in spans], long


def word_aligned_spans(word_lengths: Sequence[int], window: int, doc_stride: int) -> list:
    """`(start, length)` windows of at most `window` pieces over words of `word_lengths` pieces.

    A window ends at the last word boundary within its limit; only a word longer than a whole
    window is cut, at the window's end (its first piece is what counts). The next window starts
    at the word holding the piece `min(length, doc_stride)` after this one's start, or at the next
    word if that would not advance: every word's first piece is in some window.
    """
    if any(length < 1 for length in word_lengths):
        raise ValueError("every word needs at least one piece")
    starts = []  # first piece of each word
    total = 0
    for length in word_lengths:
        starts.append(total)
        total += length
    if total <= window:
        return [(0, total)]
    boundaries = [*starts, total]
    word_of_piece = np.repeat(np.arange(len(word_lengths)), word_lengths)
    spans = []
    start = 0
    while True:
        limit = start + window
        if limit >= total:
            spans.append((start, total - start))
            return spans
        end = boundaries[bisect.bisect_right(boundaries, limit) - 1]
        if end <= start or word_lengths[word_of_piece[limit]] > window:
            end = limit
        spans.append((start, end - start))
        target = start + min(end - start, doc_stride)
        next_start = starts[word_of_piece[target]] if target < total else total
        if next_start <= start:  # the word at `start` reaches past the stride: skip it
            next_start = boundaries[word_of_piece[start] + 1]
        start = next_start


def max_context_windows(spans: Sequence[tuple], positions: Sequence[int]) -> np.ndarray:
    """For each token position, the index of the span where it has the most context (the first
    on ties; -1 for a position in no span)."""
    positions = np.asarray(positions, dtype=np.int64)
    best = np.full(len(positions), -1)
    best_score = np.full(len(positions), -np.inf)
    for index, (start, length) in enumerate(spans):
        inside = (positions >= start) & (positions < start + length)
        score = np.minimum(positions - start, start + length - 1 - positions) + 0.01 * length
        better = inside & (score > best_score)
        best[better] = index
        best_score[better] = score[better]
    return best
