"""The original's tokenizer compiled for ASCII text: ids of many lines in one pass, no Python per word.

Why: on text that does not repeat, the tokenizer was most of the pretraining-data time. Its chunk
cache (`FullTokenizer.tokenize_lines_to_ids`) answers a chunk seen before in C, but works out each
new chunk in Python (about 10 microseconds), and a real corpus keeps bringing new ones.

This is the compiled twin of that method, with the same contract (`(ids, counts)` per line).
Running text is mostly ASCII, and on ASCII the original's steps are simple byte rules: drop control
characters (every byte below 0x20 but tab, newline and carriage return, and 0x7f), cut at
space/tab/newline/carriage return, lower-case A-Z, make each ASCII punctuation character a word of
its own, then greedy longest-match-first WordPiece (a word over 200 characters, or one that cannot
be segmented, is one `[UNK]`). Those run here in one compiled pass, with the vocabulary in an
open-addressing hash table. A chunk (a run between ASCII spaces) holding any byte above 0x7f is
left to the Python tokenizer, which handles every Unicode rule (accents, CJK, Unicode spaces and
punctuation), and its ids are put back in place. The tests hold the ids equal to
`FullTokenizer.tokenize_lines_to_ids` and to the original's `tokenize` on every shared line.
"""
import numpy as np

from bert_tf2.data_gen.tokenization import LINE_END_ID, join_lines, split_at_line_ends
from bert_tf2.process import compiled

_EMPTY = -1
_FNV_BASIS, _FNV_PRIME, _HASH_MASK = 2166136261, 16777619, 0xFFFFFFFF  # 32-bit FNV-1a


class CompiledWordpiece:
    """`tokenizer.tokenize_lines_to_ids`, compiled for ASCII chunks (`tokenizer`: a
    `FullTokenizer`, which still handles the chunks that are not ASCII)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        vocab = tokenizer.vocab
        self._table, self._hashes, self._blob, self._starts = _vocabulary_table(vocab)
        self._longest = _longest_by_prefix(vocab)
        wordpiece = tokenizer.wordpiece_tokenizer
        self._unk_id = vocab[wordpiece.unk_token]
        self._max_chars = wordpiece.max_input_chars_per_word
        self._lower = tokenizer.do_lower_case

    def tokenize_lines_to_ids(self, lines: list) -> tuple:
        """`(ids, counts)`: the ids of every line, one after another (int32), and how many each
        line has; the same as `FullTokenizer.tokenize_lines_to_ids(lines)`."""
        if not lines:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        data = np.frombuffer(join_lines(lines).encode("utf-8", "surrogatepass"), dtype=np.uint8)
        ids, others = _ascii_ids(data, self._lower, self._table, self._hashes, self._blob,
                                 self._starts, self._unk_id, self._max_chars,
                                 self._longest)
        if len(others):  # chunks with bytes above 0x7f: the Python tokenizer's, put in place
            raw = data.tobytes()
            chunks = [raw[start:end].decode("utf-8", "surrogatepass") for start, end in others]
            filled, counts = self.tokenizer.tokenize_lines_to_ids(chunks)
            ids = _fill(ids, filled, np.concatenate(([0], np.cumsum(counts))))
        return split_at_line_ends(ids)


def _longest_by_prefix(vocab) -> np.ndarray:
    """`[continuation, b0, b1]`: the bytes of the longest token (after "##" for a continuation)
    whose first two bytes are b0, b1; no longer candidate can match, so none is tried."""
    longest = np.zeros((2, 256, 256), dtype=np.int32)
    for token in vocab:
        raw = token.encode("utf-8", "surrogatepass")
        continuation = raw.startswith(b"##")
        for kind, piece in ((0, raw), (1, raw[2:])) if continuation else ((0, raw),):
            if len(piece) >= 2:
                longest[kind, piece[0], piece[1]] = max(longest[kind, piece[0], piece[1]],
                                                        len(piece))
    return longest


def _vocabulary_table(vocab) -> tuple:
    """`(table, hashes, blob, starts)`: the tokens' UTF-8 bytes back to back (`blob`, token `i`
    at `blob[starts[i]:starts[i + 1]]`, `i` the id), each token's hash, and an open-addressing
    table of ids (`_EMPTY` where free) at least twice the vocabulary's size."""
    size = max(len(vocab), 1)
    tokens = [b""] * (max(vocab.values(), default=0) + 1)
    for token, index in vocab.items():
        tokens[index] = token.encode("utf-8", "surrogatepass")
    blob = np.frombuffer(b"".join(tokens), dtype=np.uint8).copy()
    starts = np.cumsum([0] + [len(token) for token in tokens]).astype(np.int64)
    slots = 1 << (2 * size - 1).bit_length()
    table = np.full(slots, _EMPTY, dtype=np.int32)
    hashes = np.zeros(len(tokens), dtype=np.int64)
    _fill_table(table, hashes, blob, starts, np.array(sorted(vocab.values()), dtype=np.int64))
    return table, hashes, blob, starts


@compiled.njit()
def _fill_table(table, hashes, blob, starts, ids):
    mask = len(table) - 1
    for index in ids:
        h = _FNV_BASIS
        for k in range(starts[index], starts[index + 1]):
            h = ((h ^ blob[k]) * _FNV_PRIME) & _HASH_MASK
        hashes[index] = h
        slot = h & mask
        while table[slot] != _EMPTY:
            slot = (slot + 1) & mask
        table[slot] = index


@compiled.njit(inline="always")
def _is_punctuation(byte) -> bool:
    """ASCII 33-47, 58-64, 91-96, 123-126: the original's `_is_punctuation` on ASCII."""
    return (33 <= byte <= 47) or (58 <= byte <= 64) or (91 <= byte <= 96) or (123 <= byte <= 126)


@compiled.njit()
def _lookup(table, hashes, blob, starts, h, word, start, end, continuation):
    """The id of `("##" if continuation else "") + word[start:end]`, or -1."""
    mask = len(table) - 1
    length = end - start + (2 if continuation else 0)
    slot = h & mask
    while table[slot] != _EMPTY:
        index = table[slot]
        if hashes[index] == h and starts[index + 1] - starts[index] == length:
            at = starts[index]
            same = True
            if continuation:
                same = blob[at] == 35 and blob[at + 1] == 35  # "##"
                at += 2
            k = start
            while same and k < end:
                same = blob[at] == word[k]
                at += 1
                k += 1
            if same:
                return index
        slot = (slot + 1) & mask
    return -1


@compiled.njit()
def _wordpiece(word, length, out, n, scratch, table, hashes, blob, starts, unk_id, max_chars,
               longest):
    """Appends the WordPiece ids of `word[:length]` to `out` from `n`; returns the new `n`.
    `scratch`: room for `length` hashes; `longest`: `_longest_by_prefix`."""
    if length > max_chars:
        out[n] = unk_id
        return n + 1
    first = n
    start = 0
    while start < length:
        # The hash of each candidate ("##" +) word[start:end], then tried longest first.
        h = _FNV_BASIS
        continuation = 1 if start > 0 else 0
        if continuation:
            h = ((h ^ 35) * _FNV_PRIME) & _HASH_MASK
            h = ((h ^ 35) * _FNV_PRIME) & _HASH_MASK
        last = start + 1
        if length - start >= 2:
            last = min(length, start + max(1, longest[continuation, word[start],
                                                      word[start + 1]]))
        for k in range(start, last):
            h = ((h ^ word[k]) * _FNV_PRIME) & _HASH_MASK
            scratch[k] = h
        found = -1
        end = last
        while end > start:
            found = _lookup(table, hashes, blob, starts, scratch[end - 1], word, start, end,
                            start > 0)
            if found >= 0:
                break
            end -= 1
        if found < 0:  # a piece that cannot be matched: the whole word is [UNK]
            out[first] = unk_id
            return first + 1
        out[n] = found
        n += 1
        start = end
    return n


@compiled.njit()
def _ascii_ids(data, lower, table, hashes, blob, starts, unk_id, max_chars, longest):
    """`(ids, others)`: the ids of UTF-8 `data`, with `LINE_END_ID` at each NUL and, for the
    k-th chunk holding a byte above 0x7f, `-2 - k` in its place; `others[k]` is that chunk's
    `(start, end)` in `data`."""
    n_bytes = len(data)
    out = np.empty(n_bytes + 1, dtype=np.int32)
    word = np.empty(n_bytes + 1, dtype=np.uint8)
    scratch = np.empty(n_bytes + 1, dtype=np.int64)
    others = np.empty((n_bytes // 2 + 1, 2), dtype=np.int64)
    n = 0
    n_others = 0
    i = 0
    while i < n_bytes:
        byte = data[i]
        if byte == 32 or byte == 10 or byte == 9 or byte == 13:
            i += 1
            continue
        if byte == 0:
            out[n] = LINE_END_ID
            n += 1
            i += 1
            continue
        end = i
        ascii = True
        while end < n_bytes:
            b = data[end]
            if b == 32 or b == 10 or b == 9 or b == 13 or b == 0:
                break
            if b > 127:
                ascii = False
            end += 1
        if not ascii:
            others[n_others, 0] = i
            others[n_others, 1] = end
            out[n] = -2 - n_others
            n += 1
            n_others += 1
            i = end
            continue
        length = 0  # the word being gathered, cleaned and lower-cased
        for k in range(i, end):
            b = data[k]
            if b < 32 or b == 127:  # a control character: dropped, cutting nothing
                continue
            if _is_punctuation(b):
                if length:
                    n = _wordpiece(word, length, out, n, scratch, table, hashes, blob, starts,
                                   unk_id, max_chars, longest)
                    length = 0
                word[0] = b
                n = _wordpiece(word, 1, out, n, scratch, table, hashes, blob, starts, unk_id,
                               max_chars, longest)
                continue
            if lower and 65 <= b <= 90:
                b += 32
            word[length] = b
            length += 1
        if length:
            n = _wordpiece(word, length, out, n, scratch, table, hashes, blob, starts, unk_id,
                           max_chars, longest)
        i = end
    return out[:n].copy(), others[:n_others].copy()


@compiled.njit()
def _fill(ids, filled, offsets):
    """`ids` with each placeholder `-2 - k` replaced by `filled[offsets[k]:offsets[k + 1]]`."""
    size = 0
    for value in ids:
        size += offsets[-2 - value + 1] - offsets[-2 - value] if value <= -2 else 1
    out = np.empty(size, dtype=np.int32)
    n = 0
    for value in ids:
        if value <= -2:
            k = -2 - value
            for j in range(offsets[k], offsets[k + 1]):
                out[n] = filled[j]
                n += 1
        else:
            out[n] = value
            n += 1
    return out
