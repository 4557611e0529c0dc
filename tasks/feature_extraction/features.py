"""A line of text -> its WordPieces and the encoder's inputs, as the original's extract_features.

Text A alone keeps its first `max_seq_length - 2` WordPieces; a pair (only when B has text and
WordPieces) is trimmed by `truncate_seq_pair` to `max_seq_length - 3`; the layout is
`[CLS] A [SEP] (B [SEP])` with segment 0 through the first `[SEP]`. Features are not padded here:
the batcher pads each batch to its own longest row.

With `doc_stride` (ours; `featurize_windows`) a long line is read whole, in the overlapping windows
classification cuts, and each of its tokens is taken from the window where it has the most context.
"""
from __future__ import annotations

import dataclasses

from bert_tf2.data_gen.packing import pack, truncate_seq_pair
from bert_tf2.data_gen.windows import max_context_windows, pair_windows
from bert_tf2.tasks.feature_extraction.reader import Line


@dataclasses.dataclass
class Feature:
    line: Line
    tokens: list  # [CLS] ... [SEP]: the tokens written to the output
    input_ids: list
    input_type_ids: list


def featurize(line: Line, tokenizer, max_seq_length: int) -> Feature:
    # Only the pieces a row can keep (a pair is trimmed from the longer list): a long line costs
    # no more than the row it becomes.
    tokens_a = tokenizer.tokenize_prefix(line.text_a, max_seq_length - 2)
    tokens_b = tokenizer.tokenize_prefix(line.text_b, max_seq_length - 2) if line.text_b else None
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        tokens_a = tokens_a[:max_seq_length - 2]
    packed = pack(tokens_a, tokens_b or None, max_seq_length, tokenizer)
    length = sum(packed["input_mask"])
    tokens = ["[CLS]", *tokens_a, "[SEP]"] + ([*tokens_b, "[SEP]"] if tokens_b else [])
    return Feature(line, tokens, packed["input_ids"][:length], packed["segment_ids"][:length])


@dataclasses.dataclass
class Window:
    """One row of a long line's windows (`--doc_stride`): its inputs, and where in the line's
    tokens each of its positions comes from."""
    line: Line
    tokens: list  # the line's tokens written to the output, shared by its windows
    input_ids: list
    input_type_ids: list
    number: int  # of this window among the line's
    count: int  # the line's windows
    read_from: list  # per token of `tokens`: (window number, position in that window's row)


def featurize_windows(line: Line, tokenizer, max_seq_length: int, doc_stride: int) -> list:
    """A line's windows (`data_gen.windows.pair_windows`). Each token of the cut text is read
    from its max-context window (the original run_squad's rule); `[CLS]`, `[SEP]` and the text
    kept whole from the first window. `tokens` are `[CLS] A [SEP] (B [SEP])` of the whole line,
    less the tail of a pair's shorter text where it had to be cut to half a row."""
    tokens_a = tokenizer.tokenize(line.text_a)
    tokens_b = (tokenizer.tokenize(line.text_b) if line.text_b else None) or None
    spans, long = pair_windows(len(tokens_a), len(tokens_b) if tokens_b else None,
                               max_seq_length, doc_stride)
    kept_a, kept_b = spans[0][0][1] if long == "b" else len(tokens_a), (
        None if tokens_b is None else spans[0][1][1] if long == "a" else len(tokens_b))
    tokens = ["[CLS]", *tokens_a[:kept_a], "[SEP]"]
    if tokens_b is not None:
        tokens += [*tokens_b[:kept_b], "[SEP]"]
    rows = []
    for a, b in spans:
        row_a = tokens_a[a[0]:a[0] + a[1]]
        row_b = None if b is None else tokens_b[b[0]:b[0] + b[1]]
        packed = pack(row_a, row_b, max_seq_length, tokenizer)
        rows.append((packed["input_ids"][:sum(packed["input_mask"])],
                     packed["segment_ids"][:sum(packed["input_mask"])]))
    # Where each of the line's tokens is read, in `tokens` order: (window, position in its row).
    cut = [a if long == "a" else b for a, b in spans]
    best = max_context_windows(cut, range(len(tokens_a) if long == "a" else len(tokens_b)))

    def from_best(offset):  # the cut text's tokens, after `offset` row positions
        return [(int(w), offset + t - cut[w][0]) for t, w in enumerate(best)]

    if long == "a":
        first = spans[0][0][1]  # A's tokens in the first window
        read_from = [(0, 0), *from_best(1), (0, 1 + first)]
        if tokens_b is not None:
            read_from += [(0, 2 + first + j) for j in range(kept_b + 1)]
    else:
        read_from = [(0, j) for j in range(kept_a + 2)] + from_best(kept_a + 2)
        read_from.append((0, kept_a + 2 + spans[0][1][1]))
    return [Window(line, tokens, ids, types, number, len(rows), read_from)
            for number, (ids, types) in enumerate(rows)]
