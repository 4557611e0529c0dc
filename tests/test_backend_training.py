"""Training on JAX against TensorFlow, on the real MiniLM weights: one update's clipped gradients,
three updates' weights under the original's AdamWeightDecay, and the same under mixed precision.
(The encoder's outputs on JAX and PyTorch, the TF1 checkpoint I/O and fused attention:
test_backends.py.)"""
import numpy as np
import pytest
from conftest import need_backend, on_backend

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def steps(minilm_dir, mrpc_batch, tmp_path_factory):
    """`steps(backend, dtype)`: backend_step.py's three updates on `backend` under the `dtype`
    policy, run once per module."""
    folder, made = tmp_path_factory.mktemp("steps"), {}

    def run(backend, dtype="float32"):
        if (backend, dtype) not in made:
            if backend != "tensorflow":
                need_backend(backend)
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
    # On a CPU, float16 runs unfused (`engine.distribution.set_precision`: oneDNN's fused
    # float16 MatMul took minutes a step on AVX512-FP16 CPUs); the other dtypes keep the fusion.
    assert bool(tf_run["remapping"]) == (dtype != "mixed_float16")
    assert bool(steps("tensorflow")["remapping"])


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
