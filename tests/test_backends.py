"""Keras's other backends against TensorFlow: the encoder's outputs on the real MiniLM weights (JAX and
PyTorch), fused attention against the sums written out, and the TF1 checkpoint reader and writer
that JAX runs use. (Training steps on JAX: test_backend_training.py.)"""
import os
import sys

import numpy as np
import pytest
import warm_python
from conftest import REPO, need_backend, on_backend


@pytest.fixture(scope="module")
def tf_encoding(minilm_dir, mrpc_batch, tmp_path_factory):
    """The encoder's outputs on TensorFlow, which the other backends' must equal."""
    path = tmp_path_factory.mktemp("tf_encoding") / "tf.npz"
    on_backend("tensorflow", "encode", minilm_dir, mrpc_batch, path)
    return np.load(path)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_encoder_gives_tensorflows_outputs_on_the_minilm_weights(backend, minilm_dir, mrpc_batch,
                                                                 tf_encoding, tmp_path):
    need_backend(backend)
    on_backend(backend, "encode", minilm_dir, mrpc_batch, tmp_path / "other.npz")
    ours, theirs = np.load(tmp_path / "other.npz"), tf_encoding
    mask = np.load(mrpc_batch)["input_mask"].astype(bool)
    for name in ("sequence_output", "pooled_output"):
        a, b = ours[name], theirs[name]
        if name == "sequence_output":
            a, b = a[mask], b[mask]  # padded positions are not outputs of the model
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"{backend} {name}")
    assert np.abs(theirs["sequence_output"]).max() > 1.0  # real activations, not zeros


def test_tf1_checkpoints_read_and_write_without_tensorflow(tf1_tiny_dir, minilm_dir, tmp_path):
    """`modeling.tensor_bundle` against `tf.train.load_checkpoint`, on every variable of the
    checkpoints the tests have (Google's format from the shared data, an earlier version's
    runner checkpoint, MiniLM written by TensorFlow's SaveV2), and what it writes read back by
    TensorFlow."""
    import tensorflow as tf

    from bert_tf2.modeling import checkpoints, tensor_bundle
    from bert_tf2.modeling.encoder import BertEncoder

    config = checkpoints.read_config(minilm_dir)
    encoder = BertEncoder(config)
    checkpoints.load_checkpoint(encoder, minilm_dir)
    written_by_tf = str(tmp_path / "tf" / "bert_model.ckpt")
    os.makedirs(tmp_path / "tf")
    checkpoints.save_tf1_checkpoint(encoder, written_by_tf, global_step=7)
    prefixes = [str(tf1_tiny_dir / "bert_model.ckpt"), written_by_tf,
                str(REPO / "tests" / "fixtures" / "old_format" / "tf1" / "bert_model.ckpt"),
                str(REPO / "tests" / "fixtures" / "old_format" / "classifier_run" / "ckpt-4")]
    read = 0
    for prefix in prefixes:
        reader = tf.train.load_checkpoint(prefix)
        ours = tensor_bundle.TensorBundle(prefix)
        shapes = reader.get_variable_to_shape_map()
        assert {n: tuple(s) for n, s in shapes.items()} == ours.shapes(), prefix
        for name in shapes:
            if reader.get_variable_to_dtype_map()[name] == tf.string:
                continue  # the object graph of a runner checkpoint: TensorFlow's business
            theirs = reader.get_tensor(name)
            mine = ours.read(name)
            assert mine.dtype == np.asarray(theirs).dtype and np.array_equal(mine, theirs), name
            read += 1
    assert read > 400
    # Written here, read by TensorFlow: MiniLM's every weight.
    tensors = {name: tf.train.load_checkpoint(written_by_tf).get_tensor(name)
               for name in tf.train.load_checkpoint(written_by_tf).get_variable_to_shape_map()}
    tensor_bundle.write(str(tmp_path / "ours"), tensors)
    reader = tf.train.load_checkpoint(str(tmp_path / "ours"))
    assert set(reader.get_variable_to_shape_map()) == set(tensors)
    for name, value in tensors.items():
        assert np.array_equal(reader.get_tensor(name), value), name
    assert int(reader.get_tensor("global_step")) == 7


def test_a_damaged_tf1_checkpoint_is_named_without_tensorflow(tf1_tiny_dir, tmp_path):
    import shutil

    from bert_tf2.modeling.tensor_bundle import TensorBundle, TensorBundleError

    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"):
        shutil.copy(tf1_tiny_dir / name, tmp_path / name)
    data = tmp_path / "bert_model.ckpt.data-00000-of-00001"
    flipped = bytearray(data.read_bytes())
    flipped[100] ^= 0xFF
    data.write_bytes(bytes(flipped))
    bundle = TensorBundle(str(tmp_path / "bert_model.ckpt"))
    with pytest.raises(TensorBundleError, match=r"data-00000-of-00001: .* does not match its "
                                              r"checksum: the file is damaged"):
        for name in bundle.entries:
            bundle.read(name)
    data.write_bytes((tf1_tiny_dir / "bert_model.ckpt.data-00000-of-00001").read_bytes()[:1000])
    with pytest.raises(TensorBundleError, match=r"data-00000-of-00001: cannot read .* the file is "
                                              r"truncated or damaged"):
        for name in bundle.entries:
            bundle.read(name)
    index = tmp_path / "bert_model.ckpt.index"
    index.write_bytes(index.read_bytes()[:-20])
    with pytest.raises(TensorBundleError, match=r"bert_model.ckpt.index: not a readable TF1 "
                                              r"checkpoint index"):
        TensorBundle(str(tmp_path / "bert_model.ckpt"))


_FUSED_ATTENTION = """
import sys
from unittest import mock
import keras, numpy as np
from bert_tf2.modeling import layers
rng = np.random.default_rng(0)
attention = layers.SelfAttention(4, 16, 0.1, 0.02)
x = rng.normal(size=(3, 24, 64)).astype("float32")
mask = np.ones((3, 24), "int32"); mask[0, 10:] = 0; mask[2, 1:] = 0
packed = np.array([[1] * 9 + [2] * 10 + [0] * 5] * 3)
attention.build(x.shape)
assert attention._fused(False) and attention._fused(None) and not attention._fused(True)
worst = 0.0
for bias, queries in ((layers.attention_bias(mask), None), (layers.attention_bias(mask), x[:, :1]),
                      (layers.packed_attention_bias(packed), None)):
    fused = keras.ops.convert_to_numpy(attention(x, bias, training=False, queries=queries))
    with mock.patch.object(layers.SelfAttention, "_fused", lambda self, training: False):
        plain = keras.ops.convert_to_numpy(attention(x, bias, training=False, queries=queries))
    worst = max(worst, float(np.abs(fused - plain).max()))
print(worst)
"""


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_fused_attention_gives_the_written_out_sums(backend):
    """`keras.ops.dot_product_attention` (flash attention on GPUs) where no dropout falls on the
    probabilities: the same outputs as the scores, softmax and sum written out, on padded rows,
    on packed rows (a padding row sees no key) and for the first token only."""
    need_backend(backend)
    result = warm_python.run([sys.executable, "-c", _FUSED_ATTENTION], cwd=REPO,
                             env={**os.environ, "KERAS_BACKEND": backend}, warm=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.strip().splitlines()[-1]) < 1e-6
