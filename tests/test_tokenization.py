"""FullTokenizer: the original's documented examples, hostile input, character spans, vocab sanity.

`original_*` below is the algorithm of google-research/bert `tokenization.py` transcribed line for
line (character by character, no caching, no offsets): the oracle the fast implementation must
match on every input.
"""
import pickle
import random
import unicodedata
import warnings

import pytest

from bert_tf2.data_gen import tokenization, vocab_sanity
from bert_tf2.data_gen.tokenization import BasicTokenizer, FullTokenizer, WordpieceTokenizer


# ------------------------------------------------------------------ the oracle
def original_basic_tokenize(text: str, do_lower_case: bool) -> list:
    def is_whitespace(c):
        return c in " \t\n\r" or unicodedata.category(c) == "Zs"

    def is_control(c):
        return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf")

    def is_punctuation(c):
        cp = ord(c)
        return (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
                or unicodedata.category(c).startswith("P"))

    def is_chinese(cp):
        return any(lo <= cp <= hi for lo, hi in [
            (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
            (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)])

    def split_on_punc(token):
        output, start_new_word = [], True
        for c in token:
            if is_punctuation(c):
                output.append([c])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(c)
        return ["".join(x) for x in output]

    cleaned = "".join(" " if is_whitespace(c) else c for c in text
                      if not (ord(c) == 0 or ord(c) == 0xFFFD or is_control(c)))
    spaced = "".join(f" {c} " if is_chinese(ord(c)) else c for c in cleaned)
    split_tokens = []
    for token in spaced.strip().split():
        if do_lower_case:
            token = "".join(c for c in unicodedata.normalize("NFD", token.lower())
                            if unicodedata.category(c) != "Mn")
        split_tokens.extend(split_on_punc(token))
    return " ".join(split_tokens).strip().split()


def original_wordpiece(vocab, word: str, unk="[UNK]", max_chars=200) -> list:
    chars = list(word)
    if len(chars) > max_chars:
        return [unk]
    start, sub_tokens = 0, []
    while start < len(chars):
        end, cur_substr = len(chars), None
        while start < end:
            substr = "".join(chars[start:end])
            if start > 0:
                substr = "##" + substr
            if substr in vocab:
                cur_substr = substr
                break
            end -= 1
        if cur_substr is None:
            return [unk]
        sub_tokens.append(cur_substr)
        start = end
    return sub_tokens


def original_full_tokenize(vocab, text, do_lower_case: bool) -> list:
    text = text.decode("utf-8", "ignore") if isinstance(text, bytes) else text
    return [piece for word in original_basic_tokenize(text, do_lower_case)
            for piece in original_wordpiece(vocab, word)]


# ------------------------------------------------------------------ spans, checked
def normalize(text: str, do_lower_case: bool) -> str:
    """The tokenizer's cleaning and normalisation applied to a substring; final sigma folded.

    Python's lower() picks "ς" or "σ" from the letters around a capital sigma, which a substring
    may lack; it is the only context-dependent step.
    """
    if text.isascii() and text.isprintable():  # the common case, quickly
        return text.lower() if do_lower_case else text
    text = "".join(c for c in text if not tokenization.is_dropped(c))
    if do_lower_case:
        text = "".join(c for c in unicodedata.normalize("NFD", text.lower())
                       if unicodedata.category(c) != "Mn")
    return text.replace("ς", "σ")


def span_mismatches(tokenizer: FullTokenizer, text) -> list:
    """Tokens whose span does not map back to the token: `[(token, original substring)]`.

    A token maps back when `normalize(text[start:end])` equals it ("##" removed); an `[UNK]`
    when its span is exactly that of a basic-tokenizer word and normalises to that word. A piece
    that shares an original character with its neighbour (cut inside a decomposed Hangul
    syllable) only has to be contained in it.
    """
    lower = tokenizer.do_lower_case
    text = tokenization.convert_to_unicode(text)
    tokens, starts, ends = tokenizer.tokenize_with_offsets(text)
    words = None
    bad = []
    for k, (token, start, end) in enumerate(zip(tokens, starts, ends)):
        source = normalize(text[start:end], lower)
        if token == "[UNK]":
            if words is None:
                basic = tokenizer.basic_tokenizer.tokenize_with_offsets(text)
                words = {(s, e): w for w, s, e in zip(*basic)}
            want = words.get((start, end))
        else:
            want = token[2:] if token.startswith("##") else token
        want = want and want.replace("ς", "σ")
        shares_char = (k > 0 and starts[k] < ends[k - 1]) or (
            k + 1 < len(tokens) and starts[k + 1] < end)
        if source != want and not (shares_char and want and want in source):
            bad.append((token, text[start:end]))
    return bad


# ------------------------------------------------------------------ fixtures
ORIGINAL_TEST_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn",
                       "##ing", ","]


def write_vocab(path, tokens):
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def minilm_vocab(minilm_dir):
    return minilm_dir / "vocab.txt"


@pytest.fixture(scope="module")
def uncased(minilm_vocab):
    return FullTokenizer(minilm_vocab, do_lower_case=True)


@pytest.fixture(scope="module")
def uncased_vocab_cased_mode(minilm_vocab):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vocab_sanity.VocabularyWarning)
        return FullTokenizer(minilm_vocab, do_lower_case=False)


# ------------------------------------------------------------------ the original's own tests
def test_documented_example_of_the_original(tmp_path):
    tokenizer = FullTokenizer(write_vocab(tmp_path / "vocab.txt", ORIGINAL_TEST_VOCAB))
    tokens = tokenizer.tokenize("UNwant\u00E9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
    assert tokenizer.convert_ids_to_tokens([7, 4, 5, 10, 8, 9]) == tokens


def test_basic_tokenizer_examples_of_the_original():
    assert BasicTokenizer().tokenize("ah\u535A\u63A8zz") == ["ah", "\u535A", "\u63A8", "zz"]
    lower, cased = BasicTokenizer(do_lower_case=True), BasicTokenizer(do_lower_case=False)
    assert lower.tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you",
                                                            "?"]
    assert lower.tokenize("H\u00E9llo") == ["hello"]
    assert cased.tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["HeLLo", "!", "how", "Are", "yoU",
                                                            "?"]


def test_wordpiece_examples_of_the_original():
    vocab = {token: i for i, token in enumerate(ORIGINAL_TEST_VOCAB[:-1])}
    tokenizer = WordpieceTokenizer(vocab=vocab)
    assert tokenizer.tokenize("") == []
    assert tokenizer.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
    assert tokenizer.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]


def test_character_classes_of_the_original():
    assert all(map(tokenization.is_whitespace, " \t\r\n\u00A0"))
    assert not any(map(tokenization.is_whitespace, "A-"))
    assert tokenization.is_control("\u0005")
    assert not any(map(tokenization.is_control, ["A", " ", "\t", "\r", "\U0001F4A9"]))
    assert all(map(tokenization.is_punctuation, "-$`."))
    assert not any(map(tokenization.is_punctuation, "A "))
    # Beyond the original's tests: what str.split() adds, and what the cleaner drops first.
    assert [c for c in "\u2028\u2029\x85\x0b\x1c" if tokenization.separates_words(c)] == [
        "\u2028", "\u2029"]


# ------------------------------------------------------------------ hostile input
# (name, text, tokens with the uncased vocabulary and lower-casing)
HOSTILE = [
    ("control characters", "a\x00b\x01c\x7fd\u200be\ufeff f\x1bg", ["abc", "##de", "f", "##g"]),
    ("replacement character", "\ufffd x\ufffdy \ufffd", ["x", "##y"]),
    ("zero-width joiner emoji", "👨\u200d👩\u200d👧 family", ["[UNK]", "family"]),
    ("zero-width joiner in a word", "pass\u200dword", ["password"]),
    ("combining accents", "cafe\u0301 CAFÉ na\u0308i\u0308ve", ["cafe", "cafe", "naive"]),
    ("CJK ideographs", "北京大学 in 2008", ["北", "京", "大", "学", "in", "2008"]),
    ("Hangul and kana are no ideographs", "한국 カタカナ",
     ["ᄒ", "##ᅡ", "##ᆫ", "##ᄀ", "##ᅮ", "##ᆨ", "カ", "##タ", "##カ", "##ナ"]),
    ("emoji", "I ❤️ NY 😀!", ["i", "[UNK]", "ny", "[UNK]", "!"]),
    ("right-to-left text", "\u202bمرحبا\u202c \u200fשלום!", [
        "م", "##ر", "##ح", "##ب", "##ا", "ש", "##ל", "##ו", "##ם", "!"]),
    ("10,000-character word", "x" + "a" * 9999 + " end", ["[UNK]", "end"]),
    ("200 characters are allowed", "x" * 200, ["xx"] + ["##xx"] * 99),
    ("201 characters are not", "x" * 201, ["[UNK]"]),
    ("empty", "", []),
    ("only whitespace", " \t\n\r\u3000\u00a0\u2028", []),
    ("only dropped characters", "\u200b\x00\ufffd\ufeff", []),
    ("invalid UTF-8 bytes", b"caf\xc3\xff\xfeabc \xed\xa0\x80x \xc0\xafy", ["caf", "##ab", "##c",
                                                                         "x", "y"]),
    ("special-token strings are text", "[CLS] x [SEP]", ["[", "cl", "##s", "]", "x", "[", "sep",
                                                         "]"]),
    ("line separators split, dropped controls join", "x\u2028y\u2029z w\x85v\x0bu",
     ["x", "y", "z", "w", "##vu"]),
    ("final sigma", "ΟΔΟΣ ΣΑ", ["ο", "##δ", "##ος", "σ", "##α"]),
    ("dotted capital I", "İstanbul", ["istanbul"]),
    ("compatibility characters are kept (no NFKC)", "ﬁnal … ½ ß", ["ﬁ", "##nal", "…", "½",
                                                                   "ß"]),
]


@pytest.mark.parametrize("text, expected", [case[1:] for case in HOSTILE],
                         ids=[case[0] for case in HOSTILE])
def test_hostile_input(uncased, uncased_vocab_cased_mode, text, expected):
    assert uncased.tokenize(text) == expected
    assert uncased.tokenize(text) == original_full_tokenize(uncased.vocab, text, True)
    assert uncased_vocab_cased_mode.tokenize(text) == original_full_tokenize(
        uncased.vocab, text, False)
    assert span_mismatches(uncased, text) == []
    assert span_mismatches(uncased_vocab_cased_mode, text) == []


def test_words_are_measured_after_normalisation(uncased, uncased_vocab_cased_mode):
    decomposed = "e\u0301" * 150  # 300 characters, 150 once the accents are stripped
    assert uncased.tokenize(decomposed) == original_full_tokenize(uncased.vocab, decomposed, True)
    assert uncased.tokenize(decomposed) != ["[UNK]"]
    assert uncased_vocab_cased_mode.tokenize(decomposed) == ["[UNK]"]


# ------------------------------------------------------------------ fuzzing against the oracle
ALPHABET = list("aAbBeEiIsS zZ09.,!?-'$#") + [
    "\u00e9", "\u00c9", "\u0301", "\u0308", "\u0327", "\u0130", "\u03a3", "\u03c3", "\u00df",
    "\u4e2d", "\u6587", "\uf900", "\ud55c", "\u30ab", "\u0645", "\u05e9", "\u200d", "\u200b",
    "\u200f", "\ufeff", "\ufffd", "\x00", "\x07", "\x85", "\u2028", "\u3000", "\u00a0", "\t",
    "\n", "\U0001F600", "\ufe0f", "\u1fef", "\u037e", "\u2026", "\ufb01", "\U00020000"]


def random_texts(count, seed=1234):
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 24)))
            for _ in range(count)]


@pytest.mark.parametrize("do_lower_case", [True, False], ids=["lower", "cased"])
def test_matches_the_original_on_random_unicode(minilm_vocab, do_lower_case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vocab_sanity.VocabularyWarning)
        tokenizer = FullTokenizer(minilm_vocab, do_lower_case=do_lower_case)
    texts = random_texts(3000)
    differing = [t for t in texts
                 if tokenizer.tokenize(t) != original_full_tokenize(tokenizer.vocab, t,
                                                                    do_lower_case)]
    assert differing == []
    assert [m for t in texts for m in span_mismatches(tokenizer, t)] == []


# ------------------------------------------------------------------ spans
def test_spans_of_the_documented_example(tmp_path):
    tokenizer = FullTokenizer(write_vocab(tmp_path / "vocab.txt", ORIGINAL_TEST_VOCAB))
    text = "UNwant\u00E9d,running"
    tokens, starts, ends = tokenizer.tokenize_with_offsets(text)
    assert [text[s:e] for s, e in zip(starts, ends)] == ["UN", "want", "\u00E9d", ",", "runn",
                                                        "ing"]


@pytest.mark.parametrize("text, expected", [
    # a decomposed accent belongs to the letter before it
    ("cafe\u0301 x", [("cafe", "cafe\u0301"), ("x", "x")]),
    # a lower-cased character that grows (İ -> i + U+0307) still maps to one character
    ("İstanbul", [("istanbul", "İstanbul")]),
    # a dropped character inside a word is inside the span, one at the edge is not
    ("\u200bin\u00adside\u200b", [("inside", "in\u00adside")]),
    ("pass\u200bwork", [("pass", "pass"), ("##work", "work")]),
    # a mark that starts a word belongs to the letter after it
    ("\u0301ab", [("ab", "\u0301ab")]),
    # [UNK] spans its whole word
    ("x😀y, z", [("[UNK]", "x😀y"), (",", ","), ("z", "z")]),
    # pieces cut inside one Hangul syllable all span that syllable
    ("한", [("ᄒ", "한"), ("##ᅡ", "한"), ("##ᆫ", "한")]),
    # ideographs are words of their own
    ("北京", [("北", "北"), ("京", "京")]),
])
def test_spans_in_the_original_text(uncased, text, expected):
    tokens, starts, ends = uncased.tokenize_with_offsets(text)
    assert [(t, text[s:e]) for t, s, e in zip(tokens, starts, ends)] == expected


def test_spans_of_bytes_index_the_decoded_text(uncased):
    tokens, starts, ends = uncased.tokenize_with_offsets(b"\xffcaf\xc3\xa9 ok")
    assert (tokens, starts, ends) == (["cafe", "ok"], [0, 5], [4, 7])  # in "café ok"


def test_basic_tokenizer_spans(uncased):
    text = "Hello,  Wörld!"
    words, starts, ends = uncased.basic_tokenizer.tokenize_with_offsets(text)
    assert words == ["hello", ",", "world", "!"]
    assert [text[s:e] for s, e in zip(starts, ends)] == ["Hello", ",", "Wörld", "!"]


# ------------------------------------------------------------------ vocabulary files
def test_vocab_file_is_read_like_the_original(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[UNK]\r\n a \nx\xe2\x80\xa8y\nb\na\n\n")  # CRLF, spaces, U+2028, repeat
    vocab = tokenization.load_vocab(path)
    assert list(vocab.items()) == [("[UNK]", 0), ("a", 4), ("x\u2028y", 2), ("b", 3), ("", 5)]
    assert tokenization.load_vocab_tokens(path) == ["[UNK]", "a", "x\u2028y", "b", "a", ""]
    tokenizer = FullTokenizer(path)
    with pytest.raises(KeyError):
        tokenizer.convert_tokens_to_ids(["never"])


def test_last_line_without_newline_counts(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[UNK]\nlast")
    assert tokenization.load_vocab_tokens(path) == ["[UNK]", "last"]


def test_pickles(uncased):
    texts = random_texts(200, seed=7)
    copy = pickle.loads(pickle.dumps(uncased))
    assert [copy.tokenize_with_offsets(t) for t in texts] == [
        uncased.tokenize_with_offsets(t) for t in texts]


def test_a_full_cache_changes_nothing(uncased, minilm_vocab, monkeypatch):
    texts = random_texts(200, seed=7)
    monkeypatch.setattr(tokenization, "_CACHE_SIZE", 3)
    forgetful = FullTokenizer(minilm_vocab)
    assert [forgetful.tokenize_with_offsets(t) for t in texts] == [
        uncased.tokenize_with_offsets(t) for t in texts]


# ------------------------------------------------------------------ casing and [UNK] sanity
def test_uncased_vocab_without_lower_casing_warns(minilm_vocab):
    with pytest.warns(vocab_sanity.VocabularyWarning, match="looks UNCASED"):
        FullTokenizer(minilm_vocab, do_lower_case=False)


def test_cased_vocab_with_lower_casing_warns(tmp_path):
    words = [f"word{i}" for i in range(150)] + [f"Name{i}" for i in range(50)]
    path = write_vocab(tmp_path / "vocab.txt", ["[PAD]", "[UNK]"] + words)
    with pytest.warns(vocab_sanity.VocabularyWarning, match=r"looks CASED \(25.0%"):
        FullTokenizer(path, do_lower_case=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FullTokenizer(path, do_lower_case=False)


def test_matching_casing_and_tiny_vocabularies_do_not_warn(minilm_vocab, tf1_tiny_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FullTokenizer(minilm_vocab, do_lower_case=True)
        FullTokenizer(tf1_tiny_dir / "vocab.txt", do_lower_case=False)  # 15 entries: no verdict


def test_capitalised_share_of_real_vocabulary(minilm_vocab):
    assert vocab_sanity.capitalised_share(tokenization.load_vocab_tokens(minilm_vocab)) == (
        0.0, 26930)


def test_unk_share_on_real_text(uncased, uncased_vocab_cased_mode, shared_data):
    lines = (shared_data / "corpus" / "nltk_gutenberg" / "austen-emma.txt").read_text(
        encoding="utf-8").splitlines()[:2000]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert uncased.unk_share(lines) == 0.0
    with pytest.warns(vocab_sanity.VocabularyWarning, match=r"\[UNK\] IS 8\.9% OF 24051 TOKENS"):
        share = uncased_vocab_cased_mode.unk_share(lines)
    assert share == pytest.approx(0.089, abs=0.0005)


def test_small_samples_get_no_unk_verdict(uncased_vocab_cased_mode):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert uncased_vocab_cased_mode.unk_share(["Only Capitals Here"]) == 1.0


def test_validate_case_matches_checkpoint_as_the_original():
    check = vocab_sanity.validate_case_matches_checkpoint
    check(True, "gs://bucket/uncased_L-12_H-768_A-12/bert_model.ckpt")
    check(False, "gs://bucket/cased_L-12_H-768_A-12/bert_model.ckpt")
    check(False, "my_model/bert_model.ckpt")  # unknown names are not judged
    check(True, None)
    with pytest.raises(ValueError, match="--do_lower_case=True` with .*cased model"):
        check(True, "/ckpt/cased_L-24_H-1024_A-16/bert_model.ckpt")
    with pytest.raises(ValueError, match="--do_lower_case=False` with .*lowercased model"):
        check(False, "/ckpt/uncased_L-12_H-768_A-12/bert_model.ckpt")
