"""SQuAD examples -> windowed span features, as the original `run_squad`, as TFRecords and back.

Conversion (`convert_example`): each word is WordPiece-tokenised on its own; the answer span is
refined on sub-tokens (`improve_answer_span`); the document is cut into windows of
`max_seq_length - len(query) - 3` tokens advancing by `min(length, doc_stride)`
(`data_gen.windows.fixed_stride_spans`), packed as `[CLS] query [SEP] window [SEP]`; each token's
"max context" window maximises `min(left, right) + 0.01 * length` (the first window wins ties); a
training window without the answer, and an impossible question, point start = end = 0 ([CLS]).
Where the original made no window for an empty context (and later crashed), we make one with no
document tokens.

Records keep the original's names (`unique_ids`, `input_ids`, `input_mask`, `segment_ids`,
`start_positions`, `end_positions`, `is_impossible`) and add what decoding needs, which the
original kept in memory: `example_index`, `doc_span_index`, `token_to_orig` (per position, the
word index or -1) and `token_is_max_context` (per position, 0/1).
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator, Sequence

import numpy as np

from bert_tf2.data_gen import records
from bert_tf2.data_gen.packing import pack
from bert_tf2.data_gen.windows import fixed_stride_spans, max_context_windows
from bert_tf2.tasks.squad.reader import SquadExample

FIRST_UNIQUE_ID = 1000000000
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids", "token_to_orig",
                     "token_is_max_context")
SCALAR_FEATURES = ("unique_ids", "start_positions", "end_positions", "is_impossible",
                   "example_index", "doc_span_index")


@dataclasses.dataclass(frozen=True)
class SquadSettings:
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64

    def check(self) -> None:
        if self.max_seq_length < self.max_query_length + 4:
            raise ValueError(f"max_seq_length={self.max_seq_length} leaves no room for the "
                             f"document after a {self.max_query_length}-token query "
                             f"(needs > max_query_length + 3)")
        if self.doc_stride < 1:
            raise ValueError(f"doc_stride={self.doc_stride} must be positive")


def improve_answer_span(doc_tokens: list, start: int, end: int, tokenizer,
                        answer_text: str) -> tuple[int, int]:
    """The shortest sub-token span inside [start, end] that spells the tokenised answer, if any
    ("(1895-1943)." holds the answer "1895" as a sub-token of its own)."""
    target = " ".join(tokenizer.tokenize(answer_text))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start:new_end + 1]) == target:
                return new_start, new_end
    return start, end


class _DocumentTokens:
    """A context's WordPiece tokens and their word indexes, tokenised once per paragraph."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._words = None
        self._value = None

    def __call__(self, words: list) -> tuple[list, list, list]:
        if words is not self._words:
            tokens, tok_to_orig, orig_to_tok = [], [], []
            for i, word in enumerate(words):
                orig_to_tok.append(len(tokens))
                pieces = self.tokenizer.tokenize(word)
                tokens += pieces
                tok_to_orig += [i] * len(pieces)
            self._words, self._value = words, (tokens, tok_to_orig, orig_to_tok)
        return self._value


def convert_example(example: SquadExample, example_index: int, tokenizer,
                    settings: SquadSettings, is_training: bool,
                    document=None) -> list:
    """The feature dicts (one per window) of one example; `unique_ids` are filled in later."""
    query = tokenizer.tokenize_prefix(example.question_text, settings.max_query_length)
    tokens, tok_to_orig, orig_to_tok = (document or _DocumentTokens(tokenizer))(
        example.doc_tokens)
    answer = None
    if is_training and not example.is_impossible:
        start = orig_to_tok[example.start_position]
        end = (orig_to_tok[example.end_position + 1] - 1
               if example.end_position < len(example.doc_tokens) - 1 else len(tokens) - 1)
        answer = improve_answer_span(tokens, start, end, tokenizer, example.orig_answer_text)
    spans = fixed_stride_spans(len(tokens), settings.max_seq_length - len(query) - 3,
                               settings.doc_stride)
    best_window = max_context_windows(spans, range(len(tokens)))
    offset = len(query) + 2
    features = []
    for span_index, (start, length) in enumerate(spans):
        packed = pack(query, tokens[start:start + length], settings.max_seq_length, tokenizer)
        padding = [0] * (settings.max_seq_length - (offset + length + 1))
        token_to_orig = [-1] * offset + tok_to_orig[start:start + length] + [-1]
        is_max = [0] * offset + [int(best_window[t] == span_index)
                                 for t in range(start, start + length)] + [0]
        start_position = end_position = 0
        if answer is not None and start <= answer[0] and answer[1] <= start + length - 1:
            start_position, end_position = answer[0] - start + offset, answer[1] - start + offset
        features.append({
            "unique_ids": [0],
            **packed,
            "start_positions": [start_position], "end_positions": [end_position],
            "is_impossible": [int(example.is_impossible)],
            "example_index": [example_index], "doc_span_index": [span_index],
            "token_to_orig": token_to_orig + [-1] * len(padding),
            "token_is_max_context": is_max + padding,
        })
    return features


def convert_examples(examples: Sequence[SquadExample], tokenizer, settings: SquadSettings,
                     is_training: bool) -> Iterator[dict]:
    """Every window of every example, in order, numbered from the original's first unique id."""
    settings.check()
    document = _DocumentTokens(tokenizer)
    unique_id = FIRST_UNIQUE_ID
    for index, example in enumerate(examples):
        for feature in convert_example(example, index, tokenizer, settings, is_training,
                                       document):
            feature["unique_ids"] = [unique_id]
            unique_id += 1
            yield feature


def feature_records(examples: Sequence[SquadExample], tokenizer, settings: SquadSettings,
                    is_training: bool) -> Iterable[bytes]:
    for feature in convert_examples(examples, tokenizer, settings, is_training):
        yield records.serialize(feature)


def load_features(path: str, max_seq_length: int) -> dict:
    """Every record of a features file as int32 NumPy arrays, in file order."""
    spec = {name: records.fixed_len([max_seq_length]) for name in SEQUENCE_FEATURES}
    spec.update({name: records.fixed_len([]) for name in SCALAR_FEATURES})
    features = records.read_records(path, spec)
    for name in spec:
        if name != "unique_ids":
            features[name] = features[name].astype(np.int32)
    return features


def model_features(features: dict, is_training: bool) -> dict:
    """What the input pipeline feeds: the encoder's inputs, the training targets, and each
    window's row (`example_index` in `classifier_dataset`'s sense), by which predictions are
    matched back to the windows."""
    names = ["input_ids", "input_mask", "segment_ids"]
    if is_training:
        names += ["start_positions", "end_positions"]
    rows = len(features["input_ids"])
    return {**{name: features[name] for name in names},
            "is_real_example": np.ones(rows, np.int32),
            "example_index": np.arange(rows, dtype=np.int32)}
