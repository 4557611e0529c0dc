"""A line of text -> its WordPieces and the encoder's inputs, as the original's extract_features.

Text A alone keeps its first `max_seq_length - 2` WordPieces; a pair (only when B has text and
WordPieces) is trimmed by `truncate_seq_pair` to `max_seq_length - 3`; the layout is
`[CLS] A [SEP] (B [SEP])` with segment 0 through the first `[SEP]`. Features are not padded here:
the batcher pads each batch to its own longest row.
"""
from __future__ import annotations

import dataclasses

from data_gen.packing import pack, truncate_seq_pair
from tasks.feature_extraction.reader import Line


@dataclasses.dataclass
class Feature:
    line: Line
    tokens: list  # [CLS] ... [SEP]: the tokens written to the output
    input_ids: list
    input_type_ids: list


def featurize(line: Line, tokenizer, max_seq_length: int) -> Feature:
    tokens_a = tokenizer.tokenize(line.text_a)
    tokens_b = tokenizer.tokenize(line.text_b) if line.text_b else None
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        tokens_a = tokens_a[:max_seq_length - 2]
    packed = pack(tokens_a, tokens_b or None, max_seq_length, tokenizer)
    length = sum(packed["input_mask"])
    tokens = ["[CLS]", *tokens_a, "[SEP]"] + ([*tokens_b, "[SEP]"] if tokens_b else [])
    return Feature(line, tokens, packed["input_ids"][:length], packed["segment_ids"][:length])
