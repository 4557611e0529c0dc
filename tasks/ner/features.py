"""NER sentences -> WordPiece windows with first-piece labels, TFRecords, tf.data, back to words.

Why: BERT tags WordPieces, CoNLL scores words. As the original BERT authors did for CoNLL-2003,
each word is labelled on its first piece only; the other pieces, [CLS], [SEP] and padding get
label id -1 (no loss, no score). A sentence can be longer than the model's window, so instead of
truncating it (which drops words and makes the score wrong), long sentences are cut into
overlapping windows and every word is read back from exactly one of them.

Alignment (`convert_sentence`):
- each word is tokenised on its own (`tokenizer.tokenize(word)`), so pieces never straddle words.
  A word that yields no piece at all (only control or other dropped characters) becomes one
  `[UNK]`, so every word keeps a position and a prediction and the output has one tag per input
  word, as the scorer needs;
- a window holds at most `max_seq_length - 2` pieces between [CLS] and [SEP]
  (`data_gen.windows.word_aligned_spans`). Windows start at a word's first piece and end at a
  word boundary, so no word is labelled from a truncated piece
  sequence; only a word longer than a whole window is cut, at the window's end (its first piece is
  what counts). The next window starts `doc_stride` pieces later (at most the window's length),
  moved back to the first piece of the word found there, or forward to the next word if that
  would not advance: windows overlap by at least `window - doc_stride` pieces, and every word's
  first piece is in some window;
- a word's prediction is read from the window where its first piece has the most context, SQuAD's
  rule: the largest `min(left, right) + 0.01 * window_pieces`, left/right counted in pieces within
  the window, the earlier window on a tie. `is_max_context` is 1 on that first piece only, so
  over all windows of a sentence it is 1 exactly once per word.

Features per window: `input_ids`, `input_mask`, `segment_ids` (all 0), `label_ids` (first pieces:
the label id; elsewhere -1; unlabelled sentences -1 everywhere), `word_ids` (the word index on
every piece of a word, -1 on [CLS], [SEP], padding), `is_max_context`, and the scalars
`example_index` (the sentence's index in its split), `window_index`, `num_words` (the sentence's
word count, so `reassemble` can tell a missing word) and `is_real_example` (1; 0 on the copies
`ner_dataset` pads evaluation with). The input pipeline is the shared one
(`data_gen.datasets.in_memory_dataset`: in-memory records, a seeded permutation per epoch,
sharding, padding for replicas), with every per-position feature cut to the batch's longest window.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from bert_tf2.data_gen import records
from bert_tf2.data_gen.batching import Batching
from bert_tf2.data_gen.datasets import in_memory_dataset
from bert_tf2.data_gen.errors import DataError
from bert_tf2.data_gen.packing import pack
from bert_tf2.data_gen.windows import max_context_windows, word_aligned_spans
from bert_tf2.tasks.ner.reader import Sentence

IGNORED = -1  # label id / word id of positions that are not a word's first piece
UNK_TOKEN = "[UNK]"
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids", "label_ids", "word_ids",
                     "is_max_context")
SCALAR_FEATURES = ("example_index", "window_index", "num_words", "is_real_example")


def word_pieces(words: Sequence[str], tokenizer) -> list[list[str]]:
    """Each word's WordPiece tokens; `[UNK]` for a word the tokenizer turns into nothing."""
    return [tokenizer.tokenize(word) or [UNK_TOKEN] for word in words]


def convert_sentence(sentence: Sentence, sentence_index: int, label_map: dict | None,
                     max_seq_length: int, tokenizer, doc_stride: int) -> list[dict]:
    """The features (name -> list) of each window of `sentence`, in window order.

    `label_map` maps tags to ids; None or an unlabelled sentence gives label ids -1 throughout.
    A tag outside `label_map` is a DataError naming the file and line.
    """
    if max_seq_length < 3:
        raise ValueError(f"max_seq_length {max_seq_length} leaves no room for a word")
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be positive, not {doc_stride}")
    pieces = word_pieces(sentence.words, tokenizer)
    word_label_ids = _label_ids(sentence, label_map)
    lengths = [len(p) for p in pieces]
    spans = word_aligned_spans(lengths, max_seq_length - 2, doc_stride)
    flat_pieces = [piece for word in pieces for piece in word]
    piece_word = [w for w, length in enumerate(lengths) for _ in range(length)]
    word_starts = [int(s) for s in np.cumsum([0, *lengths[:-1]])] if lengths else []
    best = max_context_windows(spans, word_starts)
    features = []
    for window_index, (start, length) in enumerate(spans):
        end = start + length
        tokens = ["[CLS]", *flat_pieces[start:end], "[SEP]"]
        word_ids = [IGNORED, *piece_word[start:end], IGNORED]
        label_ids = [IGNORED] * len(tokens)
        is_max_context = [0] * len(tokens)
        for position in range(1, len(tokens) - 1):
            word = word_ids[position]
            if word_starts[word] == start + position - 1:  # the word's first piece
                label_ids[position] = word_label_ids[word]
                is_max_context[position] = int(best[word] == window_index)
        padding = max_seq_length - len(tokens)
        features.append({
            **pack(flat_pieces[start:end], None, max_seq_length, tokenizer),
            "label_ids": label_ids + [IGNORED] * padding,
            "word_ids": word_ids + [IGNORED] * padding,
            "is_max_context": is_max_context + [0] * padding,
            "example_index": [sentence_index],
            "window_index": [window_index],
            "num_words": [len(sentence.words)],
            "is_real_example": [1],
        })
    return features


def _label_ids(sentence: Sentence, label_map: dict | None) -> list[int]:
    if label_map is None or sentence.labels is None:
        return [IGNORED] * len(sentence.words)
    if len(sentence.labels) != len(sentence.words):
        raise DataError(f"{sentence.path}:{sentence.line}: {len(sentence.words)} words but "
                        f"{len(sentence.labels)} labels")
    ids = []
    for index, tag in enumerate(sentence.labels):
        if tag not in label_map:
            raise DataError(f"{sentence.path}:{sentence.word_line(index)}: label {tag!r} is not "
                            f"one of {', '.join(label_map)}")
        ids.append(label_map[tag])
    return ids


# ----------------------------------------------------------------------------- records


def feature_spec(max_seq_length: int) -> dict:
    spec = {name: records.fixed_len([max_seq_length]) for name in SEQUENCE_FEATURES}
    spec.update({name: records.fixed_len([]) for name in SCALAR_FEATURES})
    return spec


def example_records(sentences: Sequence[Sentence], labels: Sequence[str] | None,
                    max_seq_length: int, tokenizer, doc_stride: int) -> Iterable[bytes]:
    """Serialised records of every window of `sentences`, in order (labels None: unlabelled)."""
    label_map = {label: i for i, label in enumerate(labels)} if labels else None
    for index, sentence in enumerate(sentences):
        for features in convert_sentence(sentence, index, label_map, max_seq_length, tokenizer,
                                         doc_stride):
            yield records.serialize(features)


def load_features(path: str, max_seq_length: int) -> dict:
    """Every record of a features file as int32 NumPy arrays, in file order."""
    return {name: value.astype(np.int32) for name, value in
            records.read_records(path, feature_spec(max_seq_length)).items()}


def features_as_arrays(features: Sequence[dict]) -> dict:
    """`convert_sentence` outputs (a list of window dicts) as `load_features` would return them."""
    return {name: np.array([f[name] if name in SEQUENCE_FEATURES else f[name][0]
                            for f in features], np.int32)
            for name in (*SEQUENCE_FEATURES, *SCALAR_FEATURES)}


# ----------------------------------------------------------------------------- tf.data


def _add_label_weights(batch: dict) -> dict:
    """`label_weights`: 1.0 on labelled first pieces of real windows, else 0.0."""
    batch = dict(batch)
    weights = (batch["label_ids"] >= 0) & (batch["is_real_example"] != 0)[:, None]
    if isinstance(weights, np.ndarray):  # NumPy batches (JAX, PyTorch)
        batch["label_weights"] = weights.astype(np.float32)
    else:
        import tensorflow as tf

        batch["label_weights"] = tf.cast(weights, tf.float32)
    return batch


def ner_dataset(features: dict, batch_size: int, is_training: bool, seed: int = 0,
                input_context=None, batching=None):
    """Batches of window features (from `load_features`), as `in_memory_dataset` makes them.

    Training repeats in a new seeded permutation of the windows every epoch and drops the last
    partial batch; evaluation reads each window once, in order (padded with copies marked
    `example_index` -1 and `is_real_example` 0 for several replicas). Each batch also carries
    `label_weights` (float32: 1.0 where the loss and the scores read a label). `label_ids` keep
    -1 on ignored positions: a loss must read them through `label_weights`.
    """
    return in_memory_dataset(features, batch_size, is_training, seed=seed,
                             input_context=input_context, batching=batching or Batching(),
                             sequence_features=(*SEQUENCE_FEATURES, "label_weights"),
                             transform=_add_label_weights)


# ----------------------------------------------------------------------------- back to words


def _rows(predictions) -> list[np.ndarray]:
    """Per-window rows of predictions: label ids [W] per row (logits [W, C] are arg-maxed)."""
    parts = [predictions] if isinstance(predictions, np.ndarray) else list(predictions)
    rows = []
    for part in parts:
        part = np.asarray(part)
        if part.ndim == 1:  # a single row
            part = part[None]
        if part.ndim == 3:
            part = part.argmax(axis=-1)
        if part.ndim != 2:
            raise ValueError(f"predictions of shape {part.shape}: expected [windows, positions] "
                             f"ids or [windows, positions, labels] logits")
        rows.extend(part)
    return rows


def _feature_rows(features) -> list[tuple[int, np.ndarray, np.ndarray, int]]:
    """(example_index, word_ids, is_max_context, num_words) of every window row, in order."""
    parts = [features] if isinstance(features, Mapping) else list(features)
    if parts and np.ndim(parts[0]["word_ids"]) == 1:  # convert_sentence windows
        parts = [features_as_arrays(parts)]
    rows = []
    for part in parts:
        example_index = np.asarray(part["example_index"]).reshape(-1)
        count = len(example_index)
        word_ids = np.asarray(part["word_ids"]).reshape(count, -1)
        is_max_context = np.asarray(part["is_max_context"]).reshape(count, -1)
        num_words = np.asarray(part["num_words"]).reshape(-1)
        rows.extend(zip(example_index.tolist(), word_ids, is_max_context, num_words.tolist()))
    return rows


def reassemble(features, logits_or_pred_ids, num_sentences: int) -> list[list[int]]:
    """One predicted label id per word of every sentence, in order, from per-window outputs.

    `features`: `load_features`' arrays, a list of `convert_sentence` windows, or a list of the
    batches `ner_dataset` gave (as NumPy or eager tensors). `logits_or_pred_ids`, row-aligned
    with them: an array [windows, width] of ids or [windows, width, labels] of logits, or a list
    of such per-batch arrays (widths may differ between batches, as trimmed batches do). Rows
    with `example_index` -1 (evaluation padding) are skipped. Each word is read where
    `is_max_context` is 1; a word read twice or never, or a sentence without windows, is a
    ValueError.
    """
    feature_rows = _feature_rows(features)
    rows = _rows(logits_or_pred_ids)
    if len(rows) != len(feature_rows):
        raise ValueError(f"{len(rows)} prediction rows for {len(feature_rows)} windows")
    predicted: list[list[int] | None] = [None] * num_sentences
    filled: list[list[bool] | None] = [None] * num_sentences
    for row, (sentence, word_ids, is_max_context, num_words) in enumerate(feature_rows):
        if sentence < 0:
            continue
        if sentence >= num_sentences:
            raise ValueError(f"window {row} belongs to sentence {sentence}, but there are only "
                             f"{num_sentences}")
        if predicted[sentence] is None:
            predicted[sentence] = [0] * num_words
            filled[sentence] = [False] * num_words
        for position in np.flatnonzero(is_max_context):
            if position >= len(rows[row]):
                raise ValueError(f"window {row}: a word at position {position} is beyond the "
                                 f"{len(rows[row])} predicted positions")
            word = int(word_ids[position])
            if filled[sentence][word]:
                raise ValueError(f"sentence {sentence}: word {word} is predicted twice")
            filled[sentence][word] = True
            predicted[sentence][word] = int(rows[row][position])
    for sentence, done in enumerate(filled):
        if done is None:
            raise ValueError(f"sentence {sentence} has no window")
        if not all(done):
            raise ValueError(f"sentence {sentence}: word {done.index(False)} has no prediction")
    return predicted
