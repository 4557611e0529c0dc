"""Keras's other backends against TensorFlow: the encoder's outputs on the real MiniLM weights (JAX and
PyTorch), one training step's gradients and updated weights (JAX), data parallel over two host
devices, mixed precision, and the TF1 checkpoint reader and writer that JAX runs use."""
import os
import sys

import numpy as np
import pytest
import warm_python
from conftest import REPO

STEP = str(REPO / "tests" / "backend_step.py")


def backend_available(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec({"jax": "jax", "torch": "torch"}[name]) is not None


def need(name: str):
    if not backend_available(name):
        pytest.skip(f"{name} is not installed (make test installs it: setup.py's {name} extra)")


def on_backend(backend: str, *args, env=None, timeout=900):
    result = warm_python.run([sys.executable, STEP, *map(str, args)], cwd=REPO, timeout=timeout,
                             env={**os.environ, "KERAS_BACKEND": backend, **(env or {})},
                             warm=True)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.fixture(scope="module")
def mrpc_batch(shared_data, tokenizer, tmp_path_factory):
    """Eight real MRPC pairs packed at width 64 ([CLS], [SEP], "the" and padding repeat within
    the batch, as in any real batch), their labels, and a fixed fresh head."""
    from bert_tf2.data_gen.packing import pack, truncate_seq_pair

    rows = (shared_data / "glue" / "MRPC" / "dev.tsv").read_text(encoding="utf-8").split("\n")[1:9]
    ids, masks, segments, labels = [], [], [], []
    for row in rows:
        label, _, _, a, b = row.split("\t")
        tokens_a, tokens_b = tokenizer.tokenize(a), tokenizer.tokenize(b)
        truncate_seq_pair(tokens_a, tokens_b, 61)
        packed = pack(tokens_a, tokens_b, 64, tokenizer)
        ids.append(packed["input_ids"]), masks.append(packed["input_mask"])
        segments.append(packed["segment_ids"]), labels.append(int(label))
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("batch") / "batch.npz"
    np.savez(path, input_ids=np.array(ids, np.int32), input_mask=np.array(masks, np.int32),
             segment_ids=np.array(segments, np.int32), label_ids=np.array(labels, np.int32),
             # A large fresh head, so that the gradients' norm is above 1 and the clip acts.
             head_weights=(rng.standard_normal((2, 384)) * 0.5).astype(np.float32),
             head_bias=np.zeros(2, np.float32))
    return path


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
    need(backend)
    on_backend(backend, "encode", minilm_dir, mrpc_batch, tmp_path / "other.npz")
    ours, theirs = np.load(tmp_path / "other.npz"), tf_encoding
    mask = np.load(mrpc_batch)["input_mask"].astype(bool)
    for name in ("sequence_output", "pooled_output"):
        a, b = ours[name], theirs[name]
        if name == "sequence_output":
            a, b = a[mask], b[mask]  # padded positions are not outputs of the model
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"{backend} {name}")
    assert np.abs(theirs["sequence_output"]).max() > 1.0  # real activations, not zeros


@pytest.fixture(scope="module")
def steps(minilm_dir, mrpc_batch, tmp_path_factory):
    """`steps(backend, dtype)`: backend_step.py's three updates on `backend` under the `dtype`
    policy, run once per module."""
    folder, made = tmp_path_factory.mktemp("steps"), {}

    def run(backend, dtype="float32"):
        if (backend, dtype) not in made:
            if backend != "tensorflow":
                need(backend)
            path = folder / f"{backend}-{dtype}.npz"
            on_backend(backend, "train", minilm_dir, mrpc_batch, path, f"--dtype={dtype}")
            made[backend, dtype] = np.load(path)
        return made[backend, dtype]

    return run


@pytest.fixture(scope="module")
def training_steps(steps):
    return steps("tensorflow"), steps("jax")


def _relative(a, b, scale):
    """The largest difference over the largest value of `b`, or over 1e-4 of `scale` (the
    largest value of any variable's) where `b` is smaller: such a gradient here is the round-off
    of an analytically zero one (attention's key bias: a softmax ignores a shift of its scores)."""
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-4 * scale)


def _largest(run, key, count):
    return max(np.abs(run[f"{key}/{i}"]).max() for i in range(count))


@pytest.mark.integration
def test_the_clip_on_tensorflow_counts_looked_up_rows_as_indexed_slices(steps):
    """The clip acted, by the norm that counts each looked-up embedding row as TensorFlow's
    IndexedSlices count it: the summed (dense) gradients' norm differs, so clipping by it would
    fail the comparison with JAX below."""
    tf_run = steps("tensorflow")
    assert tf_run["raw_norm"] > 1.5
    assert abs(tf_run["dense_norm"] / tf_run["raw_norm"] - 1) > 1e-3


@pytest.mark.integration
def test_one_update_gives_tensorflows_clipped_gradients(training_steps):
    tf_run, jax_run = training_steps
    paths = list(tf_run["paths"])
    assert paths == list(jax_run["paths"])
    scale = _largest(tf_run, "grads", len(paths))
    worst = max((_relative(jax_run[f"grads/{i}"], tf_run[f"grads/{i}"], scale), paths[i])
                for i in range(len(paths)))
    assert worst[0] < 1e-4, worst
    norm = np.sqrt(sum(np.sum(jax_run[f"grads/{i}"].astype(np.float64) ** 2)
                       for i in range(len(paths))))
    # Clipped to norm 1 by that count: the summed gradients' norm is dense / raw.
    assert abs(norm - tf_run["dense_norm"] / tf_run["raw_norm"]) < 1e-5
    assert abs(tf_run["loss_0"] - jax_run["loss_0"]) < 1e-5


@pytest.mark.integration
def test_three_updates_give_tensorflows_weights(training_steps):
    """AdamWeightDecay with the original's warmup (2 steps: the first update has learning rate 0)
    and decay, from the same weights: after each update every weight agrees to 1e-4 relative
    (of itself, or of its variable's root mean square where it is smaller),
    each variable's change (the update itself) to 1e-4 of its norm, and the losses to 1e-5.
    Variables whose gradient is round-off (attention's key bias: Adam scales its noise up to a
    step of 1e-9) only have to agree as weights."""
    tf_run, jax_run = training_steps
    paths = list(tf_run["paths"])
    grad_scale = _largest(tf_run, "grads", len(paths))
    noise = {i for i in range(len(paths))
             if np.abs(tf_run[f"grads/{i}"]).max() < 1e-4 * grad_scale}
    assert {paths[i].split("/", 1)[1] for i in noise} == {"attention_self/key/bias"}
    for step in range(3):
        for i, path in enumerate(paths):
            ours, theirs = jax_run[f"weights_{step}/{i}"], tf_run[f"weights_{step}/{i}"]
            rms = np.sqrt(np.mean(theirs.astype(np.float64) ** 2))  # the variable's own scale
            assert np.all(np.abs(ours - theirs) <= 1e-4 * np.maximum(np.abs(theirs), rms)), (
                step, path)
            if step == 0:  # learning rate 0: nothing moved yet
                np.testing.assert_array_equal(ours, theirs)
                continue
            if i in noise:
                continue
            change_tf = theirs.astype(np.float64) - tf_run[f"weights_{step - 1}/{i}"]
            change_jax = ours.astype(np.float64) - jax_run[f"weights_{step - 1}/{i}"]
            assert np.linalg.norm(change_tf) > 0, (step, path)
            assert np.linalg.norm(change_jax - change_tf) < 1e-4 * np.linalg.norm(change_tf), (
                step, path)
        np.testing.assert_allclose(jax_run[f"loss_{step}"], tf_run[f"loss_{step}"], rtol=1e-5)


MIXED = [pytest.param("mixed_bfloat16", marks=pytest.mark.slow), "mixed_float16"]  # bfloat16 in
# make test-all (the same path, another dtype)


@pytest.mark.integration
@pytest.mark.parametrize("dtype", MIXED)
def test_mixed_precision_on_tensorflow_keeps_float32_variables_and_loss(dtype, steps):
    tf_run = steps("tensorflow", dtype)
    assert set(tf_run["dtypes"]) == {"float32"} and tf_run["loss_0"].dtype == np.float32


@pytest.mark.integration
@pytest.mark.parametrize("dtype", MIXED)
def test_mixed_precision_on_jax_as_on_tensorflow(dtype, steps, training_steps):
    """The same three updates under a mixed policy on both backends (mixed_float16 with Keras's
    dynamic loss scaling, which skips an update whose gradients overflow): float32 variables, a
    float32 loss agreeing to 1e-2 (bfloat16 keeps 8 bits of mantissa: each backend rounds its
    own sums), the same updates skipped, the same direction of change."""
    _, full = training_steps
    tf_run, jax_run = steps("tensorflow", dtype), steps("jax", dtype)
    assert set(jax_run["dtypes"]) == set(tf_run["dtypes"]) == {"float32"}
    assert jax_run["loss_0"].dtype == tf_run["loss_0"].dtype == np.float32
    paths = list(full["paths"])
    kernel = paths.index("classifier/output/output_weights")
    for step in range(3):
        assert abs(float(jax_run[f"loss_{step}"]) - float(tf_run[f"loss_{step}"])) < 1e-2, step
        if step == 0:
            continue
        changes = [run[f"weights_{step}/{kernel}"] - run[f"weights_{step - 1}/{kernel}"]
                   for run in (tf_run, jax_run)]
        moved = [np.abs(change).max() > 0 for change in changes]
        assert moved[0] == moved[1], (step, moved)  # a skipped update is skipped on both
        if moved[0]:
            cosine = np.sum(changes[0] * changes[1]) / (np.linalg.norm(changes[0])
                                                        * np.linalg.norm(changes[1]))
            assert cosine > 0.99, (step, cosine)
    if dtype == "mixed_bfloat16":  # no loss scale: every update happens, near float32's
        for step in range(3):
            assert abs(float(jax_run[f"loss_{step}"]) - float(full[f"loss_{step}"])) < 0.02


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
    need(backend)
    result = warm_python.run([sys.executable, "-c", _FUSED_ATTENTION], cwd=REPO,
                             env={**os.environ, "KERAS_BACKEND": backend}, warm=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.strip().splitlines()[-1]) < 1e-6
