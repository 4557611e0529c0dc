"""Dynamic masking: the original's masking rule applied at input time, reproducibly."""
import numpy as np
import tensorflow as tf

from bert_tf2.data_gen.pretraining.dynamic_masking import mask_batch, unmask, with_dynamic_masking

CLS, SEP, MASK, VOCAB = 101, 102, 103, 1000


def static_batch(rng, rows=64, length=32, predictions=6):
    """Records as create_pretraining_data writes them: [CLS] A [SEP] B [SEP], padded, masked."""
    ids = np.zeros((rows, length), np.int64)
    mask = np.zeros_like(ids)
    originals = []
    positions = np.zeros((rows, predictions), np.int64)
    masked_ids = np.zeros_like(positions)
    weights = np.zeros((rows, predictions), np.float32)
    for r in range(rows):
        n = int(rng.integers(8, length + 1))
        tokens = rng.integers(1000 // 2, VOCAB, n)
        tokens[0], tokens[n // 2], tokens[n - 1] = CLS, SEP, SEP
        ids[r, :n], mask[r, :n] = tokens, 1
        originals.append(ids[r].copy())
        k = min(predictions, max(1, round(n * 0.15)))
        chosen = np.sort(rng.choice([i for i in range(1, n - 1) if i != n // 2], k, replace=False))
        positions[r, :k], masked_ids[r, :k], weights[r, :k] = chosen, ids[r, chosen], 1.0
        ids[r, chosen] = MASK
    batch = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
             "masked_lm_positions": positions, "masked_lm_ids": masked_ids,
             "masked_lm_weights": weights, "next_sentence_labels": np.zeros((rows, 1), np.int64)}
    return {k: tf.constant(v) for k, v in batch.items()}, np.stack(originals)


def test_unmask_restores_the_original_ids():
    batch, originals = static_batch(np.random.default_rng(0))
    np.testing.assert_array_equal(unmask(batch).numpy(), originals)


def test_new_masks_follow_the_original_rule():
    rng = np.random.default_rng(1)
    counts = {"mask": 0, "same": 0, "random": 0}
    for step in range(40):
        batch, originals = static_batch(rng)
        out = {k: v.numpy() for k, v in mask_batch(
            batch, tf.constant([7, step], tf.int64), vocab_size=VOCAB, mask_id=MASK, cls_id=CLS,
            sep_id=SEP).items()}
        for r in range(originals.shape[0]):
            n = int(batch["input_mask"][r].numpy().sum())
            real = out["masked_lm_weights"][r] > 0
            pos = out["masked_lm_positions"][r][real]
            assert real.sum() == min(6, max(1, round(n * 0.15)))  # n counts [CLS]/[SEP]
            assert list(pos) == sorted(set(pos))  # sorted, distinct
            assert not np.isin(originals[r][pos], [CLS, SEP, 0]).any()
            np.testing.assert_array_equal(out["masked_lm_ids"][r][real], originals[r][pos])
            assert (out["masked_lm_ids"][r][~real] == 0).all()
            unchanged = np.setdiff1d(np.arange(32), pos)
            np.testing.assert_array_equal(out["input_ids"][r][unchanged], originals[r][unchanged])
            new = out["input_ids"][r][pos]
            counts["mask"] += int(np.sum(new == MASK))
            counts["same"] += int(np.sum(new == originals[r][pos]))
            counts["random"] += int(np.sum((new != MASK) & (new != originals[r][pos])))
    total = sum(counts.values())
    assert total > 5000
    assert abs(counts["mask"] / total - 0.8) < 0.02
    # A random replacement can hit the original id (1 in 1000 here): "same" is ~10% + 0.01%.
    assert abs(counts["same"] / total - 0.1) < 0.015
    assert abs(counts["random"] / total - 0.1) < 0.015


def test_same_seed_same_masks_and_epochs_differ():
    batch, _ = static_batch(np.random.default_rng(2))
    dataset = tf.data.Dataset.from_tensors(batch).repeat(2)
    args = dict(vocab_size=VOCAB, mask_id=MASK, cls_id=CLS, sep_id=SEP)
    first = [b["input_ids"].numpy() for b in with_dynamic_masking(dataset, seed=5, **args)]
    again = [b["input_ids"].numpy() for b in with_dynamic_masking(dataset, seed=5, **args)]
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert (first[0] != first[1]).any()  # the second pass over the same record masks anew
