"""Native Keras saving: `.keras` files and `save_weights` give identical outputs after loading."""
import keras
import numpy as np
import pytest
from test_encoder_numerics import padded_batch

from bert_tf2.modeling import checkpoints
from bert_tf2.modeling.config import BertConfig
from bert_tf2.modeling.encoder import BertEncoder
from bert_tf2.modeling.models import (
    BertClassifier,
    BertMultipleChoice,
    BertPretrainer,
    BertSpanLabeler,
    BertTokenClassifier,
)


@pytest.fixture()
def encoder(tf1_tiny_dir):
    model = BertEncoder(BertConfig.from_json_file(tf1_tiny_dir / "bert_config.json"))
    checkpoints.load_checkpoint(model, tf1_tiny_dir)
    return model


def batch():
    return padded_batch(np.random.default_rng(7), 15, [12, 5, 9], 12)


def assert_same_outputs(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], list):
            for x, y in zip(a[key], b[key]):
                np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_array_equal(a[key], b[key])


def test_encoder_keras_file_round_trip(encoder, tmp_path):
    encoder.save(tmp_path / "encoder.keras")
    loaded = keras.models.load_model(tmp_path / "encoder.keras")
    assert isinstance(loaded, BertEncoder)
    assert loaded.config == encoder.config
    assert_same_outputs(encoder(batch()), loaded(batch()))


def test_pretrainer_keras_file_round_trip(tf1_tiny_dir, tmp_path):
    config = BertConfig.from_json_file(tf1_tiny_dir / "bert_config.json")
    model = BertPretrainer(BertEncoder(config), max_predictions_per_seq=3)
    checkpoints.load_checkpoint(model, tf1_tiny_dir)
    inputs = {**batch(), "masked_lm_positions": np.array([[1, 2, 3], [4, 0, 0], [8, 7, 0]],
                                                         np.int32)}
    model.save(tmp_path / "pretrainer.keras")
    loaded = keras.models.load_model(tmp_path / "pretrainer.keras")
    assert isinstance(loaded, BertPretrainer) and loaded.max_predictions_per_seq == 3
    # The masked-LM output weights are still tied to the (loaded) embedding table.
    assert loaded.masked_lm.embeddings is loaded.encoder.embeddings
    assert_same_outputs(model(inputs), loaded(inputs))


@pytest.mark.parametrize("build", [
    lambda e: BertClassifier(e, num_labels=3),
    lambda e: BertClassifier(e, num_labels=1),
    BertSpanLabeler,
    lambda e: BertTokenClassifier(e, num_tags=9),
])
def test_task_models_keras_file_and_weights_round_trip(encoder, tmp_path, build):
    model = build(encoder)
    model.save(tmp_path / "task.keras")
    loaded = keras.models.load_model(tmp_path / "task.keras")
    assert type(loaded) is type(model)
    assert_same_outputs(model(batch()), loaded(batch()))

    model.save_weights(tmp_path / "task.weights.h5")
    fresh = build(BertEncoder(encoder.config))
    fresh.load_weights(tmp_path / "task.weights.h5")
    assert_same_outputs(model(batch()), fresh(batch()))


def test_multiple_choice_scores_each_pair(encoder, tmp_path):
    model = BertMultipleChoice(encoder, num_choices=3)
    single = batch()
    choices = {k: np.stack([np.roll(v, i, axis=0) for i in range(3)], axis=1)
               for k, v in single.items()}  # [B, 3, L]
    logits = model(choices)["logits"].numpy()
    assert logits.shape == (3, 3)
    # Choice i of example b is the pair single[(b - i) % 3]: scores follow the pair, not the slot.
    pooled = encoder(single)["pooled_output"].numpy()
    proj = model.head.projection
    pair_scores = pooled @ proj.output_weights.numpy().T[:, 0] + proj.output_bias.numpy()[0]
    expected = np.array([[pair_scores[(b - i) % 3] for i in range(3)] for b in range(3)])
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    model.save(tmp_path / "mc.keras")
    np.testing.assert_array_equal(keras.models.load_model(tmp_path / "mc.keras")(choices)["logits"],
                                  logits)
