"""Multiple-choice examples -> one record per example holding its N packed pairs, and back.

Each choice makes a sentence pair (`ChoiceExample.pair_texts`): the context's WordPieces as the
first segment, the question and the choice as the second, trimmed by the original's
`truncate_seq_pair` to `max_seq_length - 3` and packed `[CLS] A [SEP] B [SEP]` (`data_gen.packing`;
a second segment without tokens, or that the truncation empties, packs as a single text, as
the original classifier and the in-graph `InputPacker` do). An example with fewer choices than the task's `num_choices` is padded
with all-zero pairs whose `choice_mask` is 0: their scores are masked out, so they can never be
picked.

Features per example: `input_ids`, `input_mask`, `segment_ids` (`[num_choices, max_seq_length]`,
stored flat), `choice_mask` (`[num_choices]`), `label_ids` (0 when unlabelled), `example_index`
and `is_real_example`. Batches come from `data_gen.datasets.in_memory_dataset`, which trims the
last axis to the batch's longest pair.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from bert_tf2.data_gen import records
from bert_tf2.data_gen.batching import SEQUENCE_FEATURES
from bert_tf2.data_gen.errors import DataError
from bert_tf2.data_gen.packing import pack, truncate_seq_pair
from bert_tf2.tasks.multiple_choice.reader import ChoiceExample

# The score of a choice an example lacks (`choice_mask` 0): never picked, probability 0.
MASKED_LOGIT = -10000.0


def convert_example(example: ChoiceExample, index: int, num_choices: int, max_seq_length: int,
                    tokenizer) -> dict:
    """One example -> feature lists (name -> flat values)."""
    if len(example.choices) > num_choices:
        raise DataError(f"{example.path}:{example.line}: {len(example.choices)} choices, more "
                        f"than the {num_choices} the model scores (--num_choices)")
    # Only the pieces a row can keep: a pair is trimmed by popping from the longer list, so
    # pieces past `max_seq_length - 2` would be popped anyway (long contexts cost no more).
    context = tokenizer.tokenize_prefix(example.context, max_seq_length - 2)
    features = {name: [] for name in SEQUENCE_FEATURES}
    for second in example.pair_texts():
        tokens_a = list(context)
        tokens_b = tokenizer.tokenize_prefix(second, max_seq_length - 2) or None
        if tokens_b is None:
            del tokens_a[max_seq_length - 2:]
        else:
            truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
            tokens_b = tokens_b or None  # emptied by the truncation (max_seq_length 3 or 4)
        for name, values in pack(tokens_a, tokens_b, max_seq_length, tokenizer).items():
            features[name] += values
    padding = num_choices - len(example.choices)
    for name in SEQUENCE_FEATURES:
        features[name] += [0] * (padding * max_seq_length)
    return {**features,
            "choice_mask": [1] * len(example.choices) + [0] * padding,
            "label_ids": [example.label or 0],
            "is_real_example": [1],
            "example_index": [index]}


def example_records(examples: Sequence[ChoiceExample], num_choices: int, max_seq_length: int,
                    tokenizer) -> Iterable[bytes]:
    for index, example in enumerate(examples):
        yield records.serialize(convert_example(example, index, num_choices, max_seq_length,
                                                tokenizer))


def feature_spec(num_choices: int, max_seq_length: int) -> dict:
    spec = {name: records.fixed_len([num_choices * max_seq_length])
            for name in SEQUENCE_FEATURES}
    spec["choice_mask"] = records.fixed_len([num_choices])
    for name in ("label_ids", "is_real_example", "example_index"):
        spec[name] = records.fixed_len([])
    return spec


def load_features(path: str, num_choices: int, max_seq_length: int) -> dict:
    """Every record as int32 arrays, sequences shaped `[examples, num_choices, max_seq_length]`."""
    features = {name: value.astype(np.int32) for name, value in
                records.read_records(path, feature_spec(num_choices, max_seq_length)).items()}
    for name in SEQUENCE_FEATURES:
        features[name] = features[name].reshape(-1, num_choices, max_seq_length)
    return features
