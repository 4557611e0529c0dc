"""Checkpoint I/O: TF1 and Hugging Face in and out, bit-exact round trips, strict errors."""
import json

import numpy as np
import pytest
import tensorflow as tf
from reference_bert import ReferenceBert, hf_to_tf1_names
from safetensors.numpy import load_file, save_file
from test_encoder_numerics import assert_close, padded_batch

from bert_tf2.modeling import checkpoints
from bert_tf2.modeling.checkpoint_names import hf_name, tf1_name_from_hf, tf1_variable_map
from bert_tf2.modeling.config import BertConfig
from bert_tf2.modeling.encoder import BertEncoder
from bert_tf2.modeling.models import BertClassifier, BertPretrainer, BertSpanLabeler


def raw_tf1(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def weights_of(model):
    return {n: v.numpy() for n, v in tf1_variable_map(model).items()}


def assert_bit_identical(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.fixture()
def tiny_config(tf1_tiny_dir):
    return BertConfig.from_json_file(tf1_tiny_dir / "bert_config.json")


def test_tf1_keras_tf1_keras_is_bit_identical(tf1_tiny_dir, tiny_config, tmp_path):
    original = {n: v for n, v in raw_tf1(tf1_tiny_dir / "bert_model.ckpt").items()
                if "adam_" not in n and n != "global_step"}
    first = BertPretrainer(BertEncoder(tiny_config))
    report = checkpoints.load_checkpoint(first, tf1_tiny_dir)
    assert len(report.loaded) == len(original) == 46 and not report.unused
    assert_bit_identical(weights_of(first), original)

    prefix = checkpoints.save_tf1_checkpoint(first, tmp_path / "bert_model.ckpt", global_step=7)
    written = raw_tf1(prefix)
    assert written.pop("global_step") == 7
    assert_bit_identical(written, original)

    second = BertPretrainer(BertEncoder(tiny_config))
    checkpoints.load_checkpoint(second, prefix)
    assert_bit_identical(weights_of(second), original)
    batch = padded_batch(np.random.default_rng(0), 15, [16, 4], 16)
    batch["masked_lm_positions"] = np.array([[1, 2], [3, 0]], np.int32)
    a, b = first(batch), second(batch)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_written_tf1_checkpoint_restores_with_the_original_tf1_saver(tf1_tiny_dir, tiny_config,
                                                                     tmp_path):
    """The original code restores by name with a TF1 Saver in a graph: do exactly that."""
    model = BertPretrainer(BertEncoder(tiny_config))
    checkpoints.load_checkpoint(model, tf1_tiny_dir)
    prefix = checkpoints.save_tf1_checkpoint(model, tmp_path / "bert_model.ckpt")
    expected = weights_of(model)
    graph = tf.Graph()
    with graph.as_default():
        variables = {n: tf.compat.v1.get_variable(n, shape=v.shape, dtype=tf.float32)
                     for n, v in expected.items()}
        variables["global_step"] = tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver(var_list=variables)
        with tf.compat.v1.Session(graph=graph) as sess:
            saver.restore(sess, prefix)
            restored = sess.run({n: v for n, v in variables.items() if n != "global_step"})
    assert_bit_identical(restored, expected)


def test_hf_to_keras_to_tf1_agrees_with_hf(minilm_dir, tmp_path):
    state = load_file(str(minilm_dir / "model.safetensors"))
    with open(minilm_dir / "config.json") as f:
        hf_config = json.load(f)
    ref = ReferenceBert(hf_to_tf1_names(state), hf_config["num_hidden_layers"],
                        hf_config["num_attention_heads"], "gelu_exact")

    encoder = BertEncoder(checkpoints.read_config(minilm_dir))
    checkpoints.load_checkpoint(encoder, minilm_dir)
    out_dir = tmp_path / "tf1"
    out_dir.mkdir()
    encoder.config.to_json_file(out_dir / "bert_config.json")
    checkpoints.save_tf1_checkpoint(encoder, out_dir / "bert_model.ckpt")

    # Tensors: TF1 kernels are the Hugging Face weights transposed, bit for bit.
    written = raw_tf1(out_dir / "bert_model.ckpt")
    for hf, value in state.items():
        if hf.endswith("position_ids"):
            continue
        tf1, transpose = tf1_name_from_hf(hf)
        np.testing.assert_array_equal(written[tf1], value.T if transpose else value, err_msg=hf)

    config = BertConfig.from_json_file(out_dir / "bert_config.json")
    assert config.hidden_act == "gelu_exact"  # the exact GELU the weights were trained with
    reloaded = BertEncoder(config)
    checkpoints.load_checkpoint(reloaded, out_dir)
    batch = padded_batch(np.random.default_rng(5), config.vocab_size, [24, 11, 3], 24)
    want = ref.encode(batch["input_word_ids"], batch["input_mask"], batch["input_type_ids"])
    out = reloaded(batch)
    assert_close(out["sequence_output"], want["sequence_output"], what="sequence_output")
    assert_close(out["pooled_output"], want["pooled_output"], what="pooled_output")


def test_hf_names_with_prefix_and_old_layernorm_names(tf1_tiny_dir, tiny_config, tmp_path):
    """`bert.`-prefixed task checkpoints and pre-2020 `LayerNorm.gamma/beta` names both load."""
    source = BertPretrainer(BertEncoder(tiny_config))
    checkpoints.load_checkpoint(source, tf1_tiny_dir)
    checkpoints.save_hf_checkpoint(source, tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    assert "bert.embeddings.word_embeddings.weight" in state
    assert "cls.predictions.bias" in state and "cls.seq_relationship.weight" in state
    assert state["bert.encoder.layer.1.intermediate.dense.weight"].shape == (16, 4)  # [out, in]
    old = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                    "LayerNorm.beta"): v
           for k, v in state.items()}
    old["bert.embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    old["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
    save_file(old, str(tmp_path / "old.safetensors"))
    target = BertPretrainer(BertEncoder(tiny_config))
    checkpoints.load_checkpoint(target, tmp_path / "old.safetensors", fmt="hf")
    assert_bit_identical(weights_of(target), weights_of(source))


def test_hf_and_tf1_name_rules_are_inverse(tiny_config):
    for model in (BertPretrainer(BertEncoder(tiny_config)),
                  BertSpanLabeler(BertEncoder(tiny_config)),
                  BertClassifier(BertEncoder(tiny_config), 3)):
        for tf1 in tf1_variable_map(model):
            hf, transpose = hf_name(tf1)
            assert tf1_name_from_hf(hf) == (tf1, transpose)
    assert hf_name("bert/encoder/layer_3/attention/self/query/kernel") == (
        "encoder.layer.3.attention.self.query.weight", True)
    assert hf_name("bert/embeddings/LayerNorm/gamma") == ("embeddings.LayerNorm.weight", False)
    assert hf_name("cls/squad/output_weights") == ("qa_outputs.weight", False)


def _write_tf1(prefix, tensors: dict):
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=list(tensors),
                      shape_and_slices=[""] * len(tensors),
                      tensors=[tf.convert_to_tensor(v) for v in tensors.values()])
    return str(prefix)


def _with_adam_slots(tensors):
    out = dict(tensors)
    for name, value in tensors.items():
        out[f"{name}/adam_m"] = np.full_like(value, 0.5)
        out[f"{name}/adam_v"] = np.full_like(value, 0.25)
    out["global_step"] = np.int64(1234)
    return out


@pytest.mark.parametrize("head,model_fn", [
    ({"output_weights": (3, 4), "output_bias": (3,)}, lambda e: BertClassifier(e, 3)),
    ({"cls/squad/output_weights": (2, 4), "cls/squad/output_bias": (2,)}, BertSpanLabeler),
])
def test_original_fine_tuned_checkpoints_load_strictly(tf1_tiny_dir, tiny_config, tmp_path, head,
                                                       model_fn):
    """A fine-tuned original checkpoint: encoder + task head + Adam slots + global_step."""
    rng = np.random.default_rng(6)
    encoder = {n: v for n, v in raw_tf1(tf1_tiny_dir / "bert_model.ckpt").items()
               if n.startswith("bert/") and "adam_" not in n}
    tensors = {**encoder, **{n: rng.normal(size=s).astype(np.float32) for n, s in head.items()}}
    prefix = _write_tf1(tmp_path / "model.ckpt-1234", _with_adam_slots(tensors))
    model = model_fn(BertEncoder(tiny_config))
    report = checkpoints.load_checkpoint(model, prefix)
    assert not report.initialised and not report.unused
    assert_bit_identical(weights_of(model), tensors)


def test_shape_mismatch_names_variable_and_both_shapes(tf1_tiny_dir, tiny_config):
    tiny_config.intermediate_size = 32
    with pytest.raises(checkpoints.CheckpointError) as err:
        checkpoints.load_checkpoint(BertEncoder(tiny_config), tf1_tiny_dir)
    message = str(err.value)
    assert ("bert/encoder/layer_0/intermediate/dense/kernel: checkpoint shape (4, 16) != model "
            "shape (4, 32)") in message
    assert "bert/encoder/layer_1/output/dense/kernel: checkpoint shape (16, 4) != model shape " \
           "(32, 4)" in message


def test_missing_variable_is_reported_never_left_random(tf1_tiny_dir, tiny_config, tmp_path):
    tensors = {n: v for n, v in raw_tf1(tf1_tiny_dir / "bert_model.ckpt").items()
               if n.startswith("bert/") and "adam_" not in n
               and n != "bert/encoder/layer_1/attention/self/key/bias"}
    prefix = _write_tf1(tmp_path / "bert_model.ckpt", tensors)
    with pytest.raises(checkpoints.CheckpointError,
                       match=r"bert/encoder/layer_1/attention/self/key/bias: the model needs it "
                             r"\(shape \(4,\)\) but the checkpoint does not have it"):
        checkpoints.load_checkpoint(BertEncoder(tiny_config), prefix)


def test_unexpected_encoder_variable_is_an_error(tf1_tiny_dir, tiny_config):
    tiny_config.num_hidden_layers = 1
    with pytest.raises(checkpoints.CheckpointError,
                       match=r"bert/encoder/layer_1/attention/self/query/kernel: in the checkpoint "
                             r"\(shape \(4, 4\)\) but the model has no such variable"):
        checkpoints.load_checkpoint(BertEncoder(tiny_config), tf1_tiny_dir)


def test_new_heads_need_explicit_permission_and_are_listed(tf1_tiny_dir, tiny_config, caplog):
    with pytest.raises(checkpoints.CheckpointError, match="allow_new_heads=True"):
        checkpoints.load_checkpoint(BertClassifier(BertEncoder(tiny_config), 2), tf1_tiny_dir)
    model = BertClassifier(BertEncoder(tiny_config), 2)
    with caplog.at_level("INFO", logger="bert_tf2.modeling.checkpoints"):
        report = checkpoints.load_checkpoint(model, tf1_tiny_dir, allow_new_heads=True)
    assert report.initialised == ["output_weights", "output_bias"]
    assert "cls/predictions/output_bias" in report.unused and len(report.unused) == 7
    assert "left initialised (allowed): output_weights, output_bias" in caplog.text
    # The encoder part was restored.
    encoder_only = BertEncoder(tiny_config)
    checkpoints.load_checkpoint(encoder_only, tf1_tiny_dir)
    assert_bit_identical(weights_of(model.encoder), weights_of(encoder_only))


def test_missing_checkpoint_and_bad_files_are_clear(tmp_path, tiny_config):
    with pytest.raises(checkpoints.CheckpointError, match="no TF1 checkpoint"):
        checkpoints.load_checkpoint(BertEncoder(tiny_config), tmp_path / "nothing")
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(checkpoints.CheckpointError, match="not a readable safetensors file"):
        checkpoints.load_checkpoint(BertEncoder(tiny_config), tmp_path)


def test_a_keras_hub_preset_that_cannot_load_is_named_as_one(tmp_path):
    """A folder KerasHub wrote is refused as a preset, not read as a TF1 checkpoint without its
    bert_config.json: a preset of another model, and a BERT preset without its weights file."""
    from bert_tf2.modeling.keras_hub_preset import KerasHubError

    roberta, no_weights, hf = tmp_path / "roberta", tmp_path / "bert", tmp_path / "hf"
    for folder, name in ((roberta, "keras_hub>RobertaBackbone"),
                         (no_weights, "keras_hub>BertBackbone")):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(
            {"module": "keras_hub.src.models", "registered_name": name, "config": {}}))
    (roberta / "model.weights.h5").write_bytes(b"")
    with pytest.raises(KerasHubError) as refused:
        checkpoints.read_config(roberta)
    assert str(refused.value) == (f"{roberta / 'config.json'}: a KerasHub preset of "
                                  f"RobertaBackbone, not BertBackbone: only BERT presets load here")
    for read in (checkpoints.read_config, checkpoints.source_for):
        with pytest.raises(KerasHubError) as refused:
            read(no_weights)
        assert str(refused.value) == (f"{no_weights}: a KerasHub BERT preset without its "
                                      f"weights, model.weights.h5: copy the whole preset folder "
                                      f"again")
    # A Hugging Face folder also holds a config.json: still read as one.
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 32}))
    (hf / "model.safetensors").write_bytes(b"")
    assert checkpoints.detect_format(hf) == "hf"
