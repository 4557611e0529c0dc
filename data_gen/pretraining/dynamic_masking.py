"""Masking at input time (`--dynamic_masking`): every epoch sees new masks, as in RoBERTa.

Works on the records `create_pretraining_data` writes: a static record is first un-masked (the
`masked_lm_ids` put back at their positions, which restores the original ids exactly), then masked
afresh with the original's rule: candidates are the real tokens except [CLS]/[SEP];
`num_to_predict = min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))`, n counting
every token ([CLS] and [SEP] too), positions are
drawn uniformly; each becomes [MASK] with probability 0.8, stays with 0.1 and is replaced by a
uniformly drawn vocabulary id with 0.1; positions are sorted. Masking is per token (no whole-word
grouping). Randomness is stateless, seeded per batch from `tf.data.Dataset.random(seed)`, so a run
resumed from a checkpoint sees the same masks as an uninterrupted one.
"""
import tensorflow as tf


def unmask(batch: dict) -> tf.Tensor:
    """The original token ids of a batch of static records."""
    ids = batch["input_ids"]
    positions = tf.cast(batch["masked_lm_positions"], tf.int32)
    real = batch["masked_lm_weights"] > 0
    rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(positions))
    index = tf.stack([tf.boolean_mask(rows, real), tf.boolean_mask(positions, real)], axis=1)
    return tf.tensor_scatter_nd_update(ids, index,
                                       tf.boolean_mask(tf.cast(batch["masked_lm_ids"], ids.dtype),
                                                       real))


def mask_batch(batch: dict, seed, vocab_size: int, mask_id: int, cls_id: int, sep_id: int,
               masked_lm_prob: float = 0.15) -> dict:
    """New masks for a batch; `seed` is a shape-[2] int64 tensor."""
    ids = unmask(batch)
    max_predictions = batch["masked_lm_positions"].shape[1] or tf.shape(
        batch["masked_lm_positions"])[1]
    candidates = ((batch["input_mask"] > 0) & tf.not_equal(ids, cls_id)
                  & tf.not_equal(ids, sep_id))
    seeds = tf.random.experimental.stateless_split(seed, 4)
    # Uniform choice without replacement: the candidates with the largest random scores.
    scores = tf.where(candidates, tf.random.stateless_uniform(tf.shape(ids), seeds[0]), -1.0)
    # The original counts every token, [CLS] and [SEP] included (round half to even, as Python).
    length = tf.reduce_sum(tf.cast(batch["input_mask"] > 0, tf.float32), axis=1)
    to_predict = tf.minimum(tf.cast(max_predictions, tf.int32), tf.maximum(
        1, tf.cast(tf.round(length * masked_lm_prob), tf.int32)))
    available = tf.reduce_sum(tf.cast(candidates, tf.int32), axis=1)
    to_predict = tf.minimum(to_predict, available)
    top = tf.math.top_k(scores, k=max_predictions).indices  # [B, P], best first
    slot = tf.range(max_predictions)[None, :]
    used = slot < to_predict[:, None]
    positions = tf.sort(tf.where(used, top, tf.int32.max), axis=1)
    used = positions < tf.int32.max
    positions = tf.where(used, positions, 0)
    original = tf.gather(ids, positions, batch_dims=1)

    roll = tf.random.stateless_uniform(tf.shape(positions), seeds[1])
    random_ids = tf.random.stateless_uniform(tf.shape(positions), seeds[2], 0, vocab_size,
                                             dtype=tf.int32)
    replacement = tf.where(roll < 0.8, tf.cast(mask_id, ids.dtype),
                           tf.where(roll < 0.9, original, tf.cast(random_ids, ids.dtype)))
    rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(positions))
    index = tf.stack([tf.boolean_mask(rows, used), tf.boolean_mask(positions, used)], axis=1)
    masked = tf.tensor_scatter_nd_update(ids, index, tf.boolean_mask(replacement, used))
    weights = tf.cast(used, batch["masked_lm_weights"].dtype)
    return {**batch, "input_ids": masked,
            "masked_lm_positions": tf.cast(positions, batch["masked_lm_positions"].dtype),
            "masked_lm_ids": tf.where(used, original, 0),
            "masked_lm_weights": weights}


def with_dynamic_masking(dataset: tf.data.Dataset, seed: int, **mask_args) -> tf.data.Dataset:
    """`dataset` (batched records) with every batch masked afresh, reproducibly from `seed`."""
    seeds = tf.data.Dataset.random(seed=seed).batch(2)
    return tf.data.Dataset.zip((dataset, seeds)).map(
        lambda batch, s: mask_batch(batch, s, **mask_args), num_parallel_calls=tf.data.AUTOTUNE)
