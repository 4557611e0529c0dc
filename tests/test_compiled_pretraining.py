"""The compiled pretraining-data path against its Python statement, draw for draw and byte for byte.

- `mersenne` against `random.Random`: every kind of draw, string and integer seeds, state round trips;
- `compiled_instances` against `instances.create_pool_instances` (which the oracle tests hold
  against Google's script) on real WikiText-2 documents: every setting that changes the code path
  (whole-word masking, no NSP, packed sentences, short sequences, all short targets), same
  instances, same draw
  counts, and the generator left in the same state;
- `compiled_records` against `schema.serialize_example`, and `tfrecord_frames` against TensorFlow's
  own `TFRecordWriter`;
- `FullTokenizer.tokenize_lines_to_ids` (the data tools' tokenizer) and its compiled twin
  `compiled_wordpiece` against `tokenize` on the cases that break fast paths: controls that
  `str.split()` would split on, U+2028, NUL, CJK, accents, words over 200 characters, empty lines,
  words no piece of the vocabulary fits; and the compiled twin on random mixes of all of these.
"""
import itertools
import random
import string

import numpy as np
import pytest
import tensorflow as tf

from bert_tf2.data_gen import tfrecord_frames
from bert_tf2.data_gen.compiled_wordpiece import CompiledWordpiece
from bert_tf2.data_gen.pretraining import compiled_instances, mersenne, schema
from bert_tf2.data_gen.pretraining.compiled_records import FramedRecords, framed_records
from bert_tf2.data_gen.pretraining.documents import InputOptions, stream_documents
from bert_tf2.data_gen.pretraining.instances import (
    DrawCounts,
    InstanceSettings,
    create_pool_instances,
)
from bert_tf2.data_gen.pretraining.masking import MASK, RANDOM, UNCHANGED
from bert_tf2.data_gen.pretraining.records import RecordMaker
from bert_tf2.data_gen.records import ShardedRecordWriter
from bert_tf2.data_gen.tokenization import (
    FullTokenizer,
    _word_separator_ranges,
    code_point_ranges,
    separates_words,
)

KIND_NAMES = {MASK: compiled_instances.KIND_MASK, RANDOM: compiled_instances.KIND_RANDOM,
              UNCHANGED: compiled_instances.KIND_UNCHANGED}


# ------------------------------------------------------------------ the generator
@pytest.mark.parametrize("seed", [0, 12345, "12345/pool7", 2**70])
def test_compiled_draws_equal_cpythons(seed):
    python = random.Random(seed)
    state = mersenne.state_of(python)
    chooser = random.Random(99)
    for _ in range(20_000):
        kind = chooser.randrange(4)
        if kind == 0:
            assert mersenne.random_float(state) == python.random()
        elif kind == 1:
            n = chooser.choice([1, 2, 3, 7, 128, 30522, 2**31 + 5, 2**32 - 1])
            assert mersenne.randbelow(state, n) == python._randbelow(n)
        elif kind == 2:
            a = chooser.randrange(-5, 5)
            b = a + chooser.randrange(0, 600)
            assert mersenne.randint(state, a, b) == python.randint(a, b)
        else:
            values = list(range(chooser.randrange(0, 300)))
            compiled = np.array(values, dtype=np.int64)
            mersenne.shuffle(state, compiled)
            python.shuffle(values)
            assert compiled.tolist() == values
    mersenne.restore(python, state)  # hand the state back: Python carries on where it stopped
    assert [python.random() for _ in range(5)] == [mersenne.random_float(state) for _ in range(5)]


# ------------------------------------------------------------------ instances
@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    return FullTokenizer(str(vocab_file), do_lower_case=True)


@pytest.fixture(scope="module")
def wiki_documents(shared_data) -> list:
    """The first 60 articles of WikiText-2 valid, sentence-split."""
    path = str(shared_data / "corpus" / "wikitext-2" / "valid.txt")
    return [d.sentences for d in itertools.islice(
        stream_documents([path], InputOptions("wikitext")), 60)]


SETTINGS = {
    "defaults": InstanceSettings(dupe_factor=3),
    "whole words, short": InstanceSettings(max_seq_length=64, max_predictions_per_seq=10,
                                           masked_lm_prob=0.2, do_whole_word_mask=True,
                                           dupe_factor=2, short_seq_prob=0.3),
    "no NSP": InstanceSettings(no_nsp=True, dupe_factor=2),
    "no NSP, whole words, tiny": InstanceSettings(max_seq_length=12, max_predictions_per_seq=3,
                                                  no_nsp=True, do_whole_word_mask=True),
    "every target short": InstanceSettings(max_seq_length=32, short_seq_prob=1.0, dupe_factor=2),
    "packed sentences": InstanceSettings(pack_sentences=True, no_nsp=True, dupe_factor=2,
                                         masked_lm_prob=0.3, max_predictions_per_seq=40),
    "packed sentences, whole words, tiny": InstanceSettings(
        max_seq_length=12, max_predictions_per_seq=3, pack_sentences=True, no_nsp=True,
        do_whole_word_mask=True, dupe_factor=1),
}


@pytest.mark.parametrize("name", SETTINGS)
def test_compiled_instances_equal_the_python_reference(name, tokenizer, wiki_documents,
                                                        vocab_file):
    settings = SETTINGS[name]
    maker = RecordMaker(str(vocab_file), True, settings)
    pool = maker.tokenize(wiki_documents)
    documents = [[tokenizer.convert_ids_to_tokens(sentence) for sentence in document]
                 for document in pool.as_lists()]
    assert [[tokenizer.tokenize(s) for s in d if tokenizer.tokenize(s)]
            for d in wiki_documents][:5] == documents[:5]
    for seed in (1, 2):
        python_rng, compiled_rng = random.Random(seed), random.Random(seed)
        draws = DrawCounts()
        expected = create_pool_instances(documents, settings, maker.vocab_words, python_rng,
                                         draws)
        got = compiled_instances.create_pool_instances(pool, settings, maker.vocabulary,
                                                       compiled_rng)
        assert python_rng.getstate() == compiled_rng.getstate()
        assert got.draws == vars(draws)
        assert len(got) == len(expected) > 100
        for k, instance in enumerate(expected):
            length, first = int(got.lengths[k]), int(got.first_segment_lengths[k])
            count = int(got.masked_counts[k])
            assert got.input_ids[k, :length].tolist() == tokenizer.convert_tokens_to_ids(
                instance.tokens)
            assert not got.input_ids[k, length:].any()
            assert instance.segment_ids == [0] * first + [1] * (length - first)
            assert bool(got.is_random_next[k]) == instance.is_random_next
            assert got.masked_lm_positions[k, :count].tolist() == instance.masked_lm_positions
            assert got.masked_lm_ids[k, :count].tolist() == tokenizer.convert_tokens_to_ids(
                instance.masked_lm_labels)
            assert got.mask_kinds[k, :count].tolist() == [KIND_NAMES[kind] for kind in
                                                          instance.mask_kinds]
            assert (got.mask_kinds[k, count:] == -1).all()


def test_python_round_is_pythons():
    for value in [0.5, 1.5, 2.5, 2.4999999, 2.5000001, 19.2, 3.0, 0.0, 7.5, 128 * 0.15]:
        assert compiled_instances.python_round(value) == round(value), value


# ------------------------------------------------------------------ records
def test_compiled_records_equal_schema_and_tensorflows_writer(tmp_path, tokenizer, wiki_documents,
                                                              vocab_file):
    settings = InstanceSettings(max_seq_length=512, max_predictions_per_seq=80, dupe_factor=1)
    maker = RecordMaker(str(vocab_file), True, settings)
    instances = compiled_instances.create_pool_instances(maker.tokenize(wiki_documents), settings,
                                                         maker.vocabulary, random.Random(5))
    records = framed_records(instances)
    assert len(records) == len(instances) > 50
    expected = []
    for k in range(len(instances)):
        length, first = int(instances.lengths[k]), int(instances.first_segment_lengths[k])
        count = int(instances.masked_counts[k])
        expected.append(schema.serialize_example(schema.padded_features(
            instances.input_ids[k, :length].tolist(), [0] * first + [1] * (length - first),
            instances.masked_lm_positions[k, :count].tolist(),
            instances.masked_lm_ids[k, :count].tolist(), int(instances.is_random_next[k]),
            512, 80)))
    assert list(records.examples()) == expected
    path = tmp_path / "tensorflow.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in expected:
            writer.write(record)
    assert records.data == path.read_bytes()


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 63, 64, 65, 1000, 70_000])
def test_frames_equal_tensorflows(tmp_path, size):
    record = bytes(random.Random(size).getrandbits(8) for _ in range(size))
    path = tmp_path / "one.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(record)
    assert tfrecord_frames.framed(record) == path.read_bytes()


def test_sharded_writer_writes_tensorflows_bytes_without_tensorflow(tmp_path):
    """One record at a time, then many framed ones at once: the same round-robin as the original."""
    records = [f"record {i}".encode() * (i + 1) for i in range(11)]
    ours = [str(tmp_path / f"ours-{i}.tfrecord") for i in range(3)]
    with ShardedRecordWriter(ours) as writer:
        for record in records[:4]:
            writer.write(record)
        frames = [tfrecord_frames.framed(record) for record in records[4:]]
        dealt = FramedRecords(b"".join(frames), np.cumsum([0] + [len(f) for f in frames]))
        writer.write_dealt(dealt.dealt(3), len(dealt))
    for shard in range(3):
        path = tmp_path / f"theirs-{shard}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for record in records[shard::3]:  # round-robin, as the original's writer
                writer.write(record)
        assert (tmp_path / f"ours-{shard}.tfrecord").read_bytes() == path.read_bytes()


# ------------------------------------------------------------------ the data tools' tokenizer
HARD_LINES = [
    "", "   ", "plain ascii, with punctuation!", "UPPER case and MiXeD",
    "vertical\x0btab and form\x0cfeed join words", "file\x1cseparator\x1fjoin too",
    "line\u2028separator splits", "del\x7fete", "nul\x00inside", "\x00",
    "caf\u00e9 na\u00efve \u00c5ngstr\u00f6m", "e\u0301 decomposed", "\u0301\u0301 marks alone",
    "\u4e2d\u6587\u5b57 mixed with English", "\ud55c\uad6d\uc5b4 Hangul", "\u03a3\u039f\u03a6\u039f\u03a3 final sigma",
    "\u0130stanbul dotted I", "x" * 201, "y" * 200, "\ufeffbyte order mark", "\u200bzero width",
    "tab\tnew\rline", "nbsp\u00a0and\u3000ideographic space", "emoji \U0001F600 and \u00bd",
    "\ufffd replacement", "[CLS] [SEP] [MASK] as text",
    "##ing ## # #a a##b", "unaffable unwantedness antidisestablishmentarianism",
    "x" * 199 + "\x01" * 5, "\x01\x02\x03", "a\x7f\x7fb", "MiXeD-CaSe_under__score~tilde`",
    "caf\u00e9\x01s", "\u00e9\x00", "dig1ts 12345678901234567890 3.14",
]


@pytest.mark.filterwarnings("ignore:.*looks UNCASED")  # cased mode on purpose: another code path
@pytest.mark.parametrize("lower", [True, False])
def test_lines_to_ids_equal_tokenize_on_hard_cases(vocab_file, lower):
    tokenizer = FullTokenizer(str(vocab_file), do_lower_case=lower)
    compiled = CompiledWordpiece(tokenizer)
    expected = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)) for line in HARD_LINES]
    assert [tokenizer.tokenize_to_ids(line) for line in HARD_LINES] == expected
    for lines in (HARD_LINES, [line for line in HARD_LINES if "\x00" not in line],
                  [line for line in HARD_LINES if line.isascii() and "\x00" not in line]):
        ids, counts = tokenizer.tokenize_lines_to_ids(lines)
        assert ids.dtype == np.int32 and counts.tolist() == [
            len(tokenizer.tokenize(line)) for line in lines]
        assert ids.tolist() == [i for line in lines
                                for i in tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))]
        compiled_ids, compiled_counts = compiled.tokenize_lines_to_ids(lines)
        assert compiled_ids.dtype == np.int32
        assert compiled_ids.tolist() == ids.tolist() and compiled_counts.tolist() == counts.tolist()
    assert [len(x) for x in tokenizer.tokenize_lines_to_ids([])] == [0, 0]
    assert [len(x) for x in compiled.tokenize_lines_to_ids([])] == [0, 0]


def random_line(rng: random.Random) -> str:
    """Words of ASCII letters (any case), digits, punctuation, controls and some other
    characters, cut by every kind of space; some words long, some made of pieces the
    vocabulary lacks."""
    alphabet = (string.ascii_letters * 4 + string.digits * 2 + string.punctuation
                + "\x00\x01\x0b\x0c\x1c\x7f" + "\u00e9\u00c5\u4e2d\u2028\u00a0\ufffd\U0001F600")
    spaces = "  \t\n\r\x0b\u3000"
    words = []
    for _ in range(rng.randint(0, 12)):
        length = rng.choice([1, 2, 3, 5, 8, 13, 30, 199, 200, 201, 260])
        words.append("".join(rng.choice(alphabet) for _ in range(length)))
    return "".join(word + rng.choice(spaces) for word in words)


def sparse_vocab(folder) -> str:
    """A vocabulary where many words have no segmentation: a-m and digits at a word's start,
    continuations of a-f only, some longer pieces, punctuation, a repeated token."""
    tokens = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklm0123456789")
              + [f"##{c}" for c in "abcdef"] + ["ab", "abc", "##bcd", "##cd", "deaf", "##ade"]
              + list(string.punctuation) + ["ab", "Ab", "ABC", "##A", "\u00e9"])
    path = folder / "sparse_vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.filterwarnings("ignore:.*looks UNCASED", "ignore:.*looks CASED")
@pytest.mark.parametrize("vocabulary,lower", [("real", True), ("real", False), ("sparse", True),
                                              ("sparse", False)])
def test_compiled_ids_equal_tokenize_on_random_lines(vocab_file, tmp_path, vocabulary, lower):
    """2,000 random lines, in batches of 1 to 50: the compiled twin gives `tokenize`'s ids."""
    path = str(vocab_file) if vocabulary == "real" else sparse_vocab(tmp_path)
    tokenizer = FullTokenizer(path, do_lower_case=lower)
    compiled = CompiledWordpiece(tokenizer)
    rng = random.Random(7)
    lines = [random_line(rng) for _ in range(2000)]
    start, checked, unk = 0, 0, 0
    while start < len(lines):
        batch = lines[start:start + rng.randint(1, 50)]
        ids, counts = compiled.tokenize_lines_to_ids(batch)
        expected = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)) for line in batch]
        assert counts.tolist() == [len(e) for e in expected]
        assert ids.tolist() == [i for e in expected for i in e]
        checked += len(ids)
        unk += sum(e.count(tokenizer.vocab["[UNK]"]) for e in expected)
        start += len(batch)
    assert checked > 50_000 and 0 < unk < checked  # long words and [UNK]s were in the mix


def test_separator_ranges_found_fast_equal_the_full_scan():
    assert _word_separator_ranges() == code_point_ranges(separates_words)
