"""SQuAD v1.1/v2.0 JSON -> examples -> windowed span features, as the original `run_squad`.

Reading (`read_squad_examples`): each context is split into words on the original's whitespace
(space, tab, CR, LF, U+202F), keeping `char_to_word_offset`; a training answer's character span
becomes a word span, and an answer whose words do not contain its text (odd Unicode) is skipped
with a warning, as the original does. Where the original refused a training question with more
than one answer, the first answer is used (SQuAD's dev files, which we split to train on here,
list up to three).

Conversion (`convert_example`): each word is WordPiece-tokenised on its own; the answer span is
refined on sub-tokens (`improve_answer_span`); the document is cut into windows of
`max_seq_length - len(query) - 3` tokens advancing by `min(length, doc_stride)`, packed as
`[CLS] query [SEP] window [SEP]`; each token's "max context" window maximises
`min(left, right) + 0.01 * length` (the first window wins ties); a training window without the
answer, and an impossible question, point start = end = 0 ([CLS]). Where the original made no
window for an empty context (and later crashed), we make one with no document tokens.

Records keep the original's names (`unique_ids`, `input_ids`, `input_mask`, `segment_ids`,
`start_positions`, `end_positions`, `is_impossible`) and add what decoding needs, which the
original kept in memory: `example_index`, `doc_span_index`, `token_to_orig` (per position, the
word index or -1) and `token_is_max_context` (per position, 0/1).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Iterable, Iterator, Sequence

import numpy as np

from data_gen.task_data import DataError, read_records

logger = logging.getLogger(__name__)

WHITESPACE = frozenset(" \t\r\n\u202f")
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


@dataclasses.dataclass
class SquadExample:
    qas_id: str
    question_text: str
    doc_tokens: list  # the context's whitespace words (shared by the paragraph's questions)
    orig_answer_text: str | None = None
    start_position: int | None = None  # word indexes of the answer (training)
    end_position: int | None = None
    is_impossible: bool = False


def whitespace_words(text: str) -> tuple[list, list]:
    """`(words, char_to_word_offset)`: the original's split, and each character's word index
    (whitespace belongs to the word before it; -1 before the first word)."""
    words, offsets = [], []
    previous_is_space = True
    for char in text:
        if char in WHITESPACE:
            previous_is_space = True
        else:
            if previous_is_space:
                words.append(char)
            else:
                words[-1] += char
            previous_is_space = False
        offsets.append(len(words) - 1)
    return words, offsets


def read_squad_examples(path: str, is_training: bool, version_2: bool = False) -> list:
    """Every question of a SQuAD file, in file order (training: those whose answer is found)."""
    from data_gen.squad_files import load_squad

    data = load_squad(path)["data"]
    examples, skipped, several = [], 0, 0
    for entry in data:
        for paragraph in entry["paragraphs"]:
            words, char_to_word = whitespace_words(paragraph["context"])
            for qa in paragraph["qas"]:
                example = SquadExample(qas_id=str(qa["id"]), question_text=qa["question"],
                                       doc_tokens=words)
                if is_training:
                    example.is_impossible = bool(qa.get("is_impossible", False)) and version_2
                    if example.is_impossible:
                        example.start_position = example.end_position = -1
                        example.orig_answer_text = ""
                    else:
                        answers = qa.get("answers") or []
                        if not answers:
                            raise DataError(f"{path}: question {qa['id']}: no answer to train on "
                                            f"(an impossible question needs "
                                            f"--version_2_with_negative and is_impossible)")
                        several += len(answers) > 1
                        if not _locate_answer(example, answers[0], char_to_word, path, qa["id"]):
                            skipped += 1
                            continue
                examples.append(example)
    if skipped:
        logger.warning("%s: skipped %d training question(s) whose answer text is not in the "
                       "context's words", path, skipped)
    if several:
        logger.info("%s: %d training question(s) list several answers; the first is used",
                    path, several)
    return examples


def _locate_answer(example: SquadExample, answer: dict, char_to_word: list, path: str,
                   qas_id) -> bool:
    text, offset = answer.get("text"), answer.get("answer_start")
    if not isinstance(text, str) or not isinstance(offset, int) or not text:
        raise DataError(f"{path}: question {qas_id}: an answer needs a non-empty 'text' and an "
                        f"integer 'answer_start'")
    if offset < 0 or offset + len(text) > len(char_to_word):
        raise DataError(f"{path}: question {qas_id}: answer_start {offset} + {len(text)} "
                        f"characters runs outside the {len(char_to_word)}-character context")
    start, end = char_to_word[offset], char_to_word[offset + len(text) - 1]
    actual = " ".join(example.doc_tokens[max(start, 0):end + 1])
    cleaned = " ".join(text.split())
    if start < 0 or actual.find(cleaned) == -1:
        logger.warning("%s: question %s: could not find answer %r in %r", path, qas_id,
                       cleaned, actual)
        return False
    example.orig_answer_text, example.start_position, example.end_position = text, start, end
    return True


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


def doc_spans(num_tokens: int, max_tokens: int, stride: int) -> list:
    """`(start, length)` windows over the document's tokens (one empty window for no tokens)."""
    spans, start = [], 0
    while True:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, stride)


def max_context_windows(spans: list, num_tokens: int) -> np.ndarray:
    """For each document token, the window where it has the most context (first on ties)."""
    best = np.full(num_tokens, -1)
    best_score = np.full(num_tokens, -np.inf)
    for index, (start, length) in enumerate(spans):
        positions = np.arange(start, start + length)
        score = np.minimum(positions - start, start + length - 1 - positions) + 0.01 * length
        better = score > best_score[positions]
        best[positions[better]] = index
        best_score[positions[better]] = score[better]
    return best


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
    query = tokenizer.tokenize(example.question_text)[:settings.max_query_length]
    tokens, tok_to_orig, orig_to_tok = (document or _DocumentTokens(tokenizer))(
        example.doc_tokens)
    answer = None
    if is_training and not example.is_impossible:
        start = orig_to_tok[example.start_position]
        end = (orig_to_tok[example.end_position + 1] - 1
               if example.end_position < len(example.doc_tokens) - 1 else len(tokens) - 1)
        answer = improve_answer_span(tokens, start, end, tokenizer, example.orig_answer_text)
    spans = doc_spans(len(tokens), settings.max_seq_length - len(query) - 3, settings.doc_stride)
    best_window = max_context_windows(spans, len(tokens))
    offset = len(query) + 2
    features = []
    for span_index, (start, length) in enumerate(spans):
        window = ["[CLS]", *query, "[SEP]", *tokens[start:start + length], "[SEP]"]
        real = len(window)
        padding = [0] * (settings.max_seq_length - real)
        token_to_orig = [-1] * offset + tok_to_orig[start:start + length] + [-1]
        is_max = [0] * offset + [int(best_window[t] == span_index)
                                 for t in range(start, start + length)] + [0]
        start_position = end_position = 0
        if answer is not None and start <= answer[0] and answer[1] <= start + length - 1:
            start_position, end_position = answer[0] - start + offset, answer[1] - start + offset
        features.append({
            "unique_ids": [0],
            "input_ids": tokenizer.convert_tokens_to_ids(window) + padding,
            "input_mask": [1] * real + padding,
            "segment_ids": [0] * offset + [1] * (length + 1) + padding,
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


def serialize(feature: dict) -> bytes:
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        for name, values in feature.items()})).SerializeToString()


def feature_records(examples: Sequence[SquadExample], tokenizer, settings: SquadSettings,
                    is_training: bool) -> Iterable[bytes]:
    for feature in convert_examples(examples, tokenizer, settings, is_training):
        yield serialize(feature)


def load_features(path: str, max_seq_length: int) -> dict:
    """Every record of a features file as int32 NumPy arrays, in file order."""
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64)
            for name in SEQUENCE_FEATURES}
    spec.update({name: tf.io.FixedLenFeature([], tf.int64) for name in SCALAR_FEATURES})
    features = read_records(path, spec)
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
