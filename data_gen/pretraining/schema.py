"""The pretraining TFRecord contract (SPEC.md section 6), defined once for writer and reader.

Each record is a `tf.train.Example` with the original's seven features: `input_ids`, `input_mask`,
`segment_ids` (int64, `max_seq_length` values), `masked_lm_positions`, `masked_lm_ids` (int64) and
`masked_lm_weights` (float, `max_predictions_per_seq` values), and `next_sentence_labels` (int64,
one value). Padding is id 0, mask 0, segment 0; unused prediction slots are position 0, id 0,
weight 0.0.

`serialize_example` writes the protocol buffer by hand so that the worker processes that make
records never import TensorFlow (650 MB and seconds per process). Its bytes equal
`tf.train.Example.SerializeToString(deterministic=True)` (map keys in sorted order), which the
tests check; the original wrote the same message with map order left to the library.
"""
import struct
from typing import NamedTuple, Sequence

from bert_tf2.data_gen import example_proto


class Feature(NamedTuple):
    name: str
    dtype: str  # "int64" or "float"
    length: str  # "max_seq_length", "max_predictions_per_seq" or "one"


FEATURES = (
    Feature("input_ids", "int64", "max_seq_length"),
    Feature("input_mask", "int64", "max_seq_length"),
    Feature("segment_ids", "int64", "max_seq_length"),
    Feature("masked_lm_positions", "int64", "max_predictions_per_seq"),
    Feature("masked_lm_ids", "int64", "max_predictions_per_seq"),
    Feature("masked_lm_weights", "float", "max_predictions_per_seq"),
    Feature("next_sentence_labels", "int64", "one"),
)
FEATURE_NAMES = tuple(feature.name for feature in FEATURES)
SHUFFLE_BUFFER_RECORDS = 100  # the original's input function: its record shuffle buffer


def feature_lengths(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """Name -> number of values of every feature."""
    sizes = {"max_seq_length": max_seq_length, "max_predictions_per_seq": max_predictions_per_seq,
             "one": 1}
    return {feature.name: sizes[feature.length] for feature in FEATURES}


def fixed_spec(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """The records' features as `data_gen.example_proto.FixedLen`s (read without TensorFlow)."""
    lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
    return {feature.name: example_proto.FixedLen(
        (lengths[feature.name],), "float32" if feature.dtype == "float" else "int64")
        for feature in FEATURES}


def feature_spec(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """The `tf.io.parse_example` spec of the original's `run_pretraining.py` input function."""
    import tensorflow as tf

    dtypes = {"int64": tf.int64, "float": tf.float32}
    lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
    return {feature.name: tf.io.FixedLenFeature([lengths[feature.name]], dtypes[feature.dtype])
            for feature in FEATURES}


def padded_features(input_ids: Sequence[int], segment_ids: Sequence[int],
                    masked_lm_positions: Sequence[int], masked_lm_ids: Sequence[int],
                    next_sentence_label: int, max_seq_length: int,
                    max_predictions_per_seq: int) -> dict:
    """The seven features of one instance, padded as the original pads them."""
    if len(input_ids) > max_seq_length:
        raise ValueError(f"{len(input_ids)} tokens exceed max_seq_length={max_seq_length}")
    if len(masked_lm_positions) > max_predictions_per_seq:
        raise ValueError(f"{len(masked_lm_positions)} predictions exceed "
                         f"max_predictions_per_seq={max_predictions_per_seq}")
    seq_pad = [0] * (max_seq_length - len(input_ids))
    pred_pad = [0] * (max_predictions_per_seq - len(masked_lm_positions))
    return {
        "input_ids": list(input_ids) + seq_pad,
        "input_mask": [1] * len(input_ids) + seq_pad,
        "segment_ids": list(segment_ids) + seq_pad,
        "masked_lm_positions": list(masked_lm_positions) + pred_pad,
        "masked_lm_ids": list(masked_lm_ids) + pred_pad,
        "masked_lm_weights": [1.0] * len(masked_lm_positions) + [0.0] * len(pred_pad),
        "next_sentence_labels": [next_sentence_label],
    }


# ------------------------------------------------------------------ protocol buffer encoding
# The primitives are `data_gen.example_proto`'s; here the seven features' keys are encoded once.
_length_delimited = example_proto.length_delimited
_TAG_1, _TAG_2, _TAG_3 = example_proto.TAG_1, example_proto.TAG_2, example_proto.TAG_3
_FEATURE_TAG = {"float": _TAG_2, "int64": _TAG_3}  # Feature.float_list = 2, Feature.int64_list = 3
_FEATURE_KEYS = {feature.name: _length_delimited(_TAG_1, feature.name.encode())
                 for feature in FEATURES}
_DTYPES = {feature.name: feature.dtype for feature in FEATURES}
_SORTED_NAMES = sorted(FEATURE_NAMES, key=example_proto.map_key_order)


def _encode_feature(dtype: str, values: Sequence) -> bytes:
    if dtype == "int64":
        packed = example_proto.encode_varints(values)
    else:
        packed = struct.pack(f"<{len(values)}f", *values)
    value_list = _length_delimited(_TAG_1, packed)  # Int64List/FloatList.value = 1, packed
    return _length_delimited(_FEATURE_TAG[dtype], value_list)


def serialize_example(features: dict) -> bytes:
    """A `tf.train.Example` of the seven features (name -> list of values), keys in sorted order."""
    entries = []
    for name in _SORTED_NAMES:
        entry = _FEATURE_KEYS[name] + _length_delimited(_TAG_2, _encode_feature(_DTYPES[name],
                                                                               features[name]))
        entries.append(_length_delimited(_TAG_1, entry))  # Features.feature map entry = 1
    return _length_delimited(_TAG_1, b"".join(entries))  # Example.features = 1
