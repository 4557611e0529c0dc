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

A SavedModel that uses these layers runs wherever `import tensorflow_text` has registered its ops.
"""
import functools
import os
import unicodedata
from typing import NamedTuple

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from data_gen import tokenization, vocab_sanity
from modeling.encoder import INPUT_NAMES

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
    """Built once per process (scanning all code points takes about a second)."""
    cp_ranges = tokenization.code_point_ranges
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
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="ignore")
        texts = tf.strings.regex_replace(texts, self._patterns.dropped, "")
        if self.do_lower_case:
            texts = tf.strings.lower(texts, encoding="utf-8")
            texts = tf_text.normalize_utf8(texts, "NFD")
            texts = tf.strings.regex_replace(texts, self._patterns.accents, "")
        return tf_text.regex_split(texts, self._patterns.split, self._patterns.keep)

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


def _first(segment: tf.RaggedTensor, count) -> tf.RaggedTensor:
    """The first `count[i]` tokens of each row `i`."""
    positions = tf.ragged.range(segment.row_lengths())
    return tf.ragged.boolean_mask(segment, positions < tf.expand_dims(count, -1))


@keras.saving.register_keras_serializable(package="bert")
class InputPacker(_PreprocessingLayer):
    """Ids of one or two segments -> the encoder's inputs, `[CLS] A [SEP] (B [SEP])`.

    Segments longer than `seq_length` allows are trimmed as the original fine-tuning does (a single
    segment keeps its first `seq_length - 2` tokens; a pair is trimmed by `truncated_lengths`).
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
        ids = {token: i for i, token in enumerate(tokenizer.vocab)}
        missing = [token for token in ("[CLS]", "[SEP]") if token not in ids]
        if missing:
            raise ValueError(f"the vocabulary has no {' or '.join(missing)} entry to pack with")
        return cls(seq_length, cls_id=ids["[CLS]"], sep_id=ids["[SEP]"],
                   pad_id=ids.get("[PAD]", 0), **kwargs)

    def call(self, segments):
        segments = self._segment_list(segments)
        lengths = [segment.row_lengths() for segment in segments]
        if len(segments) == 1:
            kept = [tf.minimum(lengths[0], self.seq_length - 2)]
        else:
            kept = truncated_lengths(*lengths, budget=self.seq_length - 3)
        segments = [_first(segment, count) for segment, count in zip(segments, kept)]
        ids, type_ids = tf_text.combine_segments(
            segments, start_of_sequence_id=self.cls_id, end_of_segment_id=self.sep_id)
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
