"""Tokenisation and input packing as Keras layers in the TensorFlow graph, with the original's ids.

Serving raw strings needs the tokenizer inside the SavedModel. tensorflow_text's own BERT tokenizers
(FastBertTokenizer, BertTokenizer) do not give the original's ids: they lowercase by NFKC case
folding ("…" -> "...", "½" -> "1⁄2", "ﬁ" -> "fi", "ß" -> "ss"), keep U+FFFD and invalid UTF-8 (as
[UNK]) and turn NUL and control characters into word breaks where the original drops all of them,
in cased mode split words at format characters such as U+200D, and limit words in bytes, not in
200 characters; on the shared data they give other ids on 94 lines. Their ShrinkLongestTrimmer
also trims a tie from the first segment where the original trims the second. So the graph is
assembled from smaller ops, with every character class generated from the predicates of
`data_gen.tokenization`, the one definition both tokenizers share:

  drop invalid UTF-8 -> drop NUL, U+FFFD, Cc/Cf -> [lowercase (ICU's full mapping with final
  sigma, as str.lower) -> NFD -> drop Mn] -> split at separators, keeping punctuation and CJK
  ideographs as words -> FastWordpieceTokenizer (greedy longest-match-first) -> a word over 200
  characters becomes one [UNK].

`GraphTokenizer.tokenize_with_offsets` also gives each token's span in the input, the spans of the
Python `FullTokenizer.tokenize_with_offsets` (SQuAD serving answers with a span of the context).

A SavedModel that uses these layers runs wherever `import tensorflow_text` has registered its ops.
"""
import functools
import os
import unicodedata
from typing import NamedTuple

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf2.data_gen import tokenization, vocab_sanity
from bert_tf2.modeling.encoder import INPUT_NAMES

_MAX_UTF8_BYTES_PER_CHAR = 4


class _Patterns(NamedTuple):
    """RE2 patterns for the graph, generated from the Python tokenizer's character predicates."""
    dropped: str  # removed by the cleaner
    accents: str  # Mn, removed after NFD when lower-casing
    split: str  # word boundaries: separators (dropped) or punctuation and CJK (kept as words)
    keep: str  # the boundaries that are words themselves


def _re2_class(ranges) -> str:
    return "[" + "".join(f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in ranges) + "]"


@functools.cache
def _patterns() -> _Patterns:
    """Built once per process, from the code points Unicode classifies (the classes are false
    elsewhere): 0.34 s where scanning all of Unicode for each took 2.3 s (AVX2-only EPYC)."""
    classified = tokenization.classified_code_points()

    def cp_ranges(predicate):
        return tokenization.code_point_ranges(predicate, classified)
    keep = _re2_class(
        cp_ranges(tokenization.is_punctuation) + list(tokenization.CJK_RANGES))
    return _Patterns(
        dropped=_re2_class(cp_ranges(tokenization.is_dropped)),
        accents=_re2_class(cp_ranges(lambda char: unicodedata.category(char) == "Mn")),
        split=_re2_class(cp_ranges(tokenization.separates_words)) + "|" + keep,
        keep=keep)


def _graph_vocabulary(tokens) -> list:
    """The tokens by id, earlier copies of a repeated token replaced by ones no word can match.

    The original keeps the last id of a repeated token; FastWordpieceTokenizer refuses repeats.
    A placeholder holds punctuation, which the basic tokenizer never leaves inside a word.
    """
    last = {token: index for index, token in enumerate(tokens)}
    taken = set(tokens)
    graph_tokens = []
    for index, token in enumerate(tokens):
        if last[token] != index:
            token = f"[repeated line {index}]"
            while token in taken:
                token += "]"
            taken.add(token)
        graph_tokens.append(token)
    return graph_tokens


class _PreprocessingLayer(keras.layers.Layer):
    """A layer that takes strings and ragged tensors as they are (keras-hub does the same)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True


@functools.cache
def _chunk_break_pattern() -> str:
    """Characters that end the Python tokenizer's whitespace-free chunks: word separators, and CJK
    ideographs (each a chunk of its own)."""
    return _re2_class(tokenization.code_point_ranges(tokenization.separates_words)
                      + list(tokenization.CJK_RANGES))


class _CharacterSpans:
    """The input's characters (flat over the batch), each normalised on its own, to map bytes of
    the normalised text back to the characters they came from.

    Characters are grouped as a kept one (non-empty once normalised; or a row's first) followed
    by the empty ones after it: dropped characters, which belong to no token, and stripped
    accents, which Python's `_strip_accents` gives to the kept character before them or, when
    the group opens a chunk (it starts with a separator, a CJK ideograph or the row), to the
    chunk's first kept character after them.
    """

    def __init__(self, tokenizer: "GraphTokenizer", code_points: tf.RaggedTensor):
        self.text = tf.strings.unicode_encode(tf.expand_dims(code_points.flat_values, -1), "UTF-8")
        size = tf.cast(tf.strings.length(tokenizer._normalized(self.text)), tf.int64)
        count = tf.size(self.text, out_type=tf.int64)
        index = tf.range(count)
        self.end = tf.cumsum(size)  # where each character's bytes end in the normalised texts
        self.begin = self.end - size
        self.row_first = index == tf.gather(code_points.row_starts(), code_points.value_rowids())
        self.breaks = tf.strings.regex_full_match(self.text, _chunk_break_pattern())
        kept = size > 0
        accent = ~kept & ~tf.strings.regex_full_match(self.text, tokenizer._patterns.dropped)
        leader = kept | self.row_first
        self.group = tf.cumsum(tf.cast(leader, tf.int64)) - 1
        # Python takes the origin of the first mark after NFD's canonical reordering: the first
        # character holding the first code point of the NFD of the group's marks.
        marks = tf.strings.unsorted_segment_join(
            tf.where(accent, self.text, ""), self.group, count)
        first_mark = tf.strings.unicode_decode(
            tf.strings.substr(tf_text.normalize_utf8(marks, "NFD"), 0, 1, unit="UTF8_CHAR"),
            "UTF-8")
        first_mark = first_mark.to_tensor(-1, shape=[None, 1])[:, 0]
        own_marks = tf.strings.unicode_decode(tf_text.normalize_utf8(self.text, "NFD"), "UTF-8")
        holds = tf.reduce_any(
            tf.equal(own_marks, tf.expand_dims(tf.gather(first_mark, self.group), -1)), axis=-1)
        self.first_accent = tf.math.unsorted_segment_min(
            tf.where(accent & holds, index, count), self.group, count)
        self.last_accent = tf.math.unsorted_segment_max(
            tf.where(accent, index, -1), self.group, count)
        self.opens_chunk = tf.math.unsorted_segment_max(
            tf.cast(leader & (~kept | self.breaks), tf.int32), self.group, count) > 0

    def spans(self, starts, ends) -> tuple:
        """Flat indices of the first and last character of each normalised byte range."""
        first = tf.searchsorted(self.end, starts, side="right", out_type=tf.int64)
        last = tf.searchsorted(self.end, ends, side="left", out_type=tf.int64)
        # Accents before the first kept character of a chunk belong to that character.
        group = tf.gather(self.group, tf.maximum(first - 1, 0))
        accent = tf.gather(self.first_accent, group)
        takes = ((starts == tf.gather(self.begin, first)) & ~tf.gather(self.row_first, first)
                 & ~tf.gather(self.breaks, first) & tf.gather(self.opens_chunk, group)
                 & (accent < first))
        first = tf.where(takes, accent, first)
        # Accents after a token's last character (in its chunk) are its own.
        accent = tf.gather(self.last_accent, tf.gather(self.group, last))
        takes = ((ends == tf.gather(self.end, last)) & ~tf.gather(self.breaks, last)
                 & (accent > last))
        return first, tf.where(takes, accent, last)


@keras.saving.register_keras_serializable(package="bert")
class GraphTokenizer(_PreprocessingLayer):
    """Strings `[batch]` -> WordPiece ids `[batch, (tokens)]` (int64, ragged), as FullTokenizer.

    `vocab` is a vocab.txt path or the list of tokens by id; `get_config` stores the list, so a
    `.keras` file carries its vocabulary.
    """

    def __init__(self, vocab, do_lower_case: bool = True,
                 unk_token: str = tokenization.UNK_TOKEN,
                 max_input_chars_per_word: int = tokenization.MAX_INPUT_CHARS_PER_WORD,
                 **kwargs):
        super().__init__(**kwargs)
        if isinstance(vocab, (str, os.PathLike)):
            source, vocab = os.fspath(vocab), tokenization.load_vocab_tokens(vocab)
        else:
            source, vocab = "the vocabulary", list(vocab)
        if unk_token not in vocab:
            raise ValueError(f"{source} has no {unk_token!r} entry: unknown words have no id")
        vocab_sanity.warn_if_casing_mismatch(vocab, do_lower_case, source=source)
        self.vocab = vocab
        self.do_lower_case = do_lower_case
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        self.unk_id = max(i for i, token in enumerate(vocab) if token == unk_token)
        self._patterns = _patterns()
        # A word of at most 200 characters has at most 800 bytes and is never cut short by the
        # op's byte limit; a longer word is replaced by a word one byte over the limit, which the
        # op turns into exactly one [UNK].
        max_bytes = _MAX_UTF8_BYTES_PER_CHAR * max_input_chars_per_word
        self._overlong_word = "x" * (max_bytes + 1)
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=_graph_vocabulary(vocab), suffix_indicator="##", max_bytes_per_word=max_bytes,
            token_out_type=tf.int64, unknown_token=unk_token, no_pretokenization=True)

    def call(self, texts):
        words = self.words(texts)
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > (
            self.max_input_chars_per_word)
        words = words.with_flat_values(
            tf.where(too_long, self._overlong_word, words.flat_values))
        return self._wordpiece.tokenize(words).merge_dims(-2, -1)

    def words(self, texts) -> tf.RaggedTensor:
        """The basic tokenizer's words `[batch, (words)]`, as `BasicTokenizer.tokenize`."""
        return tf_text.regex_split(self._normalized(texts), self._patterns.split,
                                   self._patterns.keep)

    def _normalized(self, texts) -> tf.Tensor:
        """Invalid UTF-8 and dropped characters removed, [lower-cased, accents stripped]."""
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="ignore")
        texts = tf.strings.regex_replace(texts, self._patterns.dropped, "")
        if self.do_lower_case:
            texts = tf.strings.lower(texts, encoding="utf-8")
            texts = tf_text.normalize_utf8(texts, "NFD")
            texts = tf.strings.regex_replace(texts, self._patterns.accents, "")
        return texts

    def tokenize_with_offsets(self, texts, unit: str = "BYTE") -> tuple:
        """`(ids, starts, ends)`, each `[batch, (tokens)]` int64: the ids of `__call__` and where
        each token came from in the input, the spans `FullTokenizer.tokenize_with_offsets` gives.

        `unit="BYTE"`: byte offsets in the input as given (invalid UTF-8 included);
        `unit="UTF8_CHAR"`: code-point offsets in the input decoded with invalid UTF-8 dropped
        (what `convert_to_unicode` makes of bytes; for valid UTF-8, the text itself).

        Normalisation changes lengths ("É" -> "e", "İ" -> "i" U+0307 -> "i"), so the offsets
        of the normalised words (from `FastWordpieceTokenizer.tokenize_with_offsets`) are mapped
        back through the input's characters, each normalised on its own: that gives the bytes
        each one occupies in the normalised text (normalising the whole text at once changes no
        length; the final sigma's two forms have the same). As in Python, a token spans the
        characters its bytes came from; a stripped accent belongs to the kept character before
        it in its whitespace-free chunk (at the start of a chunk, to the first one after it);
        a dropped character inside a token is covered, one at its edge is not; a token cut
        inside one character (a Hangul syllable split into jamo) spans that character; `[UNK]`
        spans its whole word. The spans equal Python's on random Unicode, invalid bytes and every
        SQuAD dev context; they can differ only where NFD's canonical reordering moves marks
        across a kept combining mark of non-zero class (U+1715, U+1734, U+1B44, U+302E, the
        musical symbols U+1D165...); the ids are the same there too.
        """
        if unit not in ("BYTE", "UTF8_CHAR"):
            raise ValueError(f"unit={unit!r}: expected 'BYTE' or 'UTF8_CHAR'")
        texts = tf.convert_to_tensor(texts, tf.string)
        code_points, char_offsets = tf.strings.unicode_decode_with_offsets(
            texts, "UTF-8", errors="ignore")
        chars = _CharacterSpans(self, code_points)

        normalized = self._normalized(texts)
        words, word_starts, _ = tf_text.regex_split_with_offsets(
            normalized, self._patterns.split, self._patterns.keep)
        word_bytes = tf.strings.length(words.flat_values)
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > (
            self.max_input_chars_per_word)
        ids, piece_starts, piece_ends = self._wordpiece.tokenize_with_offsets(
            words.with_flat_values(tf.where(too_long, self._overlong_word, words.flat_values)))
        # Pieces of a word over the limit are one [UNK] spanning the word, not its stand-in.
        word = ids.values.value_rowids()  # flat word index of each piece
        text = tf.gather(words.value_rowids(), word)
        long_piece = tf.gather(too_long, word)
        text_base = tf.cumsum(tf.strings.length(normalized, unit="BYTE"), exclusive=True)
        base = tf.gather(word_starts.flat_values, word) + tf.gather(
            tf.cast(text_base, tf.int64), text)
        starts = base + tf.where(long_piece, tf.zeros_like(word), piece_starts.flat_values)
        ends = base + tf.where(long_piece, tf.cast(tf.gather(word_bytes, word), tf.int64),
                               piece_ends.flat_values)
        first, last = chars.spans(starts, ends)  # flat character indices, `last` inclusive

        if unit == "UTF8_CHAR":
            row_start = tf.gather(code_points.row_starts(), text)
            starts, ends = first - row_start, last + 1 - row_start
        else:
            offsets = char_offsets.flat_values
            starts = tf.gather(offsets, first)
            ends = tf.gather(offsets, last) + tf.cast(
                tf.strings.length(tf.gather(chars.text, last)), tf.int64)
        ids = ids.merge_dims(-2, -1)
        return ids, ids.with_flat_values(starts), ids.with_flat_values(ends)

    def compute_output_spec(self, texts):
        return keras.KerasTensor(tuple(texts.shape) + (None,), dtype="int64", ragged=True)

    def unk_share(self, texts) -> float:
        """The share of `[UNK]` among the ids of `texts`; warns when it is abnormally high."""
        ids = self(tf.constant(list(texts), dtype=tf.string)).flat_values
        return vocab_sanity.check_unk_share(
            int(tf.reduce_sum(tf.cast(ids == self.unk_id, tf.int64))), int(tf.size(ids)))

    def get_config(self):
        return {**super().get_config(), "vocab": self.vocab, "do_lower_case": self.do_lower_case,
                "unk_token": self.unk_token,
                "max_input_chars_per_word": self.max_input_chars_per_word}


def truncated_lengths(length_a, length_b, budget):
    """Segment lengths after the original's `_truncate_seq_pair` (vectorised, closed form).

    The original pops one token at a time from the end of the longer segment, from B on a tie,
    until both fit in `budget`. So A keeps `min(len(A), max(budget - len(B), ceil(budget / 2)))`
    tokens and B `min(len(B), max(budget - len(A), floor(budget / 2)))`.
    """
    kept_a = tf.minimum(length_a, tf.maximum(budget - length_b, (budget + 1) // 2))
    kept_b = tf.minimum(length_b, tf.maximum(budget - length_a, budget // 2))
    return kept_a, kept_b


def _pack(segments, kept_a, kept_b, cls_id: int, sep_id: int) -> tuple:
    """`[CLS] A[:kept_a] [SEP]`, and `B[:kept_b] [SEP]` after it where `kept_b > 0` (`kept_b`
    None for one segment): ids and type ids (0 through the first [SEP], 1 after), ragged
    `[batch, (tokens)]`.

    Each output position is gathered from A's tokens, B's and the two special ids in one op:
    a few dozen ops, where `tf_text.combine_segments` and `tf.ragged.boolean_mask` made a pair's
    tokenizer and packer 3,131 ops, 0.8 CPU-seconds to trace (752 ops and 0.23 s now)."""
    a = segments[0]
    tokens = [a.flat_values]
    first_sep = kept_a + 1  # each row's position of the first [SEP]
    if kept_b is None:
        lengths = kept_a + 2
    else:
        b = segments[1]
        tokens.append(b.flat_values)
        lengths = tf.where(kept_b > 0, kept_a + kept_b + 3, kept_a + 2)
    pool = tf.concat([*tokens, tf.constant([cls_id, sep_id], a.flat_values.dtype)], 0)
    specials = tf.size(pool, out_type=lengths.dtype) - 2
    positions = tf.ragged.range(lengths)
    row, at = positions.value_rowids(), positions.flat_values
    sep = tf.gather(first_sep, row)
    index = tf.where(at == 0, specials, tf.where(
        at < sep, tf.gather(a.row_starts(), row) + at - 1, specials + 1))
    if kept_b is not None:
        in_b = (at > sep) & (at <= sep + tf.gather(kept_b, row))
        b_index = tf.size(a.flat_values, out_type=lengths.dtype) + tf.gather(
            b.row_starts(), row) + at - sep - 1
        index = tf.where(in_b, b_index, index)
    return (positions.with_flat_values(tf.gather(pool, index)),
            positions.with_flat_values(tf.cast(at > sep, tf.int32)))


@keras.saving.register_keras_serializable(package="bert")
class InputPacker(_PreprocessingLayer):
    """Ids of one or two segments -> the encoder's inputs, `[CLS] A [SEP] (B [SEP])`.

    Segments longer than `seq_length` allows are trimmed as the original fine-tuning does (a single
    segment keeps its first `seq_length - 2` tokens; a pair is trimmed by `truncated_lengths`).
    As in the original, a row whose second segment is empty packs as a single segment, and one
    whose second segment the truncation empties (`seq_length` 3 or 4) ends after A's [SEP].
    Outputs int32 `[batch, seq_length]`, or, with `dynamic_length`, `[batch, longest row]`:
    `input_word_ids` (padded with `pad_id`), `input_mask` (1 on tokens), `input_type_ids` (0
    through the first [SEP], 1 after).
    """

    def __init__(self, seq_length: int, cls_id: int, sep_id: int, pad_id: int = 0,
                 dynamic_length: bool = False, **kwargs):
        super().__init__(**kwargs)
        if seq_length < 3:
            raise ValueError(f"seq_length={seq_length}: [CLS] A [SEP] B [SEP] needs at least 3")
        self.seq_length = seq_length
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.pad_id = pad_id
        self.dynamic_length = dynamic_length

    @classmethod
    def for_tokenizer(cls, tokenizer: GraphTokenizer, seq_length: int, **kwargs):
        """A packer with the `[CLS]`, `[SEP]` and `[PAD]` ids of `tokenizer`'s vocabulary."""
        cls_id, sep_id = tokenization.special_token_ids(tokenizer.vocab)
        pad_id = {token: i for i, token in enumerate(tokenizer.vocab)}.get("[PAD]", 0)
        return cls(seq_length, cls_id=cls_id, sep_id=sep_id, pad_id=pad_id, **kwargs)

    def call(self, segments):
        segments = self._segment_list(segments)
        if any(not isinstance(s, tf.RaggedTensor) or s.ragged_rank != 1 for s in segments):
            raise ValueError("each segment must be ragged [batch, (tokens)]: merge a "
                             "[batch, (words), (pieces)] tokenizer output first "
                             "(merge_dims(-2, -1))")
        lengths = [segment.row_lengths() for segment in segments]
        single = tf.minimum(lengths[0], self.seq_length - 2)
        if len(segments) == 1:
            ids, type_ids = _pack(segments, single, None, self.cls_id, self.sep_id)
        else:
            # A row whose B has no tokens is a single-text example, as in the original
            # (`if tokens_b:`): A keeps `seq_length - 2` tokens. A B that the pair's truncation
            # empties (`seq_length` 3 or 4) is not followed by a second [SEP] either.
            kept_a, kept_b = truncated_lengths(*lengths, budget=self.seq_length - 3)
            ids, type_ids = _pack(segments, tf.where(lengths[1] > 0, kept_a, single), kept_b,
                                  self.cls_id, self.sep_id)
        shape = [None, None if self.dynamic_length else self.seq_length]
        outputs = (ids.to_tensor(self.pad_id, shape=shape),
                   tf.ones_like(ids).to_tensor(0, shape=shape),
                   type_ids.to_tensor(0, shape=shape))
        return {name: tf.cast(value, tf.int32) for name, value in zip(INPUT_NAMES, outputs)}

    def compute_output_spec(self, segments):
        batch = self._segment_list(segments)[0].shape[0]
        width = None if self.dynamic_length else self.seq_length
        return {name: keras.KerasTensor((batch, width), dtype="int32") for name in INPUT_NAMES}

    @staticmethod
    def _segment_list(segments) -> list:
        segments = list(segments) if isinstance(segments, (list, tuple)) else [segments]
        if len(segments) not in (1, 2):
            raise ValueError(f"{len(segments)} segments: the original packs one or two")
        return segments

    def get_config(self):
        return {**super().get_config(), "seq_length": self.seq_length, "cls_id": self.cls_id,
                "sep_id": self.sep_id, "pad_id": self.pad_id,
                "dynamic_length": self.dynamic_length}
