"""Classifier features: the original's conversion, the TFRecord round trip, and the tf.data input
(shuffling, sharding, trimming) of `tasks.classification.features`."""
import math

import numpy as np
import pytest
import tensorflow as tf

from tasks.classification import features as cf
from data_gen.errors import DataError
from tasks.classification.reader import InputExample
from data_gen.graph_tokenizer import truncated_lengths

MAX_LEN = 32
LABELS = ["0", "1"]


@pytest.fixture(scope="module")
def vocab_file(minilm_dir):
    return minilm_dir / "vocab.txt"


@pytest.fixture(scope="module")
def vocab_ids(vocab_file):
    """token -> id read straight from the vocabulary file (its line number)."""
    lines = vocab_file.read_text(encoding="utf-8").split("\n")
    return {token: i for i, token in reversed(list(enumerate(lines)))}


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    from data_gen.tokenization import FullTokenizer

    return FullTokenizer(str(vocab_file), do_lower_case=True)


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
    cf.truncate_seq_pair(a, b, 6)                  # then 3 + 3 = 6 fits
    assert a == list("abc") and b == list("xyz")
    a, b = list("abcd"), list("wxyz")              # tie: B first, then A, then B
    cf.truncate_seq_pair(a, b, 5)
    assert a == list("abc") and b == list("wx")
    a, b = list("ab"), list("xy")                  # fits: untouched
    cf.truncate_seq_pair(a, b, 4)
    assert a == list("ab") and b == list("xy")


def test_truncate_seq_pair_matches_the_original_and_the_closed_form():
    rng = np.random.default_rng(0)
    cases = [(la, lb, m) for la in range(0, 13) for lb in range(0, 13) for m in range(0, 26)]
    cases += [tuple(int(v) for v in rng.integers(0, 200, 3)) for _ in range(500)]
    for la, lb, m in cases:
        a, b = [f"a{i}" for i in range(la)], [f"b{i}" for i in range(lb)]
        cf.truncate_seq_pair(a, b, m)
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


# ---------------------------------------------------------------------- classifier_dataset


def synthetic_features(lengths, max_len, seed=0, vocab=50):
    """Features like load_features' with real tokens on the first `lengths[i]` positions."""
    rng = np.random.default_rng(seed)
    count = len(lengths)
    mask = (np.arange(max_len)[None, :] < np.array(lengths)[:, None]).astype(np.int32)
    ids = rng.integers(1, vocab, (count, max_len)).astype(np.int32) * mask
    segments = ((np.arange(max_len)[None, :] >= (np.array(lengths) // 2)[:, None])
                .astype(np.int32) * mask)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
            "label_ids": rng.integers(0, 3, count).astype(np.int32),
            "is_real_example": np.ones(count, np.int32),
            "example_index": np.arange(count, dtype=np.int32)}


def batches(dataset, n=None):
    dataset = dataset if n is None else dataset.take(n)
    return list(dataset.as_numpy_iterator())


def assert_rows_match(batch, features):
    """Every row of the batch is its example's features (up to the batch's width)."""
    rows = batch["example_index"]
    width = batch["input_ids"].shape[1]
    for name in ("input_ids", "input_mask", "segment_ids"):
        np.testing.assert_array_equal(batch[name], features[name][rows, :width])
        # Nothing real was cut off.
        assert not features[name][rows, width:].any()
    for name in ("label_ids", "is_real_example"):
        np.testing.assert_array_equal(batch[name], features[name][rows])


def test_evaluation_reads_each_example_once_in_order():
    features = synthetic_features(np.random.default_rng(1).integers(3, 30, 23), 30)
    for trim in (False, True):
        out = batches(cf.classifier_dataset(features, 4, is_training=False, trim=trim))
        assert [len(b["example_index"]) for b in out] == [4] * 5 + [3]
        np.testing.assert_array_equal(np.concatenate([b["example_index"] for b in out]),
                                      np.arange(23))
        for b in out:
            assert_rows_match(b, features)
            if not trim:
                assert b["input_ids"].shape[1] == 30


def stream(features, batch_size, n_batches, **kwargs):
    out = batches(cf.classifier_dataset(features, batch_size, is_training=True, **kwargs),
                  n_batches)
    assert len(out) == n_batches
    assert all(len(b["example_index"]) == batch_size for b in out)
    for b in out:
        assert_rows_match(b, features)
    return np.concatenate([b["example_index"] for b in out])


@pytest.mark.parametrize("count, batch_size", [(24, 4), (23, 4), (10, 3)])
def test_training_reads_a_new_permutation_every_epoch(count, batch_size):
    features = synthetic_features(np.random.default_rng(2).integers(3, 20, count), 20)
    epochs = 4
    n_batches = count * epochs // batch_size
    order = stream(features, batch_size, n_batches, seed=3)
    per_epoch = [order[e * count:(e + 1) * count] for e in range(len(order) // count)]
    assert len(per_epoch) >= 3
    for permutation in per_epoch:  # every example exactly once per epoch
        np.testing.assert_array_equal(np.sort(permutation), np.arange(count))
    # Each epoch's batches hold no repeat: the first count // batch * batch of an epoch.
    for e in range(len(per_epoch)):
        head = order[e * count:e * count + count // batch_size * batch_size]
        assert len(set(head.tolist())) == len(head)
    # Shuffled, and differently in each epoch.
    assert not np.array_equal(per_epoch[0], np.arange(count))
    assert len({tuple(p.tolist()) for p in per_epoch}) == len(per_epoch)
    # The order is a function of the seed: the same seed again, another seed another order.
    np.testing.assert_array_equal(stream(features, batch_size, n_batches, seed=3), order)
    assert not np.array_equal(stream(features, batch_size, n_batches, seed=4), order)


def test_training_aligned_epochs_are_whole_batches():
    features = synthetic_features(np.random.default_rng(3).integers(3, 20, 24), 20)
    out = batches(cf.classifier_dataset(features, 4, is_training=True, seed=0), 12)
    for e in range(2):  # 6 batches per epoch, together a permutation
        rows = np.concatenate([b["example_index"] for b in out[e * 6:(e + 1) * 6]])
        np.testing.assert_array_equal(np.sort(rows), np.arange(24))


@pytest.mark.parametrize("count, batch_size", [(24, 4), (25, 4), (30, 3)])
def test_input_pipelines_share_out_each_epoch(count, batch_size):
    features = synthetic_features(np.random.default_rng(5).integers(3, 20, count), 20)
    pipelines = 2
    steps = 3 * count // (batch_size * pipelines)
    parts = []
    for i in range(pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=pipelines,
                                             input_pipeline_id=i)
        parts.append(stream(features, batch_size, steps, seed=11, input_context=context)
                     .reshape(steps, batch_size))
    # Within a step the two pipelines' batches are disjoint; over an epoch's steps, they are
    # disjoint and (when the epoch is a whole number of steps) together cover it.
    steps_per_epoch = count // (batch_size * pipelines)
    for e in range(3 * count // (batch_size * pipelines * steps_per_epoch) if
                   count % (batch_size * pipelines) == 0 else 1):
        rows = np.concatenate([p[e * steps_per_epoch:(e + 1) * steps_per_epoch].ravel()
                               for p in parts])
        assert len(set(rows.tolist())) == len(rows)
        if count % (batch_size * pipelines) == 0:
            np.testing.assert_array_equal(np.sort(rows), np.arange(count))
    # Interleaved back (element k of pipeline i is element k * P + i of one stream), the
    # pipelines read one permutation per epoch, the same as a single pipeline's stream.
    merged = np.stack([p.ravel() for p in parts], axis=1).ravel()
    for e in range(len(merged) // count):
        np.testing.assert_array_equal(np.sort(merged[e * count:(e + 1) * count]),
                                      np.arange(count))
    single = stream(features, batch_size, steps * pipelines, seed=11)
    np.testing.assert_array_equal(merged, single)


def test_evaluation_pipelines_split_the_examples():
    features = synthetic_features(np.random.default_rng(6).integers(3, 20, 11), 20)
    seen = []
    for i in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i)
        out = batches(cf.classifier_dataset(features, 4, False, input_context=context))
        seen.append(np.concatenate([b["example_index"] for b in out]))
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(11))


def test_too_few_training_examples():
    features = synthetic_features([5, 6, 7], 10)
    with pytest.raises(DataError, match="fewer than one batch"):
        cf.classifier_dataset(features, 4, is_training=True)
    features = synthetic_features([5] * 7, 10)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0)
    with pytest.raises(DataError, match="fewer than one batch"):
        cf.classifier_dataset(features, 4, is_training=True, input_context=context)
    # Exactly one batch is enough, and evaluation of fewer than a batch is fine.
    assert len(batches(cf.classifier_dataset(synthetic_features([5] * 4, 10), 4, True), 3)) == 3
    assert len(batches(cf.classifier_dataset(synthetic_features([5] * 3, 10), 4, False))) == 1


def expected_width(lengths, max_len, multiple=8):
    return min(max_len, math.ceil(max(lengths) / multiple) * multiple)


def test_trim_to_the_longest_example_rounded_up_to_8():
    # max_seq_length 30 is not a multiple of 8: a batch longer than 24 keeps all 30 positions.
    lengths = [3, 5, 2, 7,    9, 4, 4, 4,    25, 2, 2, 2,    8, 8, 1, 1,    16, 3, 3, 3,
               17, 3, 2]
    widths = [8, 16, 30, 8, 16, 24]
    features = synthetic_features(lengths, 30)
    out = batches(cf.classifier_dataset(features, 4, is_training=False, trim=True))
    assert [b["input_ids"].shape[1] for b in out] == widths
    for b in out:
        assert_rows_match(b, features)
        for name in cf.SEQUENCE_FEATURES:
            assert b[name].shape[1] == b["input_ids"].shape[1]


def test_trim_in_training_batches():
    lengths = np.random.default_rng(7).integers(2, 40, 64)
    features = synthetic_features(lengths, 40)
    out = batches(cf.classifier_dataset(features, 8, is_training=True, seed=1, trim=True), 24)
    widths = set()
    for b in out:
        width = b["input_ids"].shape[1]
        assert width == expected_width(lengths[b["example_index"]], 40)
        assert width == 40 or width % 8 == 0
        widths.add(width)
        assert_rows_match(b, features)
    assert len(widths) > 1  # the random batches did exercise different widths


def test_trimming_changes_no_logit():
    import keras

    from modeling.config import BertConfig
    from modeling.encoder import BertEncoder
    from modeling.models import BertClassifier

    keras.utils.set_random_seed(0)
    config = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64)
    model = BertClassifier(BertEncoder(config), num_labels=3)
    lengths = [3, 11, 7, 2, 19, 4, 5, 6, 9, 30, 1, 2]
    features = synthetic_features(lengths, 40, seed=8)

    def logits(trim):
        out = []
        for b in cf.classifier_dataset(features, 4, is_training=False, trim=trim):
            inputs = {"input_word_ids": b["input_ids"], "input_mask": b["input_mask"],
                      "input_type_ids": b["segment_ids"]}
            out.append((b["input_ids"].shape[1], model(inputs, training=False)["logits"]))
        return out

    full, trimmed = logits(False), logits(True)
    assert [w for w, _ in full] == [40, 40, 40]
    assert [w for w, _ in trimmed] == [16, 24, 32]
    for (_, a), (_, b) in zip(full, trimmed):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5, rtol=0)
    # Not trivially equal: the examples give different logits.
    values = np.concatenate([np.asarray(l) for _, l in full])
    assert np.ptp(values, axis=0).max() > 1e-3
