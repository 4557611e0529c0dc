"""Cramming's architecture changes as `bert_config.json` options (`layer_norm_position: "pre"`,
`use_bias: false`, `gated_feed_forward: true`): the encoder against the independent NumPy BERT
with the same changes, on TensorFlow and JAX; their checkpoint names and round trip; and the
refusals where a model would leave this project for code that knows BERT's architecture only."""
import numpy as np
import pytest
from conftest import on_backend
from reference_bert import ReferenceBert
from test_encoder_numerics import assert_close, compare_encoder, padded_batch

from bert_tf2.modeling import checkpoint_names, checkpoints, convert, keras_hub_preset
from bert_tf2.modeling.checkpoints import CheckpointError
from bert_tf2.modeling.config import ARCHITECTURE_DEFAULTS, BertConfig, ConfigError
from bert_tf2.modeling.encoder import BertEncoder, first_token_output, packed_first_token_output

TINY = {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 37, "max_position_embeddings": 64, "type_vocab_size": 2}
VARIANTS = {
    "pre": {"layer_norm_position": "pre"},
    "no_bias": {"use_bias": False},
    "gated": {"gated_feed_forward": True},
    "all": {"layer_norm_position": "pre", "use_bias": False, "gated_feed_forward": True,
            "hidden_act": "gelu_exact"},
}


def randomised(config: BertConfig, seed=0) -> BertEncoder:
    """An encoder whose every weight is drawn far from its initial value (LayerNorms included),
    so that a weight applied in the wrong place shows."""
    encoder = BertEncoder(config)
    rng = np.random.default_rng(seed)
    for name, variable in checkpoint_names.tf1_variable_map(encoder).items():
        shape = tuple(variable.shape)
        value = (1.0 + rng.normal(0, 0.2, shape) if name.endswith("/gamma")
                 else rng.normal(0, 0.5 if "embeddings" in name else 0.2, shape))
        variable.assign(value.astype(np.float32))
    return encoder


def reference(encoder: BertEncoder) -> ReferenceBert:
    config = encoder.config
    weights = {n: v.numpy() for n, v in checkpoint_names.tf1_variable_map(encoder).items()}
    return ReferenceBert(weights, config.num_hidden_layers, config.num_attention_heads,
                         config.hidden_act, pre_layer_norm=config.layer_norm_position == "pre",
                         gated=config.gated_feed_forward)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_change_gives_the_numpy_encoders_outputs(variant):
    config = BertConfig.from_dict({**TINY, **VARIANTS[variant]})
    encoder = randomised(config)
    batch = padded_batch(np.random.default_rng(1), config.vocab_size, [16, 9, 3, 1], 16)
    out, want = compare_encoder(encoder, reference(encoder), batch)
    # The sentence heads' shortcut (the last layer for [CLS] alone) ends as the full encoder does.
    assert_close(first_token_output(encoder, batch), want["sequence_output"][:, 0],
                 what="first_token_output")


def test_packed_rows_give_each_examples_own_first_token_state():
    """Packed rows (fine-tuning's --pack_examples) under all three changes: each example's [CLS]
    state is the NumPy BERT's for that example alone in a row of its own."""
    encoder = randomised(BertConfig.from_dict({**TINY, **VARIANTS["all"]}), seed=7)
    rng = np.random.default_rng(8)
    examples = [(rng.integers(1, 99, n), (np.arange(n) >= n // 2).astype(np.int32))
                for n in (5, 4, 7)]
    ids, mask, types = (np.zeros((2, 12), np.int32) for _ in range(3))
    for (row, start, number), (words, segments) in zip([(0, 0, 1), (0, 5, 2), (1, 0, 1)],
                                                       examples):
        end = start + len(words)
        ids[row, start:end], types[row, start:end], mask[row, start:end] = words, segments, number
    got = packed_first_token_output(encoder, {"input_word_ids": ids, "input_mask": mask,
                                              "input_type_ids": types},
                                    np.array([0, 5, 12], np.int32))
    ref = reference(encoder)
    for k, (words, segments) in enumerate(examples):
        alone = ref.encode(words[None], np.ones((1, len(words)), np.int32), segments[None])
        assert_close(got[k], alone["sequence_output"][0, 0], what=f"packed example {k}")


def test_the_changes_name_and_shape_their_weights():
    bert = checkpoint_names.tf1_variable_map(BertEncoder(BertConfig.from_dict(TINY)))
    changed = checkpoint_names.tf1_variable_map(
        BertEncoder(BertConfig.from_dict({**TINY, **VARIANTS["all"]})))
    layer = "bert/encoder/layer_1"
    assert set(bert) - set(changed) == {
        f"bert/encoder/layer_{i}/{scope}/bias" for i in range(2)
        for scope in ("attention/self/query", "attention/self/key", "attention/self/value",
                      "attention/output/dense", "intermediate/dense", "output/dense")}
    assert set(changed) - set(bert) == {"bert/encoder/LayerNorm/gamma",
                                        "bert/encoder/LayerNorm/beta"}
    assert tuple(changed[f"{layer}/intermediate/dense/kernel"].shape) == (32, 74)
    assert tuple(changed[f"{layer}/output/dense/kernel"].shape) == (37, 32)
    assert "bert/pooler/dense/bias" in changed  # the pooler and the heads keep theirs


def test_a_changed_model_round_trips_through_its_checkpoint_and_config(tmp_path):
    config = BertConfig.from_dict({**TINY, **VARIANTS["all"]})
    encoder = randomised(config)
    config.to_json_file(tmp_path / "bert_config.json")
    checkpoints.save_tf1_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
    read = checkpoints.read_config(tmp_path)
    assert read.architecture_changes == ("layer_norm_position", "use_bias", "gated_feed_forward")
    again = BertEncoder(read)
    checkpoints.load_checkpoint(again, tmp_path)
    batch = padded_batch(np.random.default_rng(2), 99, [12, 5], 12)
    np.testing.assert_array_equal(again(batch)["sequence_output"],
                                  encoder(batch)["sequence_output"])
    # BERT's own configs are written back without the new fields.
    assert not set(ARCHITECTURE_DEFAULTS) & set(BertConfig.from_dict(TINY).to_dict())
    # A BERT model cannot take the changed checkpoint as its own.
    with pytest.raises(CheckpointError, match="intermediate/dense"):
        checkpoints.load_checkpoint(BertEncoder(BertConfig.from_dict(TINY)), tmp_path)


@pytest.mark.integration
def test_the_changes_run_on_jax_as_on_numpy(tmp_path):
    """The encoder under JAX (fused attention in evaluation) on a changed TF1 checkpoint, read
    without TensorFlow, against the NumPy BERT."""
    config = BertConfig.from_dict({**TINY, **VARIANTS["all"]})
    encoder = randomised(config, seed=3)
    config.to_json_file(tmp_path / "bert_config.json")
    checkpoints.save_tf1_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
    batch = padded_batch(np.random.default_rng(4), 99, [16, 10, 2], 16)
    np.savez(tmp_path / "batch.npz", input_ids=batch["input_word_ids"],
             input_mask=batch["input_mask"], segment_ids=batch["input_type_ids"])
    on_backend("jax", "encode", tmp_path, tmp_path / "batch.npz", tmp_path / "jax.npz")
    got = np.load(tmp_path / "jax.npz")
    want = reference(encoder).encode(batch["input_word_ids"], batch["input_mask"],
                                     batch["input_type_ids"])
    mask = batch["input_mask"].astype(bool)
    assert_close(got["sequence_output"][mask], want["sequence_output"][mask],
                 what="JAX sequence_output")
    assert_close(got["pooled_output"], want["pooled_output"], what="JAX pooled_output")


def test_a_changed_pretrainer_learns_through_every_weight():
    """The masked LM on all three changes, on TensorFlow: every weight of the encoder gets a
    finite, non-zero gradient (the final LayerNorm and both halves of the gated kernel
    included), and plain gradient steps on one batch lower its loss."""
    import tensorflow as tf

    from bert_tf2.modeling.losses import masked_lm_loss
    from bert_tf2.modeling.models import BertPretrainer

    config = BertConfig.from_dict({**TINY, **VARIANTS["all"]})
    model = BertPretrainer(BertEncoder(config))
    rng = np.random.default_rng(9)
    batch = padded_batch(rng, 99, [16, 12, 9, 16], 16)
    positions = np.array([[1, 4, 9], [2, 3, 10], [1, 5, 7], [0, 8, 15]], np.int32)
    targets = rng.integers(1, 99, positions.shape).astype(np.int32)
    inputs = {**batch, "masked_lm_positions": positions}

    def loss_and_gradients():
        with tf.GradientTape() as tape:
            loss = masked_lm_loss(model(inputs)["mlm_logits"], targets, np.ones_like(targets))
        return float(loss), tape.gradient(loss, model.encoder.trainable_variables)

    first, gradients = loss_and_gradients()
    names = checkpoint_names.tf1_variable_map(model.encoder)
    by_variable = {id(v): n for n, v in names.items()}
    pooler = {id(v) for n, v in names.items() if n.startswith("bert/pooler/")}  # MLM skips it
    for variable, gradient in zip(model.encoder.trainable_variables, gradients):
        if id(variable) in pooler:
            continue
        assert gradient is not None, by_variable[id(variable)]
        value = tf.convert_to_tensor(gradient).numpy()
        assert np.isfinite(value).all() and np.abs(value).max() > 0, by_variable[id(variable)]
        if by_variable[id(variable)].endswith("intermediate/dense/kernel"):  # [value | gate]
            assert np.abs(value[:, :37]).max() > 0 and np.abs(value[:, 37:]).max() > 0
    for _ in range(5):
        _, gradients = loss_and_gradients()
        for variable, gradient in zip(model.encoder.trainable_variables, gradients):
            if gradient is not None:
                variable.assign_sub(0.5 * tf.convert_to_tensor(gradient))
    assert loss_and_gradients()[0] < first - 0.1


@pytest.mark.parametrize("field, value, words", [
    ("layer_norm_position", "middle", "'layer_norm_position' is 'middle'; supported: post, pre"),
    ("use_bias", "no", "'use_bias' must be true or false, got 'no'"),
    ("gated_feed_forward", 1, "'gated_feed_forward' must be true or false, got 1"),
])
def test_a_bad_value_is_named(field, value, words):
    with pytest.raises(ConfigError, match=words):
        BertConfig.from_dict({**TINY, field: value})


def test_a_changed_model_is_not_written_where_bert_code_would_load_it_wrongly(tmp_path):
    encoder = BertEncoder(BertConfig.from_dict({**TINY, "layer_norm_position": "pre"}))
    with pytest.raises(ConfigError, match=r"sets layer_norm_position, which BERT's architecture "
                                          r"lacks; only this project's runners load such a model"):
        checkpoints.save_hf_checkpoint(encoder, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    with pytest.raises(ConfigError, match="only this project's runners"):
        keras_hub_preset.save_preset(encoder, str(tmp_path / "hub"), "unused-vocab.txt")
    assert not (tmp_path / "hub").exists()
    # The converter refuses before it loads anything: no output folder is made.
    (tmp_path / "tf1").mkdir()
    encoder.config.to_json_file(tmp_path / "tf1" / "bert_config.json")
    checkpoints.save_tf1_checkpoint(encoder, str(tmp_path / "tf1" / "bert_model.ckpt"))
    for target in ("hf", "keras_hub"):
        with pytest.raises(ConfigError, match=r"tf1/bert_config.json: the model's config sets "
                                              r"layer_norm_position"):
            convert.convert(str(tmp_path / "tf1"), "tf1", str(tmp_path / target), target)
        assert not (tmp_path / target).exists()


@pytest.mark.integration
def test_a_changed_classifier_exports_and_its_litert_file_gives_the_savedmodels_numbers(
        minilm_dir, tmp_path):
    """The export path of every runner (SavedModel with its raw-text signature, and the LiteRT
    file converted from it) on a classifier with all three changes: the SavedModel gives the
    Keras model's probabilities, and the LiteRT file the SavedModel's."""
    import keras
    from conftest import TINY as RUNNER_TINY
    from conftest import served

    from bert_tf2.engine import export
    from bert_tf2.modeling.models import BertClassifier
    from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier
    from bert_tf2.tasks.classification.serving import ClassifierServing

    keras.utils.set_random_seed(5)
    config = BertConfig.from_dict({**RUNNER_TINY, **VARIANTS["all"]})
    model = BertClassifier(randomised(config, seed=6), 2)
    vocab = str(minilm_dir / "vocab.txt")
    module = ClassifierServing(model, vocab, True, 32, ["0", "1"], pair=True)
    export.save(module, str(tmp_path / "serving"), {"vocab.txt": vocab}, litert="float32")
    a = ["The cat sat on the mat.", "", "A much longer sentence " * 9]
    b = ["A cat was sitting.", "Nothing.", "short"]
    expected = served(tmp_path / "serving", text_a=a, text_b=b)
    inputs = module.text_inputs(a, b)  # the export's own tokenizer and packer, in this process
    logits = model({k: v.numpy() for k, v in inputs.items()})["logits"]
    np.testing.assert_allclose(expected["logits"], logits, atol=1e-5)
    got = LiteRTClassifier.load(str(tmp_path / "serving"))(a, b)
    np.testing.assert_allclose(got["logits"], expected["logits"], atol=2e-5)
    np.testing.assert_allclose(got["probabilities"], expected["probabilities"], atol=2e-5)
    assert np.abs(expected["probabilities"] - 0.5).max() > 1e-3  # not a constant answer
