"""The NumPy input pipeline (JAX, PyTorch) against tf.data's `in_memory_dataset`: evaluation batches
equal to TensorFlow's, training batches by the same rules (each epoch a permutation, buckets
sorted by length, trimmed widths, whole examples), resumable by `skip`."""

import numpy as np
import pytest

from bert_tf2.data_gen.datasets import BUCKET_WINDOW, Batching, in_memory_dataset
from bert_tf2.data_gen.numpy_datasets import HostInputContext, in_memory_batches
from bert_tf2.tasks.ner.features import _add_label_weights


def _features(count=203, length=32, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, length + 1, count)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1000, 2000, (count, length)).astype(np.int32) * mask
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
            "label_ids": rng.integers(-1, 5, (count, length)).astype(np.int32),
            "example_index": np.arange(count, dtype=np.int32),
            "is_real_example": np.ones(count, np.int32)}


def _tf_batches(dataset, count=None):
    batches = []
    for i, batch in enumerate(dataset.as_numpy_iterator()):
        if count is not None and i >= count:
            break
        batches.append(batch)
    return batches


@pytest.mark.parametrize("batching", [Batching(trim=False), Batching(trim=True),
                                      Batching(trim=True, bucket_window=BUCKET_WINDOW),
                                      Batching(trim=True, bucket_window=4, width_multiple=1)])
def test_evaluation_batches_equal_tensorflows(batching):
    features = _features()
    ours = list(in_memory_batches(features, 16, False, batching=batching,
                                  transform=_add_label_weights))
    theirs = _tf_batches(in_memory_dataset(features, 16, False, batching=batching,
                                           transform=_add_label_weights))
    assert len(ours) == len(theirs) == 13
    for a, b in zip(ours, theirs):
        assert set(a) == set(b)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
            assert a[name].dtype == b[name].dtype, name


def test_several_pipelines_share_the_padded_split_and_mark_the_padding():
    features = _features(count=50)
    rows = []
    for pipeline in range(2):
        context = HostInputContext(2, pipeline, 2)
        batches = list(in_memory_batches(features, 8, False, input_context=context,
                                         batching=Batching(trim=False)))
        assert len(batches) == 4  # 50 rows padded to 64 = 2 pipelines x 4 batches of 8
        rows += [batch["example_index"] for batch in batches]
    index = np.concatenate(rows)
    assert sorted(index[index >= 0].tolist()) == list(range(50))
    assert (index == -1).sum() == 14


@pytest.mark.parametrize("window", [0, 4])
def test_training_sees_each_example_once_per_epoch_and_resumes_by_skip(window):
    features = _features(count=96)
    batching = Batching(trim=True, bucket_window=window, width_multiple=8)
    batches = in_memory_batches(features, 8, True, seed=7, batching=batching)
    first = [b for _, b in zip(range(36), batches)]  # three epochs of 12 batches
    for epoch in range(3):
        rows = np.concatenate([b["example_index"] for b in first[12 * epoch:12 * epoch + 12]])
        assert sorted(rows.tolist()) == list(range(96))
    orders = [np.concatenate([b["example_index"] for b in first[12 * e:12 * e + 12]])
              for e in range(2)]
    assert not np.array_equal(orders[0], orders[1])  # a fresh permutation each epoch
    for batch in first:
        longest = batch["input_mask"].sum(-1).max()
        assert batch["input_ids"].shape == (8, min(32, -(-longest // 8) * 8))
    again = [b for _, b in zip(range(36), batches.skip(5))]
    for a, b in zip(first[5:], again):
        np.testing.assert_array_equal(a["example_index"], b["example_index"])
    other_seed = next(iter(in_memory_batches(features, 8, True, seed=8, batching=batching)))
    assert not np.array_equal(other_seed["example_index"], first[0]["example_index"])


def test_bucketing_sorts_each_window_by_length_as_tensorflow_does():
    features = _features(count=400, length=64)
    batching = Batching(trim=True, bucket_window=10, width_multiple=1)
    ours = [b for _, b in zip(range(20), in_memory_batches(features, 10, True, seed=3,
                                                           batching=batching))]
    theirs = _tf_batches(in_memory_dataset(features, 10, True, seed=3, batching=batching), 20)
    lengths = features["input_mask"].sum(-1)
    for batches in (ours, theirs):
        for window in range(2):  # each window's batches, sorted, tile its rows by length
            spans = sorted((lengths[b["example_index"]].min(), lengths[b["example_index"]].max())
                           for b in batches[10 * window:10 * window + 10])
            assert all(hi <= lo for (_, hi), (lo, _) in zip(spans, spans[1:]))
    padding = [np.mean([1 - b["input_mask"].mean() for b in batches])
               for batches in (ours, theirs)]
    assert abs(padding[0] - padding[1]) < 0.05, padding  # both trim to little padding


def test_whole_examples_keep_every_window_of_a_document_together():
    features = _features(count=30)
    features["example_index"] = np.repeat(np.arange(12), [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4])
    batching = Batching(trim=True)
    for ours in [b for _, b in zip(range(9), in_memory_batches(
            features, 4, True, seed=1, batching=batching, whole_examples=True))]:
        slots, index = ours["example_slot"], ours["example_index"]
        assert sorted(set(slots.tolist())) == [0, 1, 2, 3]
        for slot in range(4):  # each slot is all the rows of one document
            document = set(index[slots == slot].tolist())
            assert len(document) == 1
            assert (slots == slot).sum() == (features["example_index"] == document.pop()).sum()


def test_too_few_training_examples_is_named():
    from bert_tf2.data_gen.errors import DataError

    with pytest.raises(DataError, match="5 training examples are fewer than one batch of 8"):
        in_memory_batches(_features(count=5), 8, True)


@pytest.mark.parametrize("window", [0, 4])
def test_several_pipelines_each_take_a_contiguous_share_of_one_pipelines_batch(window):
    """Two JAX processes assemble, row for row, the batch one process reads at the global size,
    so that their losses are one process's."""
    features = _features(count=96)
    batching = Batching(trim=False, bucket_window=window)
    whole = [b for _, b in zip(range(20), in_memory_batches(features, 8, True, seed=5,
                                                            batching=batching))]
    shares = [[b for _, b in zip(range(20), in_memory_batches(
        features, 4, True, seed=5, input_context=HostInputContext(2, p, 2), batching=batching))]
        for p in range(2)]
    for one, first, second in zip(whole, *shares):
        np.testing.assert_array_equal(
            np.concatenate([first["example_index"], second["example_index"]]),
            one["example_index"])
