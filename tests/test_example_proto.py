"""`data_gen.example_proto` against TensorFlow: the same bytes written, the same arrays read, on every
record each task makes from real data, on pretraining records, and on hand-made edge cases; and
`read_records` without TensorFlow equal to TensorFlow's tf.data on the same files."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import warm_python
from conftest import REPO
from reference_runs import glue_slice
from test_run_ner import conll_slice
from test_run_squad import paragraphs
from test_tasks import settings

from bert_tf2.data_gen import example_proto, records
from bert_tf2.data_gen.compiled_examples import FixedSpec
from bert_tf2.data_gen.example_proto import FixedLen
from bert_tf2.engine.task import Setup
from bert_tf2.modeling import protobuf_wire
from bert_tf2.tasks.classification.task import ClassificationTask
from bert_tf2.tasks.multiple_choice.task import MultipleChoiceTask
from bert_tf2.tasks.ner.task import NerTask
from bert_tf2.tasks.squad.task import SquadTask


def _tf_spec(spec):
    return {name: tf.io.FixedLenFeature(list(f.shape), tf.int64 if f.dtype == "int64"
                                        else tf.float32) for name, f in spec.items()}


def _task_records(task, split, tmp_path, vocab_file, tokenizer, max_seq_length):
    task.check(settings(tmp_path, max_seq_length=max_seq_length))
    task.prepare(Setup(None, str(vocab_file), tokenizer, max_seq_length, True))
    split = getattr(task, split)()
    split = split[0] if isinstance(split, list) else split
    split.examples = task.read(split)
    return list(task.records(split))


def _spec_of(record: bytes) -> dict:
    """The FixedLen spec a record satisfies, read with TensorFlow's own parser."""
    example = tf.train.Example.FromString(record)
    spec = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = getattr(feature, kind).value
        spec[name] = FixedLen((len(values),), "float32" if kind == "float_list" else "int64")
    return spec


def _check_against_tensorflow(all_records: list, where: str) -> int:
    assert all_records, where
    for record in all_records:  # the bytes TensorFlow's deterministic serialisation writes
        assert tf.train.Example.FromString(record).SerializeToString(deterministic=True) == record
    spec = _spec_of(all_records[0])
    ours = example_proto.parse_fixed(all_records, spec)
    compiled = FixedSpec(spec).parse_records(all_records)
    theirs = tf.io.parse_example(tf.constant(all_records), _tf_spec(spec))
    for name in spec:
        np.testing.assert_array_equal(ours[name], theirs[name].numpy(), err_msg=f"{where} {name}")
        np.testing.assert_array_equal(compiled[name], theirs[name].numpy(),
                                      err_msg=f"{where} {name}")
        assert ours[name].dtype == compiled[name].dtype == theirs[name].numpy().dtype
    return len(all_records)


@pytest.fixture(scope="module")
def task_records(shared_data, vocab_file, tokenizer, tmp_path_factory):
    """Every record of each task's features on real data: MRPC and STS-B dev (int and float
    labels), CoNLL-2003 valid (labels -1 on later pieces), SQuAD v1.1 dev (training features:
    answer positions), SWAG (choices)."""
    tmp = tmp_path_factory.mktemp("records")
    made = {}
    mrpc = glue_slice(shared_data, "MRPC", tmp / "mrpc", {"train": 2, "dev": 408, "test": 2})
    made["mrpc"] = _task_records(ClassificationTask("MRPC", str(mrpc)), "eval_splits", tmp,
                                 vocab_file, tokenizer, 128)
    stsb = glue_slice(shared_data, "STS-B", tmp / "stsb", {"train": 2, "dev": 300, "test": 2})
    made["stsb"] = _task_records(ClassificationTask("STS-B", str(stsb)), "eval_splits", tmp,
                                 vocab_file, tokenizer, 64)
    conll = conll_slice(shared_data, tmp / "conll", {"train.txt": 2000, "valid.txt": 3000})
    made["conll"] = _task_records(NerTask(data_dir=str(conll)), "eval_splits", tmp, vocab_file,
                                  tokenizer, 64)
    squad = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text())
    (tmp / "squad.json").write_text(json.dumps(paragraphs(squad, 0, 12)))
    made["squad"] = _task_records(SquadTask(train_file=str(tmp / "squad.json"),
                                            predict_file=str(tmp / "squad.json")), "train_split",
                                  tmp, vocab_file, tokenizer, 192)
    swag = shared_data / "swag_sample" / "val_first91.csv"
    made["swag"] = _task_records(MultipleChoiceTask(task_name="swag", train_file=str(swag),
                                                    eval_file=str(swag), predict_file=str(swag)),
                                 "eval_splits", tmp, vocab_file, tokenizer, 64)
    return made


@pytest.mark.parametrize("name", ["mrpc", "stsb", "conll", "squad", "swag"])
def test_every_task_record_is_tensorflows_bytes_and_parses_the_same(task_records, name):
    count = _check_against_tensorflow(task_records[name], name)
    assert count >= {"mrpc": 408, "stsb": 300, "conll": 200, "squad": 100, "swag": 91}[name]


@pytest.mark.integration
def test_pretraining_records_parse_as_tensorflow_parses_them(tmp_path, vocab_file, shared_data):
    from bert_tf2.data_gen.pretraining import schema

    source = shared_data / "corpus" / "tinyshakespeare" / "input.txt"
    lines = source.read_text(encoding="utf-8").splitlines()[:1500]
    (tmp_path / "doc.txt").write_text("\n".join(lines), encoding="utf-8")
    out = tmp_path / "pre.tfrecord"
    # Forked from the warm Python: one worker (a pool of them would be spawned there).
    warm_python.run([sys.executable, "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
                     f"--input_file={tmp_path / 'doc.txt'}", f"--output_file={out}",
                     f"--vocab_file={vocab_file}", "--max_seq_length=64",
                     "--max_predictions_per_seq=10", "--dupe_factor=2", "--num_workers=1"],
                    check=True, cwd=REPO)
    framed = list(records.tfrecord_frames.read_frames(str(out)))
    assert framed == [r.numpy() for r in tf.data.TFRecordDataset(str(out))]
    assert _check_against_tensorflow(framed, "pretraining") > 100
    spec = {f.name: FixedLen((length,), "float32" if f.dtype == "float" else "int64")
            for f, length in zip(schema.FEATURES, (64, 64, 64, 10, 10, 10, 1))}
    assert spec == _spec_of(framed[0])


def test_edge_values_decode_as_tensorflow_wrote_them():
    int64 = [0, 1, 127, 128, 300, 2**31, 2**63 - 1, -1, -2**63, -300]
    example = tf.train.Example(features=tf.train.Features(feature={
        "ints": tf.train.Feature(int64_list=tf.train.Int64List(value=int64)),
        "floats": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5, -1e30, 3.25])),
        "empty": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
        "empty_floats": tf.train.Feature(float_list=tf.train.FloatList(value=[])),
        "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a", b""])),
    }))
    record = example.SerializeToString(deterministic=True)
    decoded = example_proto.decode(record)
    np.testing.assert_array_equal(decoded["ints"], np.array(int64, np.int64))
    compiled = FixedSpec({"ints": FixedLen((10,), "int64"), "floats": FixedLen((3,), "float32"),
                          "empty": FixedLen((0,), "int64")}).parse_records([record])
    np.testing.assert_array_equal(compiled["ints"][0], np.array(int64, np.int64))
    np.testing.assert_array_equal(compiled["floats"][0], np.array([0.5, -1e30, 3.25], np.float32))
    assert compiled["empty"].shape == (1, 0)
    np.testing.assert_array_equal(decoded["floats"], np.array([0.5, -1e30, 3.25], np.float32))
    assert len(decoded["empty"]) == len(decoded["empty_floats"]) == 0
    assert list(decoded["text"]) == [b"a", b""]
    ours = example_proto.encode({"ints": int64, "floats": [0.5, -1e30, 3.25], "empty": [],
                                 "empty_floats": []}, float_features=("floats", "empty_floats"))
    del example.features.feature["text"]
    assert ours == example.SerializeToString(deterministic=True)
    assert example_proto.encode({}) == tf.train.Example().SerializeToString()


def test_keys_are_in_protobufs_deterministic_order():
    keys = ["a", "ab", "abc", "b", "ba", "x", "x_y", "label_ids", "label", "é", "e"]
    example = tf.train.Example(features=tf.train.Features(feature={
        key: tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))
        for i, key in enumerate(keys)}))
    assert example_proto.encode({key: [i] for i, key in enumerate(keys)}) == \
        example.SerializeToString(deterministic=True)


def test_unpacked_int64_lists_are_read_too():
    # proto2 writers (and TensorFlow's parser) accept one varint field per value.
    name = b"x"
    values = b"".join(b"\x08" + protobuf_wire.write_varint(v) for v in (5, 300, -1))
    feature = example_proto.length_delimited(example_proto.TAG_3, values)
    entry = (example_proto.length_delimited(example_proto.TAG_1, name)
             + example_proto.length_delimited(example_proto.TAG_2, feature))
    record = example_proto.length_delimited(
        example_proto.TAG_1, example_proto.length_delimited(example_proto.TAG_1, entry))
    np.testing.assert_array_equal(example_proto.decode(record)["x"], [5, 300, -1])
    np.testing.assert_array_equal(
        FixedSpec({"x": FixedLen((3,), "int64")}).parse_records([record])["x"][0], [5, 300, -1])
    parsed = tf.io.parse_example(tf.constant([record]), {"x": tf.io.FixedLenFeature([3],
                                                                                     tf.int64)})
    np.testing.assert_array_equal(parsed["x"].numpy()[0], [5, 300, -1])


def _compiled_parse_fixed(records_, spec, where=""):
    return FixedSpec(spec).parse_records(records_, where=where)


@pytest.mark.parametrize("parse_fixed", [example_proto.parse_fixed, _compiled_parse_fixed])
def test_a_record_of_another_shape_or_not_an_example_is_named(parse_fixed):
    record = example_proto.encode({"a": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"f: record 0: feature 'a' has 3 values, 4 expected"):
        parse_fixed([record], {"a": FixedLen((4,), "int64")}, where="f: ")
    with pytest.raises(ValueError, match=r"record 1: no feature 'b'"):
        parse_fixed([example_proto.encode({"b": [1]}), record], {"b": FixedLen((), "int64")})
    with pytest.raises(ValueError, match="record 0: not a tf.train.Example"):
        parse_fixed([b"\x0a\x05ab"], {"a": FixedLen((), "int64")})


def test_the_compiled_parser_reads_what_tensorflow_reads_and_refuses_what_it_refuses():
    """Hand-made records: a repeated name (the last one counts), unknown fields at every level,
    a float list read as int64 (refused by both), cut-off bytes (refused by both)."""
    one = example_proto.encode({"a": [7, 8]})
    repeated = example_proto.length_delimited(example_proto.TAG_1, (
        example_proto.length_delimited(example_proto.TAG_1, example_proto.length_delimited(
            example_proto.TAG_1, b"a") + example_proto.length_delimited(
            example_proto.TAG_2, example_proto.encode_feature("int64", [1, 2, 3])))
        + example_proto.encode({"a": [4, 5]})[2:]))
    unknown = b"\x10\x05" + one + b"\x25\x00\x00\x00\x00"  # varint and fixed32 fields around
    spec = {"a": FixedLen((2,), "int64")}
    for record, expected in ((one, [7, 8]), (repeated, [4, 5]), (unknown, [7, 8])):
        theirs = tf.io.parse_example(tf.constant([record]), _tf_spec(spec))["a"].numpy()[0]
        np.testing.assert_array_equal(theirs, expected)
        np.testing.assert_array_equal(FixedSpec(spec).parse_records([record])["a"][0], expected)
    floats = example_proto.encode({"a": [1.0, 2.0]}, float_features=("a",))
    for bad, words in ((floats, "is not an int64 list"), (one[:-1], "not a tf.train.Example")):
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.parse_example(tf.constant([bad]), _tf_spec(spec))
        with pytest.raises(ValueError, match=words):
            FixedSpec(spec).parse_records([bad])


@pytest.mark.integration
def test_read_records_without_tensorflow_equals_tf_data(task_records, tmp_path):
    """The same file read in a process where TensorFlow cannot be imported (the JAX install)."""
    path = tmp_path / "conll.tf_record"
    with records.ShardedRecordWriter([str(path)]) as writer:
        for record in task_records["conll"]:
            writer.write(record)
    spec = _spec_of(task_records["conll"][0])
    ours = records.read_records(str(path), spec)
    script = ("import sys, pickle; sys.modules['tensorflow'] = None; "
              "from bert_tf2.data_gen import records; from bert_tf2.data_gen.example_proto import FixedLen; "
              f"spec = {{k: FixedLen(*v) for k, v in {({k: tuple(v) for k, v in spec.items()})!r}.items()}}; "
              f"sys.stdout.buffer.write(pickle.dumps(records.read_records({str(path)!r}, spec)))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=REPO,
                            env={**os.environ, "KERAS_BACKEND": "jax"})
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    import pickle

    theirs = pickle.loads(result.stdout)
    assert set(theirs) == set(ours)
    for name in ours:
        np.testing.assert_array_equal(theirs[name], ours[name])
        assert theirs[name].dtype == ours[name].dtype


def test_a_damaged_file_is_named_without_tensorflow(tmp_path):
    path = tmp_path / "cut.tf_record"
    with records.ShardedRecordWriter([str(path)]) as writer:
        for i in range(3):
            writer.write(example_proto.encode({"a": [i]}))
    data = path.read_bytes()
    path.write_bytes(data[:-5])
    with pytest.raises(ValueError, match=r"cut.tf_record: truncated or damaged at byte \d+"):
        list(records.tfrecord_frames.read_frames(str(path)))
