"""The tf.data reader of pretraining records: what run_pretraining.py is fed."""
import numpy as np
import pytest
import tensorflow as tf

from bert_tf2.data_gen.pretraining.create_pretraining_data import create_pretraining_data
from bert_tf2.data_gen.pretraining.dataset import load_records, pretraining_dataset
from bert_tf2.data_gen.pretraining.documents import InputOptions
from bert_tf2.data_gen.pretraining.instances import InstanceSettings


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shared_data, minilm_dir) -> list:
    out = tmp_path_factory.mktemp("records")
    paths = [str(out / f"train-{i}.tfrecord") for i in range(3)]
    create_pretraining_data([str(shared_data / "corpus" / "wikitext-2" / "valid.txt")], paths,
                            str(minilm_dir / "vocab.txt"), input_options=InputOptions("wikitext"),
                            settings=InstanceSettings(dupe_factor=1))
    return paths


def test_evaluation_reads_every_record_once_in_file_order(shards):
    expected = load_records(shards, 128, 20)
    batches = list(pretraining_dataset(shards, 64, 128, 20, is_training=False))
    assert len(batches) == len(expected["input_ids"]) // 64  # the remainder is dropped
    for name, values in expected.items():
        got = np.concatenate([batch[name].numpy() for batch in batches])
        np.testing.assert_array_equal(got, values[:len(got)])


def test_training_repeats_shuffles_and_gives_int32(shards):
    total = len(load_records(shards, 128, 20)["input_ids"])
    dataset = pretraining_dataset(shards, 32, 128, 20, is_training=True, seed=3)
    batches = list(dataset.take(total // 32 + 20))  # more than one pass over the data
    assert len(batches) == total // 32 + 20
    first = batches[0]
    assert {name: (t.dtype, tuple(t.shape)) for name, t in first.items()} == {
        "input_ids": (tf.int32, (32, 128)), "input_mask": (tf.int32, (32, 128)),
        "segment_ids": (tf.int32, (32, 128)), "masked_lm_positions": (tf.int32, (32, 20)),
        "masked_lm_ids": (tf.int32, (32, 20)), "masked_lm_weights": (tf.float32, (32, 20)),
        "next_sentence_labels": (tf.int32, (32, 1))}
    again = next(iter(pretraining_dataset(shards, 32, 128, 20, is_training=True, seed=3)))
    np.testing.assert_array_equal(again["input_ids"], first["input_ids"])  # seeded: repeatable
    in_order = next(iter(pretraining_dataset(shards, 32, 128, 20, is_training=False)))
    assert not np.array_equal(in_order["input_ids"], first["input_ids"])  # shuffled


def test_no_files_is_an_error():
    with pytest.raises(ValueError, match="no input files"):
        pretraining_dataset([], 8, 128, 20, is_training=True)


def test_input_pipelines_split_the_data_without_overlap(shards):
    """Workers split the files when there are enough, else the records; nobody is left empty."""
    import tensorflow as tf

    def ids(files, pipelines, pipeline):
        context = tf.distribute.InputContext(num_input_pipelines=pipelines,
                                             input_pipeline_id=pipeline)
        batches = pretraining_dataset(files, 8, 128, 20, is_training=False, input_context=context)
        return {tuple(row) for batch in batches for row in batch["input_ids"].numpy()}

    everything = {tuple(row) for row in load_records(shards[:1], 128, 20)["input_ids"]}
    one_file = [ids(shards[:1], 2, i) for i in range(2)]  # fewer files than pipelines: records
    assert one_file[0] and one_file[1] and not one_file[0] & one_file[1]
    assert len(one_file[0] | one_file[1]) >= len(everything) - 2 * 8  # all but the remainders
    by_file = [ids(shards, len(shards), i) for i in range(len(shards))]
    assert all(by_file) and not set.intersection(*by_file)


def test_pretraining_input_runs_without_the_autotune_model(shards):
    """As every input pipeline (tests/test_datasets.py): its thread could hold a finished run."""
    for is_training in (True, False):
        dataset = pretraining_dataset(shards, 32, 128, 20, is_training=is_training, seed=3)
        assert dataset.options().autotune.enabled is False
        assert next(iter(dataset))["input_ids"].shape == (32, 128)
