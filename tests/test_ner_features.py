"""NER features (`tasks.ner.features`): first-piece labels, windows over long sentences with
one max-context reading per word, TFRecords, the tf.data input, and the real CoNLL-2003 dev set."""
import random

import numpy as np
import pytest
import tensorflow as tf

from bert_tf2.data_gen.datasets import Batching
from bert_tf2.data_gen.errors import DataError
from bert_tf2.data_gen.windows import word_aligned_spans
from bert_tf2.tasks.ner import features as nf
from bert_tf2.tasks.ner.metrics import evaluate
from bert_tf2.tasks.ner.reader import Sentence, read_conll

LABELS = ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]
LABEL_MAP = {label: i for i, label in enumerate(LABELS)}
# Words of the uncased vocabulary with a known number of pieces.
WORDS_BY_PIECES = {1: "dog", 2: "postman", 3: "Scunthorpe", 4: "Zelezarny", 5: "unbelievably"}


def sentence(words, labels=None, line=1, path="test.txt"):
    return Sentence(list(words), None if labels is None else list(labels), line, 0, path)


# ------------------------------------------------------------------------ one short sentence


def test_first_piece_labels_by_hand(tokenizer, vocab_ids):
    words = ["Nadim", "Ladki", "visited", "AL-AIN", "\u200b", "."]
    labels = ["B-PER", "I-PER", "O", "B-LOC", "O", "O"]
    [features] = nf.convert_sentence(sentence(words, labels), 7, LABEL_MAP, 16, tokenizer, 4)
    # Each word alone: nad ##im | lad ##ki | visited | al - ain | (nothing -> [UNK]) | .
    tokens = ["[CLS]", "nad", "##im", "lad", "##ki", "visited", "al", "-", "ain", "[UNK]", ".",
              "[SEP]"]
    assert tokenizer.convert_ids_to_tokens(features["input_ids"][:12]) == tokens
    assert features["input_ids"] == [vocab_ids[t] for t in tokens] + [0] * 4
    assert features["input_ids"][:3] == [101, 23233, 5714] and features["input_ids"][9] == 100
    assert features["input_mask"] == [1] * 12 + [0] * 4
    assert features["segment_ids"] == [0] * 16
    # First pieces carry the label id (B-PER 4, I-PER 8, O 0, B-LOC 1); the rest -1.
    assert features["label_ids"] == [-1, 4, -1, 8, -1, 0, 1, -1, -1, 0, 0, -1, -1, -1, -1, -1]
    assert features["word_ids"] == [-1, 0, 0, 1, 1, 2, 3, 3, 3, 4, 5, -1, -1, -1, -1, -1]
    assert features["is_max_context"] == [0, 1, 0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0]
    assert (features["example_index"], features["window_index"], features["num_words"],
            features["is_real_example"]) == ([7], [0], [6], [1])
    # Unlabelled (prediction input): no label anywhere, the same reading positions.
    [unlabelled] = nf.convert_sentence(sentence(words), 7, LABEL_MAP, 16, tokenizer, 4)
    assert unlabelled["label_ids"] == [-1] * 16
    assert unlabelled["is_max_context"] == features["is_max_context"]


def test_an_unknown_label_names_file_and_line(tokenizer):
    bad = Sentence(["EU", "rejects"], ["B-ORG", "B-XYZ"], 12, 3, "dev.txt")
    with pytest.raises(DataError, match=r"^dev\.txt:13: label 'B-XYZ' is not one of O, B-LOC"):
        nf.convert_sentence(bad, 3, LABEL_MAP, 16, tokenizer, 4)


def test_an_empty_sentence_is_one_window_without_words(tokenizer):
    [features] = nf.convert_sentence(sentence([], []), 0, LABEL_MAP, 8, tokenizer, 4)
    assert features["input_ids"][:3] == [101, 102, 0] and features["num_words"] == [0]
    assert nf.reassemble([features], np.zeros((1, 8), int), 1) == [[]]


# ------------------------------------------------------------------- windows of a sentence


def test_long_sentence_windows_and_reassembly(tokenizer):
    lengths = [1, 2, 3, 1, 1, 4, 1, 2, 1, 3, 1, 1]   # the hand case above, as real words
    words = [WORDS_BY_PIECES[n] for n in lengths]
    labels = ["B-PER", "O", "B-LOC", "I-LOC", "O", "B-ORG", "O", "O", "B-MISC", "I-MISC", "O",
              "O"]
    windows = nf.convert_sentence(sentence(words, labels), 0, LABEL_MAP, 16, tokenizer, 5)
    assert [w["window_index"] for w in windows] == [[0], [1], [2]]
    # Window (0,13): 13 pieces + [CLS] [SEP] = 15, one pad; (3,16) and (8,21) likewise.
    assert [sum(w["input_mask"]) for w in windows] == [15, 15, 15]
    assert tokenizer.convert_ids_to_tokens(windows[1]["input_ids"][:3]) == ["[CLS]", "sc",
                                                                            "##unt"]
    # Every window labels each first piece it holds (for training) ...
    assert windows[1]["label_ids"][:10] == [-1, 1, -1, -1, 5, 0, 3, -1, -1, -1]
    assert windows[1]["word_ids"][:10] == [-1, 2, 2, 2, 3, 4, 5, 5, 5, 5]
    # ... but each word is read once: words 0-4 from window 0, 5 from 1, 6-11 from 2
    # (tests/test_windows.py, the same case), at position piece - window start + 1.
    assert [np.flatnonzero(w["is_max_context"]).tolist() for w in windows] == [
        [1, 2, 4, 7, 8], [6], [5, 6, 8, 9, 12, 13]]
    assert sum(sum(w["is_max_context"]) for w in windows) == len(words)
    # Predictions 100 * window + position show where each word was read.
    predictions = np.array([[100 * w + p for p in range(16)] for w in range(3)])
    assert nf.reassemble(windows, predictions, 1)[0] == [
        1, 2, 4, 7, 8, 106, 205, 206, 208, 209, 212, 213]
    # Gold label ids as "predictions": the labels come back word by word.
    read = nf.reassemble(windows, np.array([w["label_ids"] for w in windows]), 1)[0]
    assert read == [LABEL_MAP[t] for t in labels]


def test_random_sentences_get_one_prediction_per_word(tokenizer):
    rng = random.Random(3)
    for _ in range(60):
        lengths = [rng.choice([1, 1, 1, 2, 3, 4, 5]) for _ in range(rng.randint(1, 40))]
        max_seq_length, stride = rng.randint(5, 24), rng.randint(1, 12)
        words = [WORDS_BY_PIECES[n] for n in lengths]
        labels = [rng.choice(LABELS) for _ in words]
        windows = nf.convert_sentence(sentence(words, labels), 0, LABEL_MAP, max_seq_length,
                                      tokenizer, stride)
        spans = word_aligned_spans(lengths, max_seq_length - 2, stride)
        word_starts = np.cumsum([0, *lengths[:-1]]).tolist()
        for start, length in spans:
            assert start in word_starts and length <= max_seq_length - 2
        assert all(a[0] < b[0] for a, b in zip(spans, spans[1:]))
        for w in windows:  # input length within the window, labels only on first pieces
            assert sum(w["input_mask"]) <= max_seq_length
            first = [p for p in range(1, max_seq_length) if w["word_ids"][p] >= 0 and
                     (w["word_ids"][p - 1] != w["word_ids"][p] or p == 1)]
            assert [p for p, label in enumerate(w["label_ids"]) if label >= 0] == first
        counts = np.zeros(len(words), int)
        for w in windows:
            for p in np.flatnonzero(w["is_max_context"]):
                counts[w["word_ids"][p]] += 1
        assert counts.tolist() == [1] * len(words)
        predictions = np.array([w["label_ids"] for w in windows])
        assert nf.reassemble(windows, predictions, 1) == [[LABEL_MAP[t] for t in labels]]


# ------------------------------------------------------------------------------- reassemble


def two_sentences(tokenizer):
    short = sentence(["Nadim", "Ladki"], ["B-PER", "I-PER"])
    long = sentence([WORDS_BY_PIECES[n] for n in [1, 2, 3, 1, 1, 4, 1, 2, 1, 3, 1, 1]],
                    ["O"] * 12)
    features = [w for i, s in enumerate([short, long])
                for w in nf.convert_sentence(s, i, LABEL_MAP, 16, tokenizer, 5)]
    return nf.features_as_arrays(features)


def test_reassemble_inputs_and_errors(tokenizer):
    features = two_sentences(tokenizer)
    assert len(features["example_index"]) == 4          # 1 + 3 windows
    ids = features["label_ids"].copy()
    expected = [[4, 8], [0] * 12]
    assert nf.reassemble(features, ids, 2) == expected
    # Logits are arg-maxed; per-batch arrays may have different widths.
    logits = np.eye(len(LABELS))[np.maximum(ids, 0)]
    assert nf.reassemble(features, logits, 2) == expected
    assert nf.reassemble(features, [ids[:1, :8], ids[1:, :16]], 2) == expected
    # Padding rows (example_index -1) are skipped.
    padded = {name: np.concatenate([value, value[:1]]) for name, value in features.items()}
    padded["example_index"][-1] = -1
    assert nf.reassemble(padded, np.concatenate([ids, ids[:1]]), 2) == expected
    # A missing window leaves words without a prediction; a sentence may not lack windows.
    dropped = {name: value[[0, 1, 3]] for name, value in features.items()}
    with pytest.raises(ValueError, match="sentence 1: word 5 has no prediction"):
        nf.reassemble(dropped, ids[[0, 1, 3]], 2)
    with pytest.raises(ValueError, match="sentence 2 has no window"):
        nf.reassemble(features, ids, 3)
    twice = {name: value.copy() for name, value in features.items()}
    twice["is_max_context"][2, 1] = 1                   # word 2 also read from window 1
    with pytest.raises(ValueError, match="sentence 1: word 2 is predicted twice"):
        nf.reassemble(twice, ids, 2)
    with pytest.raises(ValueError, match="3 prediction rows for 4 windows"):
        nf.reassemble(features, ids[:3], 2)
    with pytest.raises(ValueError, match="beyond the 4 predicted positions"):
        nf.reassemble(features, ids[:, :4], 2)
    with pytest.raises(ValueError, match="window 1 belongs to sentence 1, but there are only 1"):
        nf.reassemble(features, ids, 1)


# ---------------------------------------------------------------------- records and tf.data


def test_records_round_trip(tmp_path, tokenizer):
    sentences = [sentence(["Nadim", "Ladki", "visited", "AL-AIN"], ["B-PER", "I-PER", "O",
                                                                   "B-LOC"]),
                 sentence([WORDS_BY_PIECES[n] for n in [5, 5, 4, 3, 5]], ["O"] * 5),
                 sentence(["\u200b"], ["O"])]
    path = str(tmp_path / "dev.tf_record")
    with tf.io.TFRecordWriter(path) as writer:
        for record in nf.example_records(sentences, LABELS, 16, tokenizer, 6):
            writer.write(record)
    features = nf.load_features(path, 16)
    expected = nf.features_as_arrays(
        [w for i, s in enumerate(sentences)
         for w in nf.convert_sentence(s, i, LABEL_MAP, 16, tokenizer, 6)])
    assert set(features) == set(nf.SEQUENCE_FEATURES) | set(nf.SCALAR_FEATURES)
    # Sentence 1: pieces 5 5 4 3 5 (22; word starts 0 5 10 14 17), windows of 14, stride 6:
    # (0, 14) ends at a word boundary; 0 + 6 is inside the word at 5 -> (5, 5 + 14 = 19 ->
    # boundary 17); 5 + 6 = 11 is inside the word at 10 -> (10, 22). Three windows.
    np.testing.assert_array_equal(features["example_index"], [0, 1, 1, 1, 2])
    np.testing.assert_array_equal(features["window_index"], [0, 0, 1, 2, 0])
    for name in expected:
        assert features[name].dtype == np.int32, name
        np.testing.assert_array_equal(features[name], expected[name], err_msg=name)
    assert features["label_ids"].min() == -1
    with pytest.raises(DataError, match="no records"):
        empty = str(tmp_path / "empty.tf_record")
        tf.io.TFRecordWriter(empty).close()
        nf.load_features(empty, 16)


def test_evaluation_batches_are_trimmed_weighted_and_reassemble(tokenizer):
    features = two_sentences(tokenizer)   # windows of 6, 15, 15 and 15 tokens
    for trim in (False, True):
        batches = list(nf.ner_dataset(features, 1, False, batching=Batching(trim=trim))
                       .as_numpy_iterator())
        assert [b["example_index"].tolist() for b in batches] == [[0], [1], [1], [1]]
        for row, b in enumerate(batches):
            rows = [row]
            width = b["input_ids"].shape[1]
            assert width == (8 if trim and row == 0 else 16)
            for name in nf.SEQUENCE_FEATURES:
                np.testing.assert_array_equal(b[name], features[name][rows, :width])
            np.testing.assert_array_equal(b["label_weights"],
                                          (features["label_ids"][rows, :width] >= 0))
            assert b["label_weights"].dtype == np.float32
    # Two replicas: padded to a multiple of 2 x 3 with copies marked example_index -1, which
    # carry no label weight and are skipped when reassembling from the batches.
    context = tf.distribute.InputContext(num_replicas_in_sync=2)
    batches = list(nf.ner_dataset(features, 3, False, input_context=context)
                   .as_numpy_iterator())
    rows = np.concatenate([b["example_index"] for b in batches])
    np.testing.assert_array_equal(rows, [0, 1, 1, 1, -1, -1])
    padding = np.concatenate([b["label_weights"].sum(axis=1) for b in batches])[4:]
    assert padding.tolist() == [0.0, 0.0]
    predictions = [b["label_ids"] for b in batches]
    assert nf.reassemble(batches, predictions, 2) == [[4, 8], [0] * 12]


def test_training_batches_cover_every_window_each_epoch(tokenizer):
    features = two_sentences(tokenizer)
    batches = list(nf.ner_dataset(features, 2, True, seed=5).take(4).as_numpy_iterator())
    pairs = [(e, w) for b in batches for e, w in zip(b["example_index"], b["window_index"])]
    assert sorted(pairs[:4]) == sorted(pairs[4:]) == [(0, 0), (1, 0), (1, 1), (1, 2)]
    for b in batches:
        assert b["input_ids"].shape[1] % 8 == 0
        assert b["label_weights"].shape == b["label_ids"].shape


# -------------------------------------------------------------------------------- real data


def test_real_dev_set_one_reading_per_word(shared_data, tokenizer):
    sentences = read_conll(str(shared_data / "conll2003" / "valid.txt"))
    max_seq_length, stride = 128, 64
    windows = [w for i, s in enumerate(sentences)
               for w in nf.convert_sentence(s, i, LABEL_MAP, max_seq_length, tokenizer, stride)]
    features = nf.features_as_arrays(windows)
    # Independently: a sentence needs several windows when its words' pieces (each word
    # tokenised alone, [UNK] for none) are more than 126.
    pieces = [sum(len(tokenizer.tokenize(w) or ["[UNK]"]) for w in s.words) for s in sentences]
    long_sentences = [i for i, n in enumerate(pieces) if n > max_seq_length - 2]
    assert len(long_sentences) == 3 and max(pieces) == 144   # 3 of 3,250 sentences (0.09%)
    multi = sorted(set(features["example_index"][features["window_index"] > 0].tolist()))
    assert multi == long_sentences
    assert len(windows) == 3250 + 3                           # 144 pieces need 2 windows
    # Every word has exactly one max-context first piece, and its label there is the gold one.
    word_count = sum(len(s.words) for s in sentences)
    assert word_count == 51362 and features["is_max_context"].sum() == word_count
    read = nf.reassemble(features, features["label_ids"], len(sentences))
    assert read == [[LABEL_MAP[t] for t in s.labels] for s in sentences]
    scores = evaluate([s.labels for s in sentences],
                      [[LABELS[i] for i in ids] for ids in read])
    assert scores.f1 == 1.0 and scores.correct == 5942
