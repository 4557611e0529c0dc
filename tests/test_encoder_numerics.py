"""The Keras encoder and pretraining heads agree with an independent NumPy BERT (SPEC.md 2-3)."""
import json

import numpy as np
import pytest
import tensorflow as tf
from reference_bert import ReferenceBert, gelu_exact, gelu_tanh, hf_to_tf1_names
from safetensors.numpy import load_file

from bert_tf2.modeling import checkpoints
from bert_tf2.modeling.config import BertConfig
from bert_tf2.modeling.encoder import BertEncoder
from bert_tf2.modeling.layers import SequenceLengthError
from bert_tf2.modeling.models import BertPretrainer

TOL = 1e-5


def padded_batch(rng, vocab_size, lengths, max_len, type_vocab=2):
    """A batch of mixed lengths: [CLS]-like first id, random ids, zero padding, two segments."""
    ids = np.zeros((len(lengths), max_len), np.int32)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1, vocab_size, n)
        mask[row, :n] = 1
        types[row, n // 2:n] = min(1, type_vocab - 1)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def assert_close(actual, expected, tol=TOL, what=""):
    err = np.max(np.abs(np.asarray(actual, np.float64) - expected))
    assert err <= tol, f"{what}: max abs error {err:.3g} > {tol}"


def compare_encoder(model, ref, batch):
    out = model(batch)
    want = ref.encode(batch["input_word_ids"], batch["input_mask"], batch["input_type_ids"])
    for key in ("sequence_output", "pooled_output", "embedding_output"):
        assert_close(out[key], want[key], what=key)
    assert len(out["encoder_outputs"]) == len(want["encoder_outputs"])
    for i, (a, b) in enumerate(zip(out["encoder_outputs"], want["encoder_outputs"])):
        assert_close(a, b, what=f"encoder_outputs[{i}]")
    return out, want


def test_tf1_tiny_encoder_and_pretraining_heads_match_numpy(tf1_tiny_dir):
    config = BertConfig.from_json_file(tf1_tiny_dir / "bert_config.json")
    model = BertPretrainer(BertEncoder(config))
    checkpoints.load_checkpoint(model, tf1_tiny_dir)
    reader = tf.train.load_checkpoint(str(tf1_tiny_dir / "bert_model.ckpt"))
    weights = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
               if "adam" not in n and n != "global_step"}
    ref = ReferenceBert(weights, config.num_hidden_layers, config.num_attention_heads, "gelu")
    batch = padded_batch(np.random.default_rng(0), config.vocab_size, [16, 9, 3, 1], 16)
    positions = np.array([[1, 5, 15], [2, 8, 0], [1, 2, 0], [0, 0, 0]], np.int32)
    _, want = compare_encoder(model.encoder, ref, batch)
    out = model({**batch, "masked_lm_positions": positions})
    assert out["mlm_logits"].shape == (4, 3, config.vocab_size)
    assert_close(out["mlm_logits"], ref.mlm_logits(want["sequence_output"], positions),
                 what="mlm_logits")
    assert_close(out["nsp_logits"], ref.nsp_logits(want["pooled_output"]), what="nsp_logits")


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    state = load_file(str(minilm_dir / "model.safetensors"))
    with open(minilm_dir / "config.json") as f:
        hf_config = json.load(f)
    assert hf_config["hidden_act"] == "gelu"  # Hugging Face's "gelu" is the exact erf form
    ref = ReferenceBert(hf_to_tf1_names(state), hf_config["num_hidden_layers"],
                        hf_config["num_attention_heads"], "gelu_exact")
    return ref, hf_config


def test_minilm_real_weights_match_numpy(minilm, minilm_dir):
    ref, hf_config = minilm
    config = checkpoints.read_config(minilm_dir)
    assert config.hidden_act == "gelu_exact" and config.hidden_size == 384
    model = BertPretrainer(BertEncoder(config))
    # The package holds a bare encoder: the pretraining heads are new, and must be allowed.
    report = checkpoints.load_checkpoint(model, minilm_dir, allow_new_heads=True)
    assert sorted(report.initialised) == sorted([
        "cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
        "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
        "cls/predictions/output_bias", "cls/seq_relationship/output_weights",
        "cls/seq_relationship/output_bias"])
    batch = padded_batch(np.random.default_rng(1), config.vocab_size, [40, 17, 5], 40)
    _, want = compare_encoder(model.encoder, ref, batch)
    # MLM/NSP heads with the model's own (random) weights, through the same reference math.
    ref.w.update({n: np.asarray(v.numpy(), np.float64)
                  for n, v in _head_variables(model).items()})
    positions = np.array([[1, 7, 39], [3, 16, 0], [0, 1, 4]], np.int32)
    out = model({**batch, "masked_lm_positions": positions})
    assert_close(out["mlm_logits"], ref.mlm_logits(want["sequence_output"], positions),
                 what="mlm_logits")
    assert_close(out["nsp_logits"], ref.nsp_logits(want["pooled_output"]), what="nsp_logits")


def _head_variables(model):
    from bert_tf2.modeling.checkpoint_names import is_head, tf1_variable_map
    return {n: v for n, v in tf1_variable_map(model).items() if is_head(n)}


def test_padding_does_not_change_real_tokens(tf1_tiny_dir):
    """Masked positions get -10000 on their scores: extra padding leaves real outputs unchanged."""
    config = BertConfig.from_json_file(tf1_tiny_dir / "bert_config.json")
    model = BertEncoder(config)
    checkpoints.load_checkpoint(model, tf1_tiny_dir)
    short = padded_batch(np.random.default_rng(2), config.vocab_size, [5], 5)
    long = {k: np.pad(v, ((0, 0), (0, 11))) for k, v in short.items()}
    a, b = model(short), model(long)
    assert_close(b["sequence_output"][:, :5], np.asarray(a["sequence_output"]), tol=1e-6)
    assert_close(b["pooled_output"], np.asarray(a["pooled_output"]), tol=1e-6)


def test_gelu_forms():
    from bert_tf2.modeling.activations import gelu
    from bert_tf2.modeling.activations import gelu_exact as keras_gelu_exact
    x = np.linspace(-6, 6, 1001)
    assert_close(gelu(x.astype(np.float32)), gelu_tanh(x), tol=1e-6, what="tanh gelu")
    assert_close(keras_gelu_exact(x.astype(np.float32)), gelu_exact(x), tol=1e-6,
                 what="exact gelu")
    # The two forms really differ: a loader must pick the right one.
    assert np.max(np.abs(gelu_tanh(x) - gelu_exact(x))) > 1e-4


def test_dropout_only_in_training(tf1_tiny_dir):
    config = BertConfig.from_json_file(tf1_tiny_dir / "bert_config.json")
    config.hidden_dropout_prob = 0.5
    model = BertEncoder(config)
    batch = padded_batch(np.random.default_rng(3), config.vocab_size, [12, 7], 12)
    inference = [model(batch)["sequence_output"].numpy() for _ in range(2)]
    np.testing.assert_array_equal(inference[0], inference[1])
    np.testing.assert_array_equal(model(batch, training=False)["sequence_output"], inference[0])
    trained = model(batch, training=True)["sequence_output"].numpy()
    assert np.max(np.abs(trained - inference[0])) > 1e-2


def test_input_longer_than_max_position_embeddings_is_an_error(tf1_tiny_dir):
    config = BertConfig.from_json_file(tf1_tiny_dir / "bert_config.json")
    model = BertEncoder(config)
    batch = padded_batch(np.random.default_rng(4), config.vocab_size, [17], 17)
    with pytest.raises(SequenceLengthError, match="length 17 exceeds max_position_embeddings=16"):
        model(batch)

    @tf.function(input_signature=[{k: tf.TensorSpec([None, None], tf.int32) for k in batch}])
    def serve(inputs):
        return model(inputs)["pooled_output"]

    serve({k: v[:, :16] for k, v in batch.items()})  # the longest allowed length runs
    with pytest.raises(tf.errors.InvalidArgumentError, match="exceeds max_position_embeddings=16"):
        serve(batch)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_keeps_float32_weights_and_close_outputs(tf1_tiny_dir, policy):
    import keras
    config = BertConfig.from_json_file(tf1_tiny_dir / "bert_config.json")
    full = BertPretrainer(BertEncoder(config))
    checkpoints.load_checkpoint(full, tf1_tiny_dir)
    keras.config.set_dtype_policy(policy)
    try:
        mixed = BertPretrainer(BertEncoder(config))
    finally:
        keras.config.set_dtype_policy("float32")
    checkpoints.load_checkpoint(mixed, tf1_tiny_dir)
    assert {w.dtype for w in mixed.weights} == {"float32"}
    batch = padded_batch(np.random.default_rng(8), config.vocab_size, [16, 6], 16)
    batch["masked_lm_positions"] = np.array([[1, 2, 3], [4, 5, 0]], np.int32)
    a, b = full(batch), mixed(batch)
    assert b["mlm_logits"].dtype == policy.split("_")[1]
    tol = 1e-3 if policy == "mixed_float16" else 2e-2  # bfloat16 keeps 8 bits of mantissa
    assert_close(np.asarray(b["mlm_logits"], np.float32), a["mlm_logits"].numpy(), tol=tol)
    assert_close(np.asarray(b["nsp_logits"], np.float32), a["nsp_logits"].numpy(), tol=tol)
