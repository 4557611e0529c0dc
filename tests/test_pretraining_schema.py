"""The pretraining record schema: the hand-written encoder against TensorFlow's, and the spec."""
import random

import numpy as np
import pytest
import tensorflow as tf

from bert_tf2.data_gen.pretraining import schema as pretraining_schema


def _tf_example(features: dict) -> tf.train.Example:
    def feature(name, values):
        if name == "masked_lm_weights":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    return tf.train.Example(features=tf.train.Features(
        feature={name: feature(name, values) for name, values in features.items()}))


def _random_features(rng: random.Random, max_seq_length: int, max_predictions: int) -> dict:
    length = rng.randint(3, max_seq_length)
    predictions = rng.randint(0, min(max_predictions, length))
    big_ids = [rng.choice([rng.randint(0, 30521), rng.randint(0, 250_000), 1 << 40])
               for _ in range(length)]
    return pretraining_schema.padded_features(
        big_ids, [rng.randint(0, 1) for _ in range(length)],
        sorted(rng.sample(range(length), predictions)),
        [rng.randint(0, 119_546) for _ in range(predictions)], rng.randint(0, 1),
        max_seq_length, max_predictions)


def test_encoder_writes_tensorflows_deterministic_bytes():
    rng = random.Random(7)
    for _ in range(300):
        features = _random_features(rng, rng.choice([8, 128, 512]), rng.choice([1, 20, 80]))
        expected = _tf_example(features).SerializeToString(deterministic=True)
        assert pretraining_schema.serialize_example(features) == expected


def test_negative_int64_encodes_as_tensorflow_does():
    features = pretraining_schema.padded_features([5, -1, 7], [0, 0, 0], [1], [-3], 0, 4, 2)
    expected = _tf_example(features).SerializeToString(deterministic=True)
    assert pretraining_schema.serialize_example(features) == expected


def test_padding_is_the_originals():
    features = pretraining_schema.padded_features([101, 7, 102], [0, 0, 0], [1], [42], 1, 6, 3)
    assert features == {
        "input_ids": [101, 7, 102, 0, 0, 0], "input_mask": [1, 1, 1, 0, 0, 0],
        "segment_ids": [0, 0, 0, 0, 0, 0], "masked_lm_positions": [1, 0, 0],
        "masked_lm_ids": [42, 0, 0], "masked_lm_weights": [1.0, 0.0, 0.0],
        "next_sentence_labels": [1]}


def test_overlong_instance_is_an_error_naming_the_limit():
    with pytest.raises(ValueError, match="max_seq_length=2"):
        pretraining_schema.padded_features([1, 2, 3], [0, 0, 0], [], [], 0, 2, 1)
    with pytest.raises(ValueError, match="max_predictions_per_seq=1"):
        pretraining_schema.padded_features([1, 2, 3], [0, 0, 0], [1, 2], [5, 6], 0, 3, 1)


def test_feature_spec_is_the_originals_and_parses_our_records():
    spec = pretraining_schema.feature_spec(16, 4)
    assert {name: (f.shape, f.dtype) for name, f in spec.items()} == {
        "input_ids": ([16], tf.int64), "input_mask": ([16], tf.int64),
        "segment_ids": ([16], tf.int64), "masked_lm_positions": ([4], tf.int64),
        "masked_lm_ids": ([4], tf.int64), "masked_lm_weights": ([4], tf.float32),
        "next_sentence_labels": ([1], tf.int64)}
    features = _random_features(random.Random(3), 16, 4)
    parsed = tf.io.parse_single_example(pretraining_schema.serialize_example(features), spec)
    for name, values in features.items():
        np.testing.assert_array_equal(parsed[name].numpy(), np.asarray(values))
