"""Input packing in Python: one or two token lists -> the encoder's three padded id lists.

The original packs every fine-tuning input as `[CLS] A [SEP]`, or `[CLS] A [SEP] B [SEP]` with
segment ids 0 through the first [SEP] and 1 after, and pads ids, mask and segments with 0 to
`max_seq_length`; a pair too long is trimmed first by `truncate_seq_pair`. Classification packs
(sentence, sentence), SQuAD (question, window of the context), NER (a window of pieces) alone.
`graph_tokenizer.InputPacker` is the TensorFlow twin, for models that take raw text.
"""
from __future__ import annotations


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """The original `_truncate_seq_pair`: pop from the longer list (B on a tie) until they fit."""
    while len(tokens_a) + len(tokens_b) > max_length:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def pack(tokens_a: list, tokens_b: list | None, max_seq_length: int, tokenizer) -> dict:
    """`input_ids`, `input_mask`, `segment_ids` of `[CLS] A [SEP] (B [SEP])`, padded with 0.

    `tokens_b=None` packs A alone; an empty list packs `[CLS] A [SEP] [SEP]`. The tokens must
    already fit (`len(A) + len(B) + 3 <= max_seq_length`)."""
    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b is not None:
        tokens += [*tokens_b, "[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    padding = [0] * (max_seq_length - len(input_ids))
    return {"input_ids": input_ids + padding,
            "input_mask": [1] * len(input_ids) + padding,
            "segment_ids": segment_ids + padding}
