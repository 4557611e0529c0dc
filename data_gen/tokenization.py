"""The original BERT WordPiece tokenizer in pure Python, plus the span of every token in the input.

Checkpoints were trained on the ids of google-research/bert `tokenization.py`, so this module
reproduces it exactly (SPEC.md section 5): drop NUL, U+FFFD and Cc/Cf controls; map whitespace to
spaces; put spaces around CJK ideographs; split on whitespace; if lower-casing, lowercase and strip
accents (NFD, drop Mn); split off punctuation; then greedy longest-match-first WordPiece, where a
word longer than 200 characters or one that cannot be segmented becomes one `[UNK]`. Classes and
functions keep the original's names and signatures.

Two things are new and change no id:
- `tokenize_with_offsets` also gives each token's span `(start, end)` in code points of the text
  as passed (after `convert_to_unicode` for bytes), which SQuAD and NER alignment need.
  Lower-casing and accent stripping can change lengths, so every normalised character carries the
  first and last original character it came from; a token spans from the first origin of its first
  character to one past the last origin of its last character. A stripped accent belongs to the
  character before it (at the start of a word, to the one after it); a dropped control character
  inside a token is covered by its span, one between tokens by none.
- The text is cut into whitespace-free chunks by one regular expression, and each distinct chunk is
  analysed once and cached: about four times the original's speed on real text (bench/tokenizer_speed.py).
"""
import functools
import os
import re
import unicodedata
from array import array
from collections import OrderedDict
from typing import Callable, Iterable, Iterator, NamedTuple

import numpy as np

from bert_tf2.data_gen import vocab_sanity

# The CJK Unified Ideographs blocks of the original `_is_chinese_char` (not Hangul, not kana).
CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)
MAX_INPUT_CHARS_PER_WORD = 200  # a longer word becomes one [UNK]
UNK_TOKEN = "[UNK]"
_CACHE_SIZE = 1 << 17  # distinct chunks remembered per tokenizer; the cache is emptied when full
_ID_CACHE_SIZE = 1 << 19  # the same for chunk ids alone (about 80 MB when full)


class FullTokenizer:
    """Basic tokenisation then WordPiece: the original's API, plus character spans."""

    def __init__(self, vocab_file, do_lower_case: bool = True):
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
        self._start_caches()
        vocab_sanity.warn_if_casing_mismatch(self.vocab, do_lower_case, os.fspath(vocab_file))

    def _start_caches(self) -> None:
        self._cache = _BoundedCache(self._wordpieces)
        self._chunk_ids = _BoundedCache(self._chunk_token_ids, {"\0": _LINE_END_BYTES},
                                        size=_ID_CACHE_SIZE)

    def __getstate__(self) -> dict:  # the caches are rebuilt, not pickled
        return {name: value for name, value in vars(self).items()
                if name not in ("_cache", "_chunk_ids")}

    def __setstate__(self, state: dict) -> None:
        vars(self).update(state)
        self._start_caches()

    @property
    def do_lower_case(self) -> bool:
        return self.basic_tokenizer.do_lower_case

    def tokenize(self, text) -> list:
        """The WordPiece tokens of `text`, exactly as the original `FullTokenizer.tokenize`."""
        return [piece for _, pieces in self._chunk_pieces(text) for piece, _, _ in pieces]

    def tokenize_prefix(self, text, max_tokens: int) -> list:
        """`tokenize(text)[:max_tokens]`, reading only as much of `text` as those tokens need:
        a task that truncates (to `max_seq_length`, `max_query_length`) pays for the tokens it
        keeps, not for every token of a long document."""
        tokens = []
        if max_tokens <= 0:
            return tokens
        for _, pieces in self._chunk_pieces(text):
            tokens.extend(piece for piece, _, _ in pieces)
            if len(tokens) >= max_tokens:
                del tokens[max_tokens:]
                break
        return tokens

    def text_head(self, text: str, max_tokens: int) -> str:
        """The start of `text` that holds its first `max_tokens` tokens (the whole text when it
        has no more): `tokenize(text_head(t, n))[:n] == tokenize(t)[:n]`, cut after a whole
        chunk. A server that keeps only the first tokens of a text reads a 2 MB text in the
        memory of a short one, and tokenises the head with the fast batched path."""
        count = 0
        for offset, raw in self.basic_tokenizer.chunks(text):
            count += len(self._chunk_ids[raw]) // 4  # int32 ids, as the batched path caches
            if count >= max_tokens:
                return convert_to_unicode(text)[:offset + len(raw)]
        return text

    def text_heads(self, texts: list, max_tokens: int) -> list:
        """`texts` with each long one cut to its `text_head` (a text of under 8 characters per
        kept token is left whole: cutting it would cost more than it saves)."""
        return [self.text_head(text, max_tokens) if len(text) > 8 * max_tokens + 64 else text
                for text in texts]

    def tokenize_with_offsets(self, text) -> tuple:
        """`(tokens, starts, ends)`: each token's code-point span in `convert_to_unicode(text)`.

        `text[start:end]` is where the token came from, "##" aside: after the tokenizer's own
        cleaning and normalisation it equals the token (for `[UNK]`, its whole word), except that
        a piece cut inside one original character (a Hangul syllable decomposed into jamo when
        lower-casing) spans that whole character.
        """
        tokens, starts, ends = [], [], []
        for offset, pieces in self._chunk_pieces(text):
            for piece, start, end in pieces:
                tokens.append(piece)
                starts.append(offset + start)
                ends.append(offset + end)
        return tokens, starts, ends

    def convert_tokens_to_ids(self, tokens) -> list:
        return convert_by_vocab(self.vocab, tokens)

    def tokenize_to_ids(self, text) -> list:
        """`convert_tokens_to_ids(tokenize(text))`, many times faster on running text."""
        ids, _ = self.tokenize_lines_to_ids([convert_to_unicode(text)])
        return ids.tolist()

    def tokenize_lines_to_ids(self, lines: list) -> tuple:
        """`(ids, counts)`: the ids of every line, one after another (int32), and how many each
        line has; the same ids as `tokenize` and `convert_tokens_to_ids` line by line.

        Why it is fast: the lines are joined around a NUL (which the tokenizer drops from any
        text, so it can mark the line ends) and cut into whitespace-free chunks in one pass
        (`str.split()` where that finds the same chunks, else the chunk pattern); each distinct
        chunk's ids are worked out once and cached as int32 bytes, so the ids of the whole text
        are one `bytes.join` of cache look-ups: no Python code runs per token or per chunk seen
        before, and real text repeats its chunks.
        """
        if not lines:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        text = join_lines(lines)
        if not _split_differs().search(text):
            chunks = text.split()  # the same chunks as the pattern's, found faster
        else:
            chunks = _chunk_pattern().findall(text)
        return split_at_line_ends(
            np.frombuffer(b"".join(map(self._chunk_ids.__getitem__, chunks)), dtype=np.int32))

    def convert_ids_to_tokens(self, ids) -> list:
        return convert_by_vocab(self.inv_vocab, ids)

    def unk_share(self, lines) -> float:
        """The share of `[UNK]` among the tokens of a sample; warns when it is abnormally high."""
        tokens = [token for line in lines for token in self.tokenize(line)]
        unk = self.wordpiece_tokenizer.unk_token
        return vocab_sanity.check_unk_share(tokens.count(unk), len(tokens))

    def _chunk_pieces(self, text) -> Iterator[tuple]:
        """`(offset, ((piece, start, end), ...))` per chunk, spans relative to the chunk."""
        for offset, raw in self.basic_tokenizer.chunks(text):
            yield offset, self._cache[raw]

    def _chunk_token_ids(self, chunk: str) -> bytes:
        """The ids of one chunk as int32 bytes: the original's steps for one whitespace token
        (clean, lowercase, NFD without Mn, split off punctuation, WordPiece), without the span
        bookkeeping of `_wordpieces`."""
        if chunk.isprintable() and "\ufffd" not in chunk:  # nothing the cleaner drops
            text = chunk
        else:
            text = "".join(c for c in chunk if not is_dropped(c))
        if self.do_lower_case:
            text = text.lower()
            if not text.isascii():
                text = "".join(c for c in unicodedata.normalize("NFD", text)
                               if unicodedata.category(c) != "Mn")
        if text.isascii():
            words = _ASCII_WORDS.findall(text)
        else:
            words = [text[start:end] for start, end in _split_on_punctuation(text)]
        ids, vocab = [], self.vocab
        for word in words:
            whole = vocab.get(word)  # WordPiece's first, longest candidate is the whole word
            if whole is not None and len(word) <= self.wordpiece_tokenizer.max_input_chars_per_word:
                ids.append(whole)
            else:
                ids.extend(vocab[piece] for piece, _, _ in
                           self.wordpiece_tokenizer.tokenize_word(word))
        return array("i", ids).tobytes()

    def _wordpieces(self, raw: str) -> tuple:
        chunk = self.basic_tokenizer.analyse(raw)
        return tuple(
            (piece, chunk.first[s + ps], chunk.last[s + pe - 1] + 1)
            for s, e in chunk.words
            for piece, ps, pe in self.wordpiece_tokenizer.tokenize_word(chunk.text[s:e]))


# Words of a printable ASCII chunk: each ASCII punctuation character alone (`is_punctuation`),
# and the runs between them.
_ASCII_WORDS = re.compile(r"[!-/:-@\[-`{-~]|[^!-/:-@\[-`{-~]+")
_LINE_END, LINE_END_ID = "\n\0\n", -1  # between lines in `tokenize_lines_to_ids`
_LINE_END_BYTES = np.array([LINE_END_ID], dtype=np.int32).tobytes()


def join_lines(lines: list) -> str:
    """The lines as one text for the ids-only paths: joined around a NUL, which the tokenizer
    drops from any text (a NUL inside a line is dropped here), so each NUL marks a line end and
    tokenizes to `LINE_END_ID`; the newlines around it keep it a chunk of its own."""
    text = _LINE_END.join(lines)
    if text.count("\0") != len(lines) - 1:
        text = _LINE_END.join(line.replace("\0", "") for line in lines)
    return text


def split_at_line_ends(ids: np.ndarray) -> tuple:
    """The ids of a `join_lines` text -> `(ids, counts)`: without the line-end markers, and how
    many ids each line has."""
    ends = np.flatnonzero(ids == LINE_END_ID)
    counts = np.diff(ends, prepend=-1, append=len(ids)) - 1
    return ids[ids != LINE_END_ID], counts


class _BoundedCache(dict):
    """chunk -> `compute(chunk)`, computed on a miss; emptied (but for `fixed`) when it reaches
    `size` entries. A dict, so that `map(cache.__getitem__, chunks)` looks up in C."""

    def __init__(self, compute: Callable[[str], object], fixed: dict = None,
                 size: int = _CACHE_SIZE):
        super().__init__(fixed or {})
        self._compute = compute
        self._fixed = dict(fixed or {})
        self._size = size

    def __missing__(self, chunk: str):
        if len(self) >= self._size:
            self.clear()
            self.update(self._fixed)
        value = self[chunk] = self._compute(chunk)
        return value


class Chunk(NamedTuple):
    """One whitespace-free chunk of text after cleaning and normalisation, cut into words.

    `first[k]` and `last[k]` are the first and last index in the raw chunk that normalised
    character `k` came from; `words` are `(start, end)` ranges of normalised characters.
    """
    text: str
    first: tuple
    last: tuple
    words: tuple


class BasicTokenizer:
    """Cleaning, whitespace and CJK splitting, optional lower-casing, punctuation splitting."""

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case
        self._cache = _BoundedCache(self.analyse)

    def tokenize(self, text) -> list:
        """The words of `text`, exactly as the original `BasicTokenizer.tokenize`."""
        return self.tokenize_with_offsets(text)[0]

    def tokenize_with_offsets(self, text) -> tuple:
        """`(words, starts, ends)`: each word, its code-point span in `convert_to_unicode(text)`."""
        words, starts, ends = [], [], []
        for offset, raw in self.chunks(text):
            chunk = self._cache[raw]
            for s, e in chunk.words:
                words.append(chunk.text[s:e])
                starts.append(offset + chunk.first[s])
                ends.append(offset + chunk.last[e - 1] + 1)
        return words, starts, ends

    @staticmethod
    def chunks(text) -> Iterator[tuple]:
        """`(offset, raw)` for each whitespace-free chunk of the text, CJK ideographs alone."""
        for match in _chunk_pattern().finditer(convert_to_unicode(text)):
            yield match.start(), match.group()

    def analyse(self, raw: str) -> Chunk:
        """Cleans and normalises one chunk and cuts it into words, keeping origins."""
        text, first, last = self._normalize(raw)
        return Chunk(text, first, last, tuple(_split_on_punctuation(text)))

    def _normalize(self, raw: str) -> tuple:
        """`(text, first, last)`: the chunk cleaned (and lowercased and accent-stripped)."""
        if raw.isascii() and raw.isprintable():  # nothing to drop; lower() keeps lengths
            origins = range(len(raw))
            return (raw.lower() if self.do_lower_case else raw), origins, origins
        kept = [(char, i) for i, char in enumerate(raw) if not is_dropped(char)]
        cleaned = "".join(char for char, _ in kept)
        if not self.do_lower_case:
            origins = tuple(i for _, i in kept)
            return cleaned, origins, origins
        # str.lower() may lengthen a character (U+0130 -> "i" U+0307) and picks the final sigma by
        # context, but that choice never changes a length, so per-character lengths give origins.
        origins = [i for char, i in kept for _ in char.lower()]
        items = [(d, o) for char, o in zip(cleaned.lower(), origins)
                 for d in unicodedata.normalize("NFD", char)]
        _canonical_order(items)
        return _strip_accents(items)


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece; continuation pieces carry the `##` prefix."""

    def __init__(self, vocab, unk_token: str = UNK_TOKEN,
                 max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        # No vocabulary entry is longer than this, so no longer candidate needs a look-up.
        self._longest = max((len(t) - 2 if t.startswith("##") else len(t) for t in vocab),
                            default=0)

    def tokenize(self, text) -> list:
        """WordPiece of each whitespace-separated word of `text` (the original's entry point)."""
        return [piece for word in convert_to_unicode(text).split()
                for piece, _, _ in self.tokenize_word(word)]

    def tokenize_word(self, word: str) -> list:
        """`(piece, start, end)` with character offsets in `word`; one `[UNK]` if impossible."""
        if len(word) > self.max_input_chars_per_word:
            return [(self.unk_token, 0, len(word))]
        pieces = []
        start = 0
        while start < len(word):
            end = min(len(word), start + self._longest)
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    pieces.append((piece, start, end))
                    break
                end -= 1
            else:
                return [(self.unk_token, 0, len(word))]
            start = end
        return pieces


# ------------------------------------------------------------------ text and vocabulary input
def convert_to_unicode(text) -> str:
    """`str` as is; UTF-8 `bytes` decoded with invalid sequences dropped, as the original does."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise ValueError(f"Unsupported string type: {type(text)}")


def load_vocab(vocab_file) -> "OrderedDict[str, int]":
    """Token -> id, id = line number; a token listed twice keeps its last line, as originally."""
    vocab = OrderedDict()
    for index, token in enumerate(load_vocab_tokens(vocab_file)):
        vocab[token] = index
    return vocab


def load_vocab_tokens(vocab_file) -> list:
    """The vocabulary's lines in order, split on "\\n" only and stripped, as the original reads."""
    path = os.fspath(vocab_file)
    if "://" in path:  # gs://, hdfs://: the original read vocabularies through tf.gfile
        import tensorflow as tf

        data = tf.io.gfile.GFile(path, "rb").read()
    else:
        with open(path, "rb") as f:
            data = f.read()
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line opens no new one
    from bert_tf2.data_gen.errors import (
        decode_line,  # a DataError naming the line that is not UTF-8
    )

    return [decode_line(path, number, line).strip() for number, line in enumerate(lines, 1)]


def special_token_ids(vocab, tokens=("[CLS]", "[SEP]"), source: str = "the vocabulary") -> list:
    """The ids of `tokens` in `vocab` (a token -> id mapping, or the tokens by id, where a repeated
    token keeps its last line as `load_vocab` does); a `DataError` names the vocabulary (`source`)
    and the tokens it lacks."""
    from bert_tf2.data_gen.errors import DataError

    ids = vocab if isinstance(vocab, dict) else {token: i for i, token in enumerate(vocab)}
    missing = [token for token in tokens if token not in ids]
    if missing:
        raise DataError(f"{source}: has no {' or '.join(missing)} entry (a BERT vocabulary "
                        f"lists [PAD], [UNK], [CLS], [SEP] and [MASK]); check --vocab_file")
    return [ids[token] for token in tokens]


def convert_by_vocab(vocab, items) -> list:
    """Maps each item through `vocab`; an item it lacks raises KeyError, as in the original."""
    return [vocab[item] for item in items]


# ------------------------------------------------------------------ character classes
def is_whitespace(char: str) -> bool:
    """Space, tab, newline, carriage return, or Unicode Zs: mapped to a space by the cleaner."""
    if char in " \t\n\r":
        return True
    return unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    """Unicode Cc or Cf, except tab, newline and carriage return (which count as whitespace)."""
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char: str) -> bool:
    """Unicode P*, plus the ASCII symbols 33-47, 58-64, 91-96, 123-126 (`$`, `+`, `^`, ...)."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_chinese_char(cp: int) -> bool:
    """A code point of the CJK ideograph blocks, which the original makes words of their own."""
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def is_dropped(char: str) -> bool:
    """Removed by the original's `_clean_text`: NUL, U+FFFD and control characters."""
    return char in "\x00\ufffd" or is_control(char)


def separates_words(char: str) -> bool:
    """What `str.split()` splits on once the cleaner has dropped what it drops.

    That is `is_whitespace`, plus U+2028 and U+2029, which the original leaves in the text and
    `str.split()` then splits on.
    """
    return char.isspace() and not is_dropped(char)


def code_point_ranges(predicate: Callable[[str], bool],
                      code_points: Iterable[int] = range(0x110000)) -> list:
    """Maximal ranges `(lo, hi)` of the code points whose character satisfies `predicate`,
    among `code_points` (ascending; all of Unicode unless given)."""
    ranges = []
    for cp in code_points:
        if predicate(chr(cp)):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    return ranges


@functools.cache
def classified_code_points() -> tuple:
    """The code points Unicode gives a class other than unassigned (Cn), private use (Co) or
    surrogate (Cs): 144,762 of 1.1 million (Python 3.11's Unicode 14). Every character class above is false on the
    rest, so `code_point_ranges(predicate, classified_code_points())` gives the same ranges as
    a scan of all of Unicode (tests/test_graph_tokenizer.py), several times faster."""
    category = unicodedata.category
    return tuple(cp for cp in range(0x110000) if category(chr(cp)) not in ("Cn", "Co", "Cs"))


@functools.cache
def _whitespace() -> list:
    """Every character that `str.isspace` calls whitespace (`re`'s `\\s` is the same class),
    found in one C pass rather than 1.1 million Python calls."""
    return re.findall(r"\s", "".join(map(chr, range(0x110000))))


@functools.cache
def _word_separator_ranges() -> list:
    """`code_point_ranges(separates_words)`, from the few whitespace characters."""
    return code_point_ranges(separates_words, map(ord, _whitespace()))


@functools.cache
def _split_differs() -> "re.Pattern":
    """Characters where `str.split()` cuts text into other chunks than `_chunk_pattern`: what
    `str.split()` splits on but the cleaner drops (\\x0b, \\x0c, \\x1c-\\x1f, \\x85), and CJK
    ideographs (each one is a chunk of its own)."""
    dropped_spaces = code_point_ranges(lambda char: not separates_words(char),
                                       map(ord, _whitespace()))
    return re.compile(f"[{_class_members(dropped_spaces)}{_class_members(CJK_RANGES)}]")


@functools.cache
def _chunk_pattern() -> "re.Pattern":
    """A CJK ideograph alone, or a run of anything but word separators and CJK ideographs."""
    cjk = _class_members(CJK_RANGES)
    spaces = _class_members(_word_separator_ranges())
    return re.compile(f"[{cjk}]|[^{spaces}{cjk}]+")


def _class_members(ranges) -> str:
    """Code point ranges as the inside of a `re` character class."""
    return "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)


# ------------------------------------------------------------------ normalisation details
def _canonical_order(items: list) -> None:
    """Sorts each run of combining (non-starter) characters by combining class, as NFD does.

    Decomposing character by character and then reordering is exactly NFD of the whole string,
    and lets each `(char, origin)` pair keep its origin.
    """
    i = 0
    while i < len(items):
        if not unicodedata.combining(items[i][0]):
            i += 1
            continue
        j = i
        while j < len(items) and unicodedata.combining(items[j][0]):
            j += 1
        items[i:j] = sorted(items[i:j], key=lambda item: unicodedata.combining(item[0]))
        i = j


def _strip_accents(items: list) -> tuple:
    """Drops Mn characters; each one's origin joins the character before it (else after it)."""
    chars, first, last = [], [], []
    pending = None  # origin of the marks that precede every kept character
    for char, origin in items:
        if unicodedata.category(char) == "Mn":
            if chars:
                last[-1] = max(last[-1], origin)
            elif pending is None:
                pending = origin
            continue
        chars.append(char)
        first.append(origin if pending is None else min(pending, origin))
        last.append(origin)
        pending = None
    return "".join(chars), tuple(first), tuple(last)


def _split_on_punctuation(text: str) -> Iterator[tuple]:
    """`(start, end)` of each word: every punctuation character alone, the runs between them."""
    start = None
    for k, char in enumerate(text):
        if is_punctuation(char):
            if start is not None:
                yield start, k
                start = None
            yield k, k + 1
        elif start is None:
            start = k
    if start is not None:
        yield start, len(text)
