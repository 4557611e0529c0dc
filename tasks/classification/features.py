"""Sentence (pair) examples -> the original's classifier features, as TFRecords and back.

Conversion is the original `convert_single_example`: WordPiece both texts, trim a pair by popping
from the end of the longer one (B on a tie) to `max_seq_length - 3` tokens, a single text to
`max_seq_length - 2`, pack `[CLS] A [SEP] B [SEP]` with segment ids 0/1, pad with zeros
(`data_gen.packing`). Records keep the original's feature names (`input_ids`, `input_mask`,
`segment_ids`, `label_ids`, `is_real_example`) plus `example_index`, the row of the example in its
split, so predictions map back to example ids. `label_ids` is int64 for classification, float for
regression (STS-B), and for a multi-label task a float 0/1 vector with one entry per label
(multi-hot; an unlabelled test row has zeros).

Long documents (`doc_stride`, ours; the original truncates): a text longer than a row is cut into
overlapping windows (`document_windows`), one row each, all carrying the example's
`example_index` and labels (`data_gen.windows.pair_windows`: a single text in windows of
`max_seq_length - 2` tokens at 0, stride, 2 * stride, ..., the original run_squad's cut; a pair
that does not fit in windows over the longer text, B on a tie, the shorter one kept whole in every
row, or its first `(max_seq_length - 3) // 2` tokens if it is longer than that). Whatever fits in
one row gives the original's single row. `tasks.classification.serving` is the graph twin. Batches come from `data_gen.datasets.in_memory_dataset`.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from bert_tf2.data_gen import records
from bert_tf2.data_gen.batching import SEQUENCE_FEATURES
from bert_tf2.data_gen.errors import DataError
from bert_tf2.data_gen.packing import pack, truncate_seq_pair
from bert_tf2.data_gen.windows import pair_windows
from bert_tf2.tasks.classification.reader import InputExample


def convert_example(example: InputExample, index: int, label_map: dict | None,
                    max_seq_length: int, tokenizer, multi_label: bool = False) -> dict:
    """One example -> feature lists (name -> values), as the original's `convert_single_example`.

    `label_map` maps label strings to ids; None means regression (the label is a float). An
    unlabelled example (a test row) gets label 0. `multi_label`: the label is a tuple of names and
    `label_ids` their multi-hot vector.
    """
    tokens_a, tokens_b = _tokens(example, tokenizer, max_seq_length)
    if tokens_b is not None:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        del tokens_a[max_seq_length - 2:]
    return _row(tokens_a, tokens_b, _label_ids(example, label_map, multi_label), index,
                max_seq_length, tokenizer)


def document_windows(tokens_a: list, tokens_b: list | None, max_seq_length: int,
                     doc_stride: int) -> list:
    """`(A, B)` token lists of each window row of one example (B None: a single text), as
    `data_gen.windows.pair_windows` cuts them."""
    windows, _ = pair_windows(len(tokens_a), len(tokens_b) if tokens_b else None,
                              max_seq_length, doc_stride)
    return [(tokens_a[a[0]:a[0] + a[1]], None if b is None else tokens_b[b[0]:b[0] + b[1]])
            for a, b in windows]


def convert_document(example: InputExample, index: int, label_map: dict | None,
                     max_seq_length: int, tokenizer, multi_label: bool, doc_stride: int,
                     max_windows: int = 0) -> list:
    """The feature rows of one example's windows (the first `max_windows` of them, if set)."""
    windows = document_windows(*_tokens(example, tokenizer), max_seq_length, doc_stride)
    label = _label_ids(example, label_map, multi_label)
    return [_row(a, b, label, index, max_seq_length, tokenizer)
            for a, b in windows[:max_windows or None]]


def _tokens(example: InputExample, tokenizer, max_seq_length: int | None = None) -> tuple:
    """WordPieces of text A, and of text B or None: as the original, an empty second text (or
    one with no tokens) makes a single-text example. With `max_seq_length` (truncation), only
    the first `max_seq_length - 2` pieces of each: truncating a pair pops from the longer list,
    so pieces past that are popped anyway, and a long document costs only the pieces kept."""
    if max_seq_length is None:
        tokens_a = tokenizer.tokenize(example.text_a)
        return tokens_a, (tokenizer.tokenize(example.text_b) if example.text_b else None) or None
    keep = max_seq_length - 2
    tokens_a = tokenizer.tokenize_prefix(example.text_a, keep)
    return tokens_a, (tokenizer.tokenize_prefix(example.text_b, keep) if example.text_b
                      else None) or None


def _row(tokens_a: list, tokens_b: list | None, label_ids: list, index: int,
         max_seq_length: int, tokenizer) -> dict:
    """One feature row. As the original's second `if tokens_b:`, a B with no tokens left (its
    pair truncation, or a window, kept none: max_seq_length 3 or 4) packs as one text, with no
    second [SEP], as the in-graph `InputPacker` packs it."""
    return {**pack(tokens_a, tokens_b or None, max_seq_length, tokenizer), "label_ids": label_ids,
            "is_real_example": [1], "example_index": [index]}


def _label_ids(example: InputExample, label_map: dict | None, multi_label: bool) -> list:
    return (_multi_hot(example, label_map) if multi_label
            else [_label_value(example, label_map)])


def _label_value(example: InputExample, label_map: dict | None):
    if example.label is None:
        return 0.0 if label_map is None else 0
    if label_map is None:
        try:
            return float(example.label)
        except ValueError:
            raise DataError(f"example {example.guid}: label {example.label!r} is not a number "
                            f"(the task is a regression)") from None
    if example.label not in label_map:
        raise DataError(f"example {example.guid}: label {example.label!r} is not one of "
                        f"{', '.join(label_map)}")
    return label_map[example.label]


def _multi_hot(example: InputExample, label_map: dict) -> list:
    vector = [0.0] * len(label_map)
    for name in example.label or ():
        if name not in label_map:
            raise DataError(f"example {example.guid}: label {name!r} is not one of "
                            f"{', '.join(label_map)}")
        vector[label_map[name]] = 1.0
    return vector


def feature_spec(max_seq_length: int, regression: bool, multi_label_size: int = 0) -> dict:
    spec = {name: records.fixed_len([max_seq_length]) for name in SEQUENCE_FEATURES}
    if multi_label_size:
        spec["label_ids"] = records.fixed_len([multi_label_size], "float32")
    else:
        spec["label_ids"] = records.fixed_len([], "float32" if regression else "int64")
    spec["is_real_example"] = records.fixed_len([])
    spec["example_index"] = records.fixed_len([])
    return spec


def example_records(examples: Sequence[InputExample], labels: Sequence[str],
                    max_seq_length: int, tokenizer, multi_label: bool = False,
                    doc_stride: int | None = None, max_windows: int = 0) -> Iterable[bytes]:
    """Serialised records of `examples` in order (labels empty: regression); with `doc_stride`,
    every window of each, in order."""
    label_map = {label: i for i, label in enumerate(labels)} if labels else None
    floats = ("label_ids",) if label_map is None or multi_label else ()
    for index, example in enumerate(examples):
        if doc_stride:
            for row in convert_document(example, index, label_map, max_seq_length, tokenizer,
                                        multi_label, doc_stride, max_windows):
                yield records.serialize(row, float_features=floats)
        else:
            yield records.serialize(convert_example(example, index, label_map, max_seq_length,
                                                    tokenizer, multi_label), float_features=floats)


def load_features(path: str, max_seq_length: int, regression: bool,
                  multi_label_size: int = 0) -> dict:
    """Every record of a features file as NumPy arrays (int32 sequences), in file order;
    `multi_label_size` labels: `label_ids` is a float32 [rows, labels] multi-hot matrix."""
    features = records.read_records(path, feature_spec(max_seq_length, regression,
                                                       multi_label_size))
    for name in (*SEQUENCE_FEATURES, "example_index"):
        features[name] = features[name].astype(np.int32)
    if not regression and not multi_label_size:
        features["label_ids"] = features["label_ids"].astype(np.int32)
    return features
