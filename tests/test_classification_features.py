"""Classifier features: the original's conversion and the TFRecord round trip of
`tasks.classification.features`, with the pair truncation of `data_gen.packing`."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf2.data_gen import packing
from bert_tf2.data_gen.errors import DataError
from bert_tf2.data_gen.graph_tokenizer import truncated_lengths
from bert_tf2.tasks.classification import features as cf
from bert_tf2.tasks.classification.reader import InputExample

MAX_LEN = 32
LABELS = ["0", "1"]


def example(text_a, text_b=None, label="1", guid="train-7"):
    return InputExample(guid, text_a, text_b, label, "7")


# ------------------------------------------------------------------------- truncate_seq_pair


def reference_truncate(len_a, len_b, max_length):
    """The original `_truncate_seq_pair` on lengths: drop the last token of the longer side,
    of B when they are equally long, one at a time until the total fits."""
    kept_a, kept_b = len_a, len_b
    while kept_a + kept_b > max_length:
        if kept_b >= kept_a:
            kept_b -= 1
        else:
            kept_a -= 1
    return kept_a, kept_b


def test_truncate_seq_pair_by_hand():
    a, b = list("abcdefg"), list("xyz")            # 7 + 3 into 6: A pops 4 (7->6->5->4->3)
    packing.truncate_seq_pair(a, b, 6)                  # then 3 + 3 = 6 fits
    assert a == list("abc") and b == list("xyz")
    a, b = list("abcd"), list("wxyz")              # tie: B first, then A, then B
    packing.truncate_seq_pair(a, b, 5)
    assert a == list("abc") and b == list("wx")
    a, b = list("ab"), list("xy")                  # fits: untouched
    packing.truncate_seq_pair(a, b, 4)
    assert a == list("ab") and b == list("xy")


def test_truncate_seq_pair_matches_the_original_and_the_closed_form():
    rng = np.random.default_rng(0)
    cases = [(la, lb, m) for la in range(0, 13) for lb in range(0, 13) for m in range(0, 26)]
    cases += [tuple(int(v) for v in rng.integers(0, 200, 3)) for _ in range(500)]
    for la, lb, m in cases:
        a, b = [f"a{i}" for i in range(la)], [f"b{i}" for i in range(lb)]
        packing.truncate_seq_pair(a, b, m)
        ka, kb = reference_truncate(la, lb, m)
        # Kept lengths as the original, and the kept tokens are the prefixes (pops from the end).
        assert (len(a), len(b)) == (ka, kb), (la, lb, m)
        assert a == [f"a{i}" for i in range(ka)] and b == [f"b{i}" for i in range(kb)]
    columns = [tf.constant([c[i] for c in cases], tf.int64) for i in range(3)]
    kept_a, kept_b = truncated_lengths(*columns)
    expected = np.array([reference_truncate(*c) for c in cases])
    np.testing.assert_array_equal(kept_a.numpy(), expected[:, 0])
    np.testing.assert_array_equal(kept_b.numpy(), expected[:, 1])


# --------------------------------------------------------------------------- convert_example


def expected_features(tokens_a, tokens_b, vocab_ids, max_len, label, index):
    tokens = ["[CLS]", *tokens_a, "[SEP]"] + ([*tokens_b, "[SEP]"] if tokens_b else [])
    ids = [vocab_ids[t] for t in tokens]
    pad = max_len - len(ids)
    segments = [0] * (len(tokens_a) + 2) + ([1] * (len(tokens_b) + 1) if tokens_b else [])
    return {"input_ids": ids + [0] * pad, "input_mask": [1] * len(ids) + [0] * pad,
            "segment_ids": segments + [0] * pad, "label_ids": [label],
            "is_real_example": [1], "example_index": [index]}


def test_convert_pair_layout(tokenizer, vocab_ids):
    ex = example("The dog barked loudly at the postman.", "It was unbelievably loud!", "1")
    features = cf.convert_example(ex, 5, {"0": 0, "1": 1}, MAX_LEN, tokenizer)
    tokens_a = ["the", "dog", "barked", "loudly", "at", "the", "post", "##man", "."]
    tokens_b = ["it", "was", "un", "##bel", "##ie", "##va", "##bly", "loud", "!"]
    assert features == expected_features(tokens_a, tokens_b, vocab_ids, MAX_LEN, 1, 5)
    # The uncased vocabulary: [CLS] 101, [SEP] 102, padding 0.
    assert features["input_ids"][0] == 101 and features["input_ids"][10] == 102
    assert features["input_ids"][20] == 102 and features["input_ids"][21:] == [0] * 11
    assert features["segment_ids"][:21] == [0] * 11 + [1] * 10
    assert sum(features["input_mask"]) == 21


def test_convert_single_sentence(tokenizer, vocab_ids):
    ex = example("The dog barked loudly at the postman.", None, "0")
    features = cf.convert_example(ex, 0, {"0": 0, "1": 1}, MAX_LEN, tokenizer)
    tokens_a = ["the", "dog", "barked", "loudly", "at", "the", "post", "##man", "."]
    assert features == expected_features(tokens_a, None, vocab_ids, MAX_LEN, 0, 0)
    assert set(features["segment_ids"]) == {0}


def test_convert_trims_a_single_sentence_to_max_len_minus_2(tokenizer, vocab_ids):
    words = [f"word{i}" for i in range(40)]  # "word12" -> several word pieces each
    text = " ".join(words)
    tokens = tokenizer.tokenize(text)
    assert len(tokens) > MAX_LEN
    features = cf.convert_example(example(text), 0, {"0": 0, "1": 1}, MAX_LEN, tokenizer)
    assert features == expected_features(tokens[:MAX_LEN - 2], None, vocab_ids, MAX_LEN, 1, 0)
    assert len(features["input_ids"]) == MAX_LEN and features["input_ids"][-1] == 102
    assert features["input_mask"] == [1] * MAX_LEN


@pytest.mark.parametrize("words_a, words_b", [(30, 3), (3, 30), (20, 20), (14, 13), (5, 5)])
def test_convert_truncates_a_pair_as_the_original(tokenizer, vocab_ids, words_a, words_b):
    text_a = " ".join(["dog"] * words_a)
    text_b = " ".join(["cat"] * words_b)
    ka, kb = reference_truncate(words_a, words_b, MAX_LEN - 3)
    features = cf.convert_example(example(text_a, text_b), 2, {"0": 0, "1": 1}, MAX_LEN,
                                  tokenizer)
    assert features == expected_features(["dog"] * ka, ["cat"] * kb, vocab_ids, MAX_LEN, 1, 2)
    assert sum(features["input_mask"]) == min(MAX_LEN, words_a + words_b + 3)


@pytest.mark.parametrize("max_seq_length, tokens, segment_ids", [
    (3, ["[CLS]", "[SEP]"], [0, 0]), (4, ["[CLS]", "dog", "[SEP]"], [0, 0, 0]),
    (5, ["[CLS]", "dog", "[SEP]", "cat", "[SEP]"], [0, 0, 0, 1, 1])])
def test_a_second_text_the_truncation_empties_gets_no_second_sep(tokenizer, vocab_ids,
                                                                  max_seq_length, tokens,
                                                                  segment_ids):
    # The original truncates the pair to max_seq_length - 3 tokens, then packs B only `if
    # tokens_b:`: where nothing of B is left, `[CLS] A [SEP]` and padding.
    features = cf.convert_example(example("dog dog dog dog dog", "cat cat cat"), 0,
                                  {"0": 0, "1": 1}, max_seq_length, tokenizer)
    padding = [0] * (max_seq_length - len(tokens))
    assert features["input_ids"] == [vocab_ids[t] for t in tokens] + padding
    assert features["input_mask"] == [1] * len(tokens) + padding
    assert features["segment_ids"] == segment_ids + padding


def test_a_window_keeping_nothing_of_the_second_text_gets_no_second_sep(tokenizer, vocab_ids):
    # max_seq_length 4: the longer A is cut into windows of one token, B keeps none of its own.
    rows = cf.convert_document(example("dog dog dog", "cat cat"), 0, {"0": 0, "1": 1}, 4,
                               tokenizer, False, 1)
    cls, sep, dog = vocab_ids["[CLS]"], vocab_ids["[SEP]"], vocab_ids["dog"]
    assert [row["input_ids"] for row in rows] == [[cls, dog, sep, 0]] * 3
    assert [row["segment_ids"] for row in rows] == [[0, 0, 0, 0]] * 3


@pytest.mark.parametrize("text_b", ["", "   "])
def test_an_empty_text_b_is_packed_as_a_single_sentence(tokenizer, vocab_ids, text_b):
    # The original: `if example.text_b: tokens_b = tokenize(...)` and `if tokens_b:` pair
    # packing; an empty (or all-whitespace) second text gives `[CLS] A [SEP]`, no second [SEP],
    # and the single-sentence budget max_seq_length - 2.
    text_a = " ".join(["dog"] * 40)
    features = cf.convert_example(example(text_a, text_b), 0, {"0": 0, "1": 1}, MAX_LEN,
                                  tokenizer)
    assert features == expected_features(["dog"] * (MAX_LEN - 2), None, vocab_ids, MAX_LEN, 1, 0)


def test_convert_labels(tokenizer):
    label_map = {"contradiction": 0, "entailment": 1, "neutral": 2}
    for label, label_id in label_map.items():
        features = cf.convert_example(example("a b", "c", label), 0, label_map, 8, tokenizer)
        assert features["label_ids"] == [label_id] and type(features["label_ids"][0]) is int
    # Regression (no label map): the score as a float.
    for text, value in (("3.800", 3.8), ("0", 0.0), ("5.000", 5.0), ("2.5", 2.5)):
        features = cf.convert_example(example("a", "b", text), 0, None, 8, tokenizer)
        assert features["label_ids"] == [value] and type(features["label_ids"][0]) is float


def test_convert_unlabelled_examples(tokenizer):
    features = cf.convert_example(example("a", "b", None), 3, {"0": 0, "1": 1}, 8, tokenizer)
    assert features["label_ids"] == [0] and features["example_index"] == [3]
    features = cf.convert_example(example("a", "b", None), 3, None, 8, tokenizer)
    assert features["label_ids"] == [0.0] and type(features["label_ids"][0]) is float
    assert features["is_real_example"] == [1]


def test_convert_rejects_a_label_outside_the_list(tokenizer):
    with pytest.raises(DataError, match=r"train-7.*'maybe'.*0, 1"):
        cf.convert_example(example("a", "b", "maybe"), 0, {"0": 0, "1": 1}, 8, tokenizer)
    with pytest.raises(DataError, match=r"'high'.*not a number"):
        cf.convert_example(example("a", "b", "high"), 0, None, 8, tokenizer)


# ---------------------------------------------------------------- records and load_features


def write_records(path, records):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)


SENTENCES = [("The dog barked.", "It was loud!", "1"),
             ("A cat slept on the warm windowsill all afternoon.", "Nobody noticed.", "0"),
             ("Short.", "Also short.", "1"),
             (" ".join(["long"] * 50), "tail", "0"),
             ("Héllo wörld", "again", None)]


def test_records_round_trip_classification(tmp_path, tokenizer):
    examples = [example(a, b, label, guid=f"dev-{i}") for i, (a, b, label) in
                enumerate(SENTENCES)]
    path = tmp_path / "dev.tf_record"
    write_records(path, cf.example_records(examples, LABELS, MAX_LEN, tokenizer))
    features = cf.load_features(str(path), MAX_LEN, regression=False)
    label_map = {"0": 0, "1": 1}
    expected = [cf.convert_example(ex, i, label_map, MAX_LEN, tokenizer)
                for i, ex in enumerate(examples)]
    assert set(features) == {"input_ids", "input_mask", "segment_ids", "label_ids",
                             "is_real_example", "example_index"}
    for name in ("input_ids", "input_mask", "segment_ids"):
        assert features[name].dtype == np.int32 and features[name].shape == (5, MAX_LEN)
        np.testing.assert_array_equal(features[name], [e[name] for e in expected])
    assert features["label_ids"].dtype == np.int32
    np.testing.assert_array_equal(features["label_ids"], [1, 0, 1, 0, 0])
    assert features["example_index"].dtype == np.int32
    np.testing.assert_array_equal(features["example_index"], np.arange(5))
    np.testing.assert_array_equal(features["is_real_example"], [1] * 5)


def test_records_round_trip_regression(tmp_path, tokenizer):
    scores = ["3.800", "0.000", "5.0", "1.25", None]
    examples = [example(a, b, score) for (a, b, _), score in zip(SENTENCES, scores)]
    path = tmp_path / "dev.tf_record"
    write_records(path, cf.example_records(examples, [], MAX_LEN, tokenizer))
    features = cf.load_features(str(path), MAX_LEN, regression=True)
    assert features["label_ids"].dtype == np.float32
    np.testing.assert_allclose(features["label_ids"], [3.8, 0.0, 5.0, 1.25, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(features["example_index"], np.arange(5))
    np.testing.assert_array_equal(
        features["input_ids"],
        [cf.convert_example(ex, i, None, MAX_LEN, tokenizer)["input_ids"]
         for i, ex in enumerate(examples)])


def test_many_records_keep_their_order(tmp_path, tokenizer):
    # More than one parsing batch (4096) of records: the order and indices survive.
    record = list(cf.example_records([example("a b c", "d")], LABELS, 8, tokenizer))[0]
    parsed = tf.train.Example.FromString(record)
    records = []
    for i in range(5000):
        parsed.features.feature["example_index"].int64_list.value[:] = [i]
        parsed.features.feature["label_ids"].int64_list.value[:] = [i % 2]
        records.append(parsed.SerializeToString())
    write_records(tmp_path / "big.tf_record", records)
    features = cf.load_features(str(tmp_path / "big.tf_record"), 8, regression=False)
    np.testing.assert_array_equal(features["example_index"], np.arange(5000))
    np.testing.assert_array_equal(features["label_ids"], np.arange(5000) % 2)


def test_load_features_of_an_empty_file(tmp_path):
    write_records(tmp_path / "empty.tf_record", [])
    with pytest.raises(DataError, match="no records"):
        cf.load_features(str(tmp_path / "empty.tf_record"), 8, regression=False)


def test_example_records_reject_an_unknown_label(tokenizer):
    records = cf.example_records([example("a", "b", "1"), example("a", "b", "2")], LABELS, 8,
                                 tokenizer)
    next(records)
    with pytest.raises(DataError, match="'2'"):
        next(records)
