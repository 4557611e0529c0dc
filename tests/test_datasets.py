"""The fine-tuning input pipeline of `data_gen.datasets`: evaluation order, seeded epochs,
sharding and padding for several replicas, trimmed batches, length-bucketed batches."""
import math

import numpy as np
import pytest
import tensorflow as tf

from bert_tf2.data_gen import datasets
from bert_tf2.data_gen.errors import DataError


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
        out = batches(datasets.in_memory_dataset(features, 4, is_training=False,
                                                         batching=datasets.Batching(trim=trim)))
        assert [len(b["example_index"]) for b in out] == [4] * 5 + [3]
        np.testing.assert_array_equal(np.concatenate([b["example_index"] for b in out]),
                                      np.arange(23))
        for b in out:
            assert_rows_match(b, features)
            if not trim:
                assert b["input_ids"].shape[1] == 30


def stream(features, batch_size, n_batches, **kwargs):
    out = batches(datasets.in_memory_dataset(features, batch_size, is_training=True, **kwargs),
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
    out = batches(datasets.in_memory_dataset(features, 4, is_training=True, seed=0), 12)
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
        out = batches(datasets.in_memory_dataset(features, 4, False, input_context=context))
        seen.append(np.concatenate([b["example_index"] for b in out]))
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(11))


def test_too_few_training_examples():
    features = synthetic_features([5, 6, 7], 10)
    with pytest.raises(DataError, match="fewer than one batch"):
        datasets.in_memory_dataset(features, 4, is_training=True)
    features = synthetic_features([5] * 7, 10)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0)
    with pytest.raises(DataError, match="fewer than one batch"):
        datasets.in_memory_dataset(features, 4, is_training=True, input_context=context)
    # Exactly one batch is enough, and evaluation of fewer than a batch is fine.
    assert len(batches(datasets.in_memory_dataset(synthetic_features([5] * 4, 10), 4, True), 3)) == 3
    assert len(batches(datasets.in_memory_dataset(synthetic_features([5] * 3, 10), 4, False))) == 1


def expected_width(lengths, max_len, multiple=8):
    return min(max_len, math.ceil(max(lengths) / multiple) * multiple)


def test_trim_to_the_longest_example_rounded_up_to_8():
    # max_seq_length 30 is not a multiple of 8: a batch longer than 24 keeps all 30 positions.
    lengths = [3, 5, 2, 7,    9, 4, 4, 4,    25, 2, 2, 2,    8, 8, 1, 1,    16, 3, 3, 3,
               17, 3, 2]
    widths = [8, 16, 30, 8, 16, 24]
    features = synthetic_features(lengths, 30)
    out = batches(datasets.in_memory_dataset(features, 4, is_training=False))
    assert [b["input_ids"].shape[1] for b in out] == widths
    for b in out:
        assert_rows_match(b, features)
        for name in datasets.SEQUENCE_FEATURES:
            assert b[name].shape[1] == b["input_ids"].shape[1]


def test_trim_to_the_exact_longest_example_with_width_multiple_1():
    lengths = [3, 5, 2, 7,    9, 4, 4, 4,    25, 2, 2, 2,    8, 8, 1, 1,    16, 3, 3, 3,
               17, 3, 2]
    features = synthetic_features(lengths, 30)
    exact = datasets.Batching(width_multiple=1)
    out = batches(datasets.in_memory_dataset(features, 4, is_training=False, batching=exact))
    assert [b["input_ids"].shape[1] for b in out] == [7, 9, 25, 8, 16, 17]
    for b in out:
        assert_rows_match(b, features)
    # Bucketed training batches: each as wide as its longest row, no wider.
    bucketed = datasets.Batching(bucket_window=2, width_multiple=1)
    lengths = np.random.default_rng(3).integers(2, 40, 64)
    features = synthetic_features(lengths, 40)
    for b in batches(datasets.in_memory_dataset(features, 8, True, seed=2, batching=bucketed), 16):
        assert b["input_ids"].shape[1] == lengths[b["example_index"]].max()
        assert_rows_match(b, features)


def test_the_driver_asks_for_exact_widths_only_on_a_cpu_without_xla():
    """Exact on a CPU without XLA, multiples of 32 under XLA, of 8 on a GPU without it."""
    from bert_tf2.engine.distribution import get_strategy
    from bert_tf2.engine.finetuning import FinetuneSettings, batching_of

    if tf.config.list_logical_devices("GPU"):
        pytest.skip("this machine has a GPU; the test checks the CPU-only choice")
    settings = FinetuneSettings(output_dir="unused")
    for strategy in (tf.distribute.get_strategy(), get_strategy("one_device")):
        assert batching_of(settings, strategy).width_multiple == 1
        # Every step XLA-compiled, once per width: multiples of 32 (GPUs without XLA: of 8).
        xla = FinetuneSettings(output_dir="unused", jit_compile=True)
        assert batching_of(xla, strategy).width_multiple == 32

    class OnGpu:
        class extended:
            worker_devices = ("/job:localhost/replica:0/task:0/device:GPU:0",)
    assert batching_of(settings, OnGpu()).width_multiple == 8


def test_trim_in_training_batches():
    lengths = np.random.default_rng(7).integers(2, 40, 64)
    features = synthetic_features(lengths, 40)
    out = batches(datasets.in_memory_dataset(features, 8, is_training=True, seed=1), 24)
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

    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertClassifier

    keras.utils.set_random_seed(0)
    config = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64)
    model = BertClassifier(BertEncoder(config), num_labels=3)
    lengths = [3, 11, 7, 2, 19, 4, 5, 6, 9, 30, 1, 2]
    features = synthetic_features(lengths, 40, seed=8)

    def logits(trim):
        out = []
        for b in datasets.in_memory_dataset(features, 4, is_training=False,
                                                         batching=datasets.Batching(trim=trim)):
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


# ------------------------------------------------------------------ bucketing by length
BUCKETED = datasets.Batching(bucket_window=3)


def test_bucketed_training_reads_every_example_once_per_epoch_in_batches_of_similar_length():
    rng = np.random.default_rng(9)
    count, batch_size, window = 96, 8, 3
    lengths = rng.integers(2, 60, count)
    features = synthetic_features(lengths, 64)
    n_batches = 3 * count // batch_size
    order = stream(features, batch_size, n_batches, seed=5, batching=BUCKETED)
    for e in range(3):  # 96 = 4 windows of 3 batches of 8: each epoch is whole windows
        np.testing.assert_array_equal(np.sort(order[e * count:(e + 1) * count]), np.arange(count))
    # Within each window the batches split the window's examples by length: no batch's
    # range of lengths overlaps another's of the same window (ties aside).
    per_window = order.reshape(-1, window, batch_size)
    for batches_ in per_window:
        spans = sorted((lengths[b].min(), lengths[b].max()) for b in batches_)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    # Much less padding than random batches of the same examples.
    random_order = stream(features, batch_size, n_batches, seed=5)

    def padding(o):
        b = o.reshape(-1, batch_size)
        return (lengths[b].max(1)[:, None] - lengths[b]).sum()
    assert padding(order) < 0.5 * padding(random_order)
    # Deterministic for a seed; another seed gives another order; the windows' batches are not
    # left in length order (they are shuffled).
    np.testing.assert_array_equal(stream(features, batch_size, n_batches, seed=5,
                                         batching=BUCKETED), order)
    assert not np.array_equal(stream(features, batch_size, n_batches, seed=6,
                                     batching=BUCKETED), order)
    starts = lengths[per_window[:, :, 0]]
    assert any(list(w) != sorted(w) for w in starts)


def test_bucketed_training_resumes_by_skipping_batches():
    features = synthetic_features(np.random.default_rng(10).integers(2, 30, 40), 32)
    dataset = datasets.in_memory_dataset(features, 4, True, seed=2, batching=BUCKETED)
    whole = [b["example_index"] for b in batches(dataset, 25)]
    resumed = [b["example_index"] for b in batches(dataset.skip(11), 14)]
    for a, b in zip(whole[11:], resumed):
        np.testing.assert_array_equal(a, b)


def test_bucketed_evaluation_reads_each_example_once_shortest_first():
    lengths = np.random.default_rng(11).integers(1, 40, 21)
    features = synthetic_features(lengths, 40)
    out = batches(datasets.in_memory_dataset(features, 4, False, batching=BUCKETED))
    rows = np.concatenate([b["example_index"] for b in out])
    np.testing.assert_array_equal(np.sort(rows), np.arange(21))
    np.testing.assert_array_equal(lengths[rows], np.sort(lengths))
    for b in out:
        assert_rows_match(b, features)
        assert b["input_ids"].shape[1] == expected_width(lengths[b["example_index"]], 40)
    # With several replicas the padding rows (example_index -1) come last.
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=2)
    out = batches(datasets.in_memory_dataset(features, 4, False, input_context=context,
                                             batching=BUCKETED))
    rows = np.concatenate([b["example_index"] for b in out])
    assert len(rows) == 24 and list(rows[21:]) == [-1, -1, -1]
    np.testing.assert_array_equal(lengths[rows[:21]], np.sort(lengths))


def test_example_lengths_of_choices_take_the_longest_choice():
    mask = np.zeros((2, 3, 10), np.int32)
    mask[0, 0, :4] = mask[0, 1, :7] = mask[0, 2, :2] = 1
    mask[1, :, :5] = 1
    np.testing.assert_array_equal(datasets.example_lengths({"input_mask": mask}), [7, 5])


def test_pipelines_run_without_the_autotune_model():
    """With tf.data's autotuning model on, deleting an iterator that had run for 25 s or more
    waited for the model's thread in 12 of 20 fine-tuning runs (up to 39 s, issue 29,
    bench/exit_latency.py); every pipeline here runs without it, and still reads everything."""
    features = synthetic_features([5, 9, 3, 7, 12, 4], 16)
    for is_training in (True, False):
        dataset = datasets.in_memory_dataset(features, 2, is_training, seed=1)
        assert dataset.options().autotune.enabled is False
        rows = np.concatenate([b["example_index"] for b in batches(dataset, 3)])
        assert sorted(rows.tolist()) == list(range(6))


def test_the_trainers_input_runs_without_the_autotune_model_whatever_the_caller_gives(tmp_path):
    """A caller's own pipeline (tests/test_training_loop.py's, a user's `dataset_fn`) has the
    model on; the trainer's input on one replica turns it off, so that deleting the iterator
    waits for no model thread (16-47 s of a 6 s test in `make test`, 2026-11-29). A pipeline
    that has it off already is kept as it is: no second options node, so an iterator
    checkpointed from it restores into the same pipeline."""
    import keras
    import tensorflow as tf

    from bert_tf2.engine.distribution import get_strategy
    from bert_tf2.engine.trainer_config import TrainerConfig
    from bert_tf2.engine.training import Trainer

    def dataset_fn(context):
        return tf.data.Dataset.range(10).batch(2)

    assert dataset_fn(None).options().autotune.enabled is not False
    strategy = get_strategy("one_device")
    with strategy.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.1)
    trainer = Trainer(model, optimizer, None, strategy, TrainerConfig(str(tmp_path), 1))
    for skip in (0, 2):
        dataset = trainer._input(dataset_fn, skip_updates=skip)
        assert dataset.options().autotune.enabled is False
        assert [b.tolist() for b in dataset.as_numpy_iterator()] == [
            [2 * i, 2 * i + 1] for i in range(skip, 5)]
    off = datasets.without_autotune_model(dataset_fn(None))
    assert datasets.without_autotune_model(off) is off
