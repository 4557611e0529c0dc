"""GraphTokenizer and InputPacker: the Python tokenizer's ids in the graph, the original's packing.

The real-data comparison (every line of the shared data) is in test_tokenization_real_data.py.
"""
import json
import random
import sys
import unicodedata
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import tensorflow_only
from test_tokenization import HOSTILE, random_texts

from bert_tf2.data_gen import tokenization, vocab_sanity
from bert_tf2.data_gen.graph_tokenizer import GraphTokenizer, InputPacker, truncated_lengths
from bert_tf2.data_gen.tokenization import BasicTokenizer, FullTokenizer

CASINGS = pytest.mark.parametrize("do_lower_case", [True, False], ids=["lower", "cased"])


@pytest.fixture(scope="module")
def minilm_vocab(minilm_dir):
    return minilm_dir / "vocab.txt"


@pytest.fixture(scope="module")
def tokenizers(minilm_vocab):
    """`do_lower_case -> (FullTokenizer, GraphTokenizer)` on the uncased vocabulary."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vocab_sanity.VocabularyWarning)
        return {lower: (FullTokenizer(minilm_vocab, lower), GraphTokenizer(minilm_vocab, lower))
                for lower in (True, False)}


def python_ids(tokenizer: FullTokenizer, texts) -> list:
    return [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts]


def encode(texts) -> tf.Tensor:
    return tf.constant([t if isinstance(t, bytes) else t.encode("utf-8") for t in texts])


# ------------------------------------------------------------------ same ids as Python
@CASINGS
def test_hostile_input_gives_the_python_ids(tokenizers, do_lower_case):
    python, graph = tokenizers[do_lower_case]
    texts = [case[1] for case in HOSTILE]
    assert graph(encode(texts)).to_list() == python_ids(python, texts)


def test_hostile_input_gives_the_asserted_tokens(tokenizers):
    python, graph = tokenizers[True]
    ids = graph(encode([case[1] for case in HOSTILE])).to_list()
    assert [python.convert_ids_to_tokens(row) for row in ids] == [case[2] for case in HOSTILE]


@CASINGS
def test_random_unicode_gives_the_python_ids(tokenizers, do_lower_case):
    python, graph = tokenizers[do_lower_case]
    texts = random_texts(3000, seed=99)
    assert graph(encode(texts)).to_list() == python_ids(python, texts)


@CASINGS
def test_random_bytes_give_the_python_words(tokenizers, do_lower_case):
    """Invalid UTF-8 of every kind: truncated, stray continuation bytes, overlong, surrogates."""
    rng = random.Random(5)
    pieces = [b"a", b"B", b" ", b"\xc3\xa9", b"\xe4\xb8\xad", b"\xf0\x9f\x98\x80", b"\xcc\x81",
              b"\xe2\x80\x8d", b"!", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf",
              b"\xe0\x80\xaf"] + [bytes([i]) for i in range(0x80, 0x100)]
    texts = [b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(5000)]
    _, graph = tokenizers[do_lower_case]
    basic = BasicTokenizer(do_lower_case)
    assert graph.words(tf.constant(texts)).to_list() == [
        [w.encode("utf-8") for w in basic.tokenize(t)] for t in texts]


def word_differences(graph: GraphTokenizer, stop: int) -> set:
    """Code points `c` below `stop` where "a" c "b" splits differently in Python and the graph."""
    basic = BasicTokenizer(graph.do_lower_case)
    points = [cp for cp in range(stop) if not 0xD800 <= cp <= 0xDFFF]
    texts = ["a" + chr(cp) + "b" for cp in points]
    differing = set()
    for i in range(0, len(texts), 16384):
        batch = texts[i:i + 16384]
        graph_words = graph.words(encode(batch)).to_list()
        for cp, text, words in zip(points[i:i + 16384], batch, graph_words):
            if words != [w.encode("utf-8") for w in basic.tokenize(text)]:
                differing.add(cp)
    return differing


# Unicode-version skew, lower-casing only (Python 3.11 has Unicode 14.0): capitals new in Unicode
# 14 that TensorFlow's ICU cannot lowercase (Glagolitic, Latin, Vithkuqi) ...
NO_LOWERCASE_IN_TF = {0x2C2F, 0xA7C0, 0xA7D0, 0xA7D6, 0xA7D8} | set(range(0x10570, 0x10596)) - {
    0x1057B, 0x1058B, 0x10593}
# ... and code points unassigned in Unicode 14 that tensorflow_text's newer ICU decomposes (Todhri,
# Tulu-Tigalari, Gurung Khema, Kirat Rai: Unicode 16), which Python therefore leaves whole.
DECOMPOSED_ONLY_BY_TF_TEXT = {0x105C9, 0x105E4, 0x11383, 0x11385, 0x1138E, 0x11391, 0x113C5,
                              0x113C7, 0x113C8} | set(range(0x16121, 0x16129)) | {
                              0x16D68, 0x16D69, 0x16D6A}


def is_version_skew(cp: int) -> bool:
    """Python's unicodedata and TensorFlow's ICU tables disagree on this character."""
    char = chr(cp)
    tf_lower = tf.strings.lower(char.encode("utf-8"), encoding="utf-8").numpy().decode("utf-8")
    python_only_lowercases = char.lower() != char and tf_lower == char
    unassigned_in_python = unicodedata.category(char) == "Cn"
    return python_only_lowercases or unassigned_in_python


@pytest.mark.parametrize("stop", [
    pytest.param(0x10000, id="basic-plane"),
    pytest.param(0x110000, id="all-planes", marks=pytest.mark.slow)])
@CASINGS
def test_every_code_point_splits_as_in_python(tokenizers, do_lower_case, stop):
    differing = word_differences(tokenizers[do_lower_case][1], stop)
    if not do_lower_case:
        assert differing == set()
        return
    assert all(is_version_skew(cp) for cp in differing)
    if unicodedata.unidata_version == "14.0.0":
        expected = {cp for cp in NO_LOWERCASE_IN_TF | DECOMPOSED_ONLY_BY_TF_TEXT if cp < stop}
        assert differing == expected
        assert len(differing) == (5 if stop == 0x10000 else 60)


@pytest.mark.parametrize("predicate", [
    tokenization.is_punctuation, tokenization.is_dropped, tokenization.separates_words,
    lambda char: unicodedata.category(char) == "Mn"], ids=["punctuation", "dropped", "separator",
                                                           "accent"])
def test_the_classes_ranges_from_classified_code_points_equal_a_scan_of_all_unicode(predicate):
    """The graph's character classes are built from the ~145,000 code points Unicode classifies;
    a class true on an unassigned, private-use or surrogate code point would be cut short."""
    classified = tokenization.classified_code_points()
    assert 140_000 < len(classified) < 300_000
    assert (tokenization.code_point_ranges(predicate, classified)
            == tokenization.code_point_ranges(predicate))


def test_words_over_200_characters_are_unk_measured_after_normalisation(tokenizers):
    texts = ["x" * 200, "x" * 201, "é" * 201, "e\u0301" * 150, "\u200b" * 300 + "ok"]
    for lower in (True, False):
        python, graph = tokenizers[lower]
        assert graph(encode(texts)).to_list() == python_ids(python, texts)
    unk = tokenizers[True][0].vocab["[UNK]"]
    lower_ids = tokenizers[True][1](encode(texts)).to_list()
    cased_ids = tokenizers[False][1](encode(texts)).to_list()
    assert [row == [unk] for row in lower_ids] == [False, True, True, False, False]
    assert [row == [unk] for row in cased_ids] == [False, True, True, True, False]


def test_repeated_vocabulary_entries_keep_their_last_id(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[UNK]\nab\n##c\nab\n##c\nd\n", encoding="utf-8")
    texts = ["abc d", "abcc", "x"]
    graph_ids = GraphTokenizer(path)(encode(texts)).to_list()
    assert graph_ids == python_ids(FullTokenizer(path), texts) == [[3, 4, 5], [3, 4, 4], [0]]


def test_vocabulary_without_unk_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab.txt has no '\[UNK\]' entry"):
        GraphTokenizer(path)


# ------------------------------------------------------------------ sanity warnings
def test_casing_mismatch_and_unk_share_warn(minilm_vocab, shared_data):
    with pytest.warns(vocab_sanity.VocabularyWarning, match="looks UNCASED"):
        graph = GraphTokenizer(minilm_vocab, do_lower_case=False)
    lines = (shared_data / "corpus" / "nltk_gutenberg" / "austen-emma.txt").read_text(
        encoding="utf-8").splitlines()[:2000]
    with pytest.warns(vocab_sanity.VocabularyWarning, match=r"\[UNK\] IS 8\.9% OF 24051 TOKENS"):
        assert graph.unk_share(lines) == pytest.approx(0.089, abs=0.0005)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert GraphTokenizer(minilm_vocab).unk_share(lines) == 0.0


# ------------------------------------------------------------------ packing
def original_truncate_seq_pair(tokens_a, tokens_b, max_length):
    """The original run_classifier.py `_truncate_seq_pair`, verbatim."""
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_length:
            break
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def test_truncation_is_the_originals_on_every_small_case():
    cases = [(a, b, m) for a in range(13) for b in range(13) for m in range(12)]
    expected = []
    for a, b, m in cases:
        tokens_a, tokens_b = list(range(a)), list(range(b))
        original_truncate_seq_pair(tokens_a, tokens_b, m)
        expected.append((len(tokens_a), len(tokens_b)))
    kept_a, kept_b = truncated_lengths(*(tf.constant([c[i] for c in cases]) for i in range(3)))
    assert list(zip(kept_a.numpy().tolist(), kept_b.numpy().tolist())) == expected


def ragged(rows):
    return tf.ragged.constant(rows, dtype=tf.int64)


def test_pair_layout_truncation_and_padding():
    packer = InputPacker(seq_length=8, cls_id=101, sep_id=102, pad_id=0)
    out = packer([ragged([[5, 6, 7], [1, 2, 3, 4, 5, 6], [9]]),
                  ragged([[8, 9], [11, 12, 13, 14, 15, 16], []])])
    assert out["input_word_ids"].numpy().tolist() == [
        [101, 5, 6, 7, 102, 8, 9, 102],
        [101, 1, 2, 3, 102, 11, 12, 102],  # 6 + 6 -> 3 + 2: the tie trims B first
        [101, 9, 102, 0, 0, 0, 0, 0]]  # no tokens in B: a single text, as the original packs it
    assert out["input_mask"].numpy().tolist() == [[1] * 8, [1] * 8, [1] * 3 + [0] * 5]
    assert out["input_type_ids"].numpy().tolist() == [
        [0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 1], [0] * 8]
    assert {v.dtype for v in out.values()} == {tf.int32}


def test_an_empty_second_segment_leaves_the_first_the_single_text_budget():
    packer = InputPacker(seq_length=6, cls_id=1, sep_id=2, pad_id=0)
    out = packer([ragged([[10, 11, 12, 13, 14, 15], [10, 11, 12, 13, 14, 15]]),
                  ragged([[], [20]])])
    assert out["input_word_ids"].numpy().tolist() == [[1, 10, 11, 12, 13, 2],  # 6 - 2 tokens
                                                      [1, 10, 11, 2, 20, 2]]   # 6 - 3 tokens
    assert out["input_type_ids"].numpy().tolist() == [[0] * 6, [0, 0, 0, 0, 1, 1]]


def test_single_segment_keeps_its_first_tokens():
    packer = InputPacker(seq_length=5, cls_id=1, sep_id=2, pad_id=7)
    out = packer(ragged([[10, 11, 12, 13, 14], [10]]))
    assert out["input_word_ids"].numpy().tolist() == [[1, 10, 11, 12, 2], [1, 10, 2, 7, 7]]
    assert out["input_type_ids"].numpy().tolist() == [[0] * 5, [0] * 5]


def test_dynamic_length_pads_to_the_longest_row_only():
    packer = InputPacker(seq_length=16, cls_id=1, sep_id=2, dynamic_length=True)
    out = packer(ragged([[3, 4], [5]]))
    assert out["input_word_ids"].numpy().tolist() == [[1, 3, 4, 2], [1, 5, 2, 0]]
    capped = packer(ragged([list(range(100))]))
    assert capped["input_word_ids"].shape == (1, 16)


def original_packing(tokens_a, tokens_b, max_seq_length):
    """The original run_classifier.py `convert_single_example`'s ids and segment ids, unpadded."""
    tokens_a, tokens_b = list(tokens_a), list(tokens_b) if tokens_b else None
    if tokens_b:
        original_truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    elif len(tokens_a) > max_seq_length - 2:
        tokens_a = tokens_a[0:(max_seq_length - 2)]
    ids, segment_ids = [101, *tokens_a, 102], [0] * (len(tokens_a) + 2)
    if tokens_b:
        ids += [*tokens_b, 102]
        segment_ids += [1] * (len(tokens_b) + 1)
    return ids, segment_ids


@pytest.mark.parametrize("seq_length", [3, 4, 7, 16])
def test_random_batches_pack_as_the_original(seq_length):
    """Every row of random batches (empty texts, texts longer than the budget, an empty batch)
    packs as the original's `convert_single_example`, one segment or two."""
    rng = random.Random(seq_length)
    packer = InputPacker(seq_length=seq_length, cls_id=101, sep_id=102, pad_id=0)
    for rows in [0, 1, 3, 8, 8, 8]:
        texts = [[[rng.randint(1000, 9999) for _ in range(rng.choice([0, 1, 2, 5, 9, 20]))]
                  for _ in range(rows)] for _ in range(2)]
        segments = [tf.RaggedTensor.from_row_lengths(
            tf.constant([t for row in text for t in row], tf.int64),
            [len(row) for row in text]) for text in texts]
        for pair in (False, True):
            out = packer(segments if pair else segments[0])
            for i in range(rows):
                ids, segment_ids = original_packing(texts[0][i], texts[1][i] if pair else None,
                                                    seq_length)
                pad = [0] * (seq_length - len(ids))
                assert out["input_word_ids"][i].numpy().tolist() == ids + pad
                assert out["input_mask"][i].numpy().tolist() == [1] * len(ids) + pad
                assert out["input_type_ids"][i].numpy().tolist() == segment_ids + pad
            assert out["input_word_ids"].shape == (rows, seq_length)


def test_packer_refuses_what_the_original_cannot_pack():
    with pytest.raises(ValueError, match="seq_length=2"):
        InputPacker(seq_length=2, cls_id=1, sep_id=2)
    with pytest.raises(ValueError, match="3 segments"):
        InputPacker(seq_length=8, cls_id=1, sep_id=2)([ragged([[1]])] * 3)
    with pytest.raises(ValueError, match="merge a"):  # words of pieces: not one row of tokens
        InputPacker(seq_length=8, cls_id=1, sep_id=2)(tf.ragged.constant([[[1, 2], [3]], [[4]]]))


# ------------------------------------------------------------------ inside models and SavedModels
SENTENCES = ["The Quick brown fox, naïvely 42!", "北京 is büsy \u200d", "", "x" * 300]


@pytest.fixture(scope="module")
def text_model(minilm_vocab):
    """Strings (two segments) -> the encoder's inputs, as a functional Keras model."""
    tokenizer = GraphTokenizer(minilm_vocab)
    packer = InputPacker.for_tokenizer(tokenizer, seq_length=16)
    a = keras.Input(shape=(), dtype="string", name="text_a")
    b = keras.Input(shape=(), dtype="string", name="text_b")
    return keras.Model([a, b], packer([tokenizer(a), tokenizer(b)]))


def expected_word_ids(vocab_file, texts_a, texts_b, seq_length):
    """The encoder's input ids the original run_classifier would build, in plain Python."""
    tokenizer = FullTokenizer(vocab_file)
    rows = []
    for a, b in zip(texts_a, texts_b):
        tokens_a, tokens_b = tokenizer.tokenize(a), tokenizer.tokenize(b)
        if tokens_b:  # the original's convert_single_example: no B tokens, a single text
            original_truncate_seq_pair(tokens_a, tokens_b, seq_length - 3)
            tokens_b = tokens_b + ["[SEP]"]
        else:
            tokens_a = tokens_a[:seq_length - 2]
        ids = tokenizer.convert_tokens_to_ids(["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b)
        rows.append(ids + [0] * (seq_length - len(ids)))
    return rows


def test_functional_model_round_trips_through_a_keras_file(text_model, minilm_vocab, tmp_path):
    texts_b = SENTENCES[::-1]
    out = text_model([encode(SENTENCES), encode(texts_b)])
    assert out["input_word_ids"].numpy().tolist() == expected_word_ids(
        minilm_vocab, SENTENCES, texts_b, 16)
    text_model.save(tmp_path / "text.keras")
    reloaded = keras.models.load_model(tmp_path / "text.keras")
    again = reloaded([encode(SENTENCES), encode(texts_b)])
    for name in out:
        np.testing.assert_array_equal(again[name], out[name])


def test_feeds_the_encoder(minilm_vocab):
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder

    config = BertConfig(vocab_size=30522, hidden_size=8, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16)
    tokenizer = GraphTokenizer(minilm_vocab)
    text = keras.Input(shape=(), dtype="string")
    inputs = InputPacker.for_tokenizer(tokenizer, seq_length=12)(tokenizer(text))
    model = keras.Model(text, BertEncoder(config)(inputs)["pooled_output"])
    assert model(encode(SENTENCES)).shape == (4, 8)


RELOAD_IN_A_FRESH_PROCESS = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the ops the graph uses; nothing of this project is imported
model = tf.saved_model.load(sys.argv[1])
out = model.serve(tf.constant(json.loads(sys.argv[2])))
print(json.dumps({k: v.numpy().tolist() for k, v in out.items()}))
"""


@pytest.mark.integration
def test_saved_model_gives_the_same_ids_in_a_fresh_process(text_model, minilm_vocab, tmp_path):
    class Serving(tf.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, texts):
            return self.model([texts, tf.fill(tf.shape(texts), "")])

    tf.saved_model.save(Serving(text_model), str(tmp_path / "serving"))
    result = tensorflow_only([sys.executable, "-c", RELOAD_IN_A_FRESH_PROCESS,
                              tmp_path / "serving", json.dumps(SENTENCES)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout)
    assert out["input_word_ids"] == expected_word_ids(minilm_vocab, SENTENCES, [""] * 4, 16)
    assert out["input_mask"] == [[int(i != 0) for i in row] for row in out["input_word_ids"]]
