"""Several examples per row (`data_gen.example_packing`, `--pack_examples`): the packed batch holds
each example's tokens unchanged, and the packed classifier gives every example the logits it gets
alone (1e-5, real MiniLM weights on real MRPC and CoLA); the packed training batches hold the same
examples as the unpacked ones."""
import numpy as np
import pytest
import tensorflow as tf
from conftest import glue_features
from test_datasets import synthetic_features

from bert_tf2.data_gen import datasets
from bert_tf2.data_gen.example_packing import pack_batch
from bert_tf2.modeling.layers import packed_attention_bias, packed_positions


def unpack(packed, lengths):
    """Each example's (ids, segments) read back from the packed rows via `example_starts`."""
    width = packed["input_ids"].shape[1]
    flat = {name: packed[name].reshape(-1) for name in ("input_ids", "segment_ids", "input_mask")}
    out = []
    for start, length in zip(packed["example_starts"], lengths):
        assert start // width == (start + length - 1) // width  # never split over two rows
        out.append({name: value[start:start + length] for name, value in flat.items()})
    return out


def test_packing_keeps_every_example_whole_in_fewer_rows():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 40, 32)
    features = synthetic_features(lengths, 48, seed=1)
    batch = {name: tf.constant(value) for name, value in features.items()}
    packed = {k: v.numpy() for k, v in pack_batch(batch, 48).items()}
    rows, width = packed["input_ids"].shape
    assert width % 8 == 0 and width <= 48
    # First-fit decreasing needs at most this many rows; far fewer than one per example.
    assert rows <= int(np.ceil(lengths.sum() / 48 * 11 / 9)) + 1 < 32
    for name in ("label_ids", "example_index", "is_real_example"):  # per example, in order
        np.testing.assert_array_equal(packed[name], features[name])
    numbers_seen = {}
    for i, got in enumerate(unpack(packed, lengths)):
        np.testing.assert_array_equal(got["input_ids"], features["input_ids"][i, :lengths[i]])
        np.testing.assert_array_equal(got["segment_ids"], features["segment_ids"][i, :lengths[i]])
        number = got["input_mask"][0]
        assert number >= 1 and (got["input_mask"] == number).all()
        row = packed["example_starts"][i] // width
        assert (row, number) not in numbers_seen  # one example per (row, number)
        numbers_seen[(row, number)] = i
    # Nothing but the examples: as many real tokens as the batch had.
    assert (packed["input_mask"] > 0).sum() == lengths.sum()
    # Example numbers run 1, 2, ... from the left of each row.
    for row in packed["input_mask"]:
        real = row[row > 0]
        assert list(dict.fromkeys(real)) == list(range(1, len(set(real)) + 1))


def test_exact_width_packing_cuts_rows_to_the_fullest_row():
    """On a CPU without XLA the driver asks for `width_multiple=1`: rows end at the fullest
    row's last token, and every example still unpacks whole."""
    lengths = np.array([3, 5, 7, 9, 10, 30, 28])  # first fit: rows 30+10+7 and 28+9+5+3
    features = synthetic_features(lengths, 48, seed=2)
    batch = {name: tf.constant(value) for name, value in features.items()}
    packed = {k: v.numpy() for k, v in pack_batch(batch, 48, width_multiple=1).items()}
    assert (packed["input_mask"] > 0).sum(axis=1).tolist() == [47, 45]
    assert packed["input_ids"].shape == (2, 47)
    assert pack_batch(batch, 48)["input_ids"].shape == (2, 48)  # the default rounds up to 8
    for i, got in enumerate(unpack(packed, lengths)):
        np.testing.assert_array_equal(got["input_ids"], features["input_ids"][i, :lengths[i]])


def test_packed_positions_and_attention_bias():
    mask = np.array([[1, 1, 1, 2, 2, 3, 0, 0],
                     [1, 1, 1, 1, 1, 0, 0, 0]], np.int32)
    np.testing.assert_array_equal(np.asarray(packed_positions(mask))[:, :6],
                                  [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 5]])
    bias = np.asarray(packed_attention_bias(mask))[:, 0]
    for r in range(2):
        for i in range(8):
            for j in range(8):
                allowed = mask[r, i] == mask[r, j] and mask[r, j] > 0
                assert bias[r, i, j] == (0.0 if allowed else -10000.0)
    # A 0/1 mask: every real token sees exactly the real tokens, as the original's mask says.
    np.testing.assert_array_equal(bias[1, :5], np.repeat(((mask[1] == 0) * -10000.0)[None], 5, 0))




@pytest.mark.parametrize("task", ["MRPC", "CoLA"])
def test_packed_logits_equal_each_example_alone_on_real_weights(
        task, minilm_classifier, shared_data, tokenizer):
    from bert_tf2.tasks.tensors import model_inputs

    features = glue_features(shared_data, tokenizer, task, 96)
    alone = np.asarray(minilm_classifier(model_inputs(features), training=False)["logits"])
    assert np.ptp(alone, axis=0).max() > 1e-2  # the examples do get different logits
    rows = 0
    for batch in datasets.in_memory_dataset(features, 32, False,
                                            batching=datasets.Batching(trim=False)):
        packed = pack_batch(batch, 128)
        rows += packed["input_ids"].shape[0]
        logits = minilm_classifier.packed_logits(model_inputs(packed), packed["example_starts"],
                                                 training=False)
        np.testing.assert_allclose(np.asarray(logits), alone[batch["example_index"].numpy()],
                                   atol=1e-5, rtol=0)
    assert rows <= (48 if task == "MRPC" else 12)  # 96 examples in far fewer rows


def test_packed_training_batches_hold_the_unpacked_batches_examples(shared_data, tokenizer):
    from bert_tf2.tasks.classification.task import ClassificationTask

    features = glue_features(shared_data, tokenizer, "CoLA", 200)
    task = ClassificationTask("cola", str(shared_data / "glue" / "CoLA"))
    task.setup = type("Setup", (), {"max_seq_length": 128})

    def first(batching, n=6):
        return list(task.dataset(features, 32, True, 7, None, batching).take(n)
                    .as_numpy_iterator())

    plain = first(datasets.Batching(bucket_window=0))
    packed = first(datasets.Batching(bucket_window=datasets.BUCKET_WINDOW, pack=True))
    lengths = datasets.example_lengths(features)
    for a, b in zip(plain, packed):
        np.testing.assert_array_equal(a["example_index"], b["example_index"])
        np.testing.assert_array_equal(a["label_ids"], b["label_ids"])
        assert b["input_ids"].shape[0] < 8  # CoLA: 32 sentences in a few rows of 128
        for i, got in zip(b["example_index"], unpack(b, lengths[b["example_index"]])):
            np.testing.assert_array_equal(got["input_ids"],
                                          features["input_ids"][i, :lengths[i]])


def test_packed_loss_and_gradients_equal_the_unpacked_ones(minilm_classifier, shared_data,
                                                           tokenizer):
    """Training through packed rows moves the weights as unpacked rows do: with dropout off the
    task's loss and every gradient agree (MiniLM, 32 real CoLA sentences in a few rows)."""
    from bert_tf2.tasks.classification.task import ClassificationTask

    features = glue_features(shared_data, tokenizer, "CoLA", 32)
    task = ClassificationTask("cola", str(shared_data / "glue" / "CoLA"))
    batch = next(iter(datasets.in_memory_dataset(features, 32, False,
                                                 batching=datasets.Batching(width_multiple=1))))
    packed = pack_batch(batch, 128, width_multiple=1)
    assert packed["input_ids"].shape[0] < 8
    variables = minilm_classifier.trainable_variables

    def loss_and_grads(rows):
        with tf.GradientTape() as tape:
            loss, _ = task.loss_and_metrics(minilm_classifier, rows, training=False)
        return float(loss), tape.gradient(loss, variables)

    loss, grads = loss_and_grads(batch)
    packed_loss, packed_grads = loss_and_grads(packed)
    assert abs(packed_loss - loss) < 1e-5 * loss
    for variable, a, b in zip(variables, packed_grads, grads):
        a, b = np.asarray(tf.convert_to_tensor(a)), np.asarray(tf.convert_to_tensor(b))
        if variable.path.endswith("key/bias"):  # no gradient reaches it (softmax's shift)
            continue
        assert np.abs(b).max() > 0, variable.path
        assert np.abs(a - b).max() <= 1e-4 * np.abs(b).max(), variable.path
