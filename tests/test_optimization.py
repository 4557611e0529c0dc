"""The original's optimiser and schedule, and LAMB, against updates computed by hand in NumPy."""
import keras
import numpy as np
import pytest

from bert_tf2.modeling.optimization import (
    AdamWeightDecay,
    Lamb,
    WarmupPolynomialDecay,
    create_optimizer,
)


def test_schedule_warms_up_then_decays_at_the_global_step():
    schedule = WarmupPolynomialDecay(1e-4, num_train_steps=1000, num_warmup_steps=100)
    steps = [0, 1, 50, 99, 100, 101, 550, 1000, 1200]
    got = [float(schedule(s)) for s in steps]
    # Decay is evaluated at the global step: at step 100 it is already 1e-4 * (1 - 100/1000).
    want = [0.0, 1e-6, 5e-5, 9.9e-5, 9e-5, 8.99e-5, 4.5e-5, 0.0, 0.0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-12)
    no_warmup = WarmupPolynomialDecay(2e-5, num_train_steps=10)
    np.testing.assert_allclose([float(no_warmup(s)) for s in (0, 5, 10)], [2e-5, 1e-5, 0.0],
                               rtol=1e-6, atol=1e-12)


def make_variables():
    rng = np.random.default_rng(0)
    kernel = keras.Variable(rng.normal(size=(3, 2)).astype(np.float32), name="kernel")
    bias = keras.Variable(rng.normal(size=(2,)).astype(np.float32), name="bias")
    gamma = keras.Variable(rng.normal(size=(2,)).astype(np.float32),
                           name="attention_output_LayerNorm_gamma")
    return [kernel, bias, gamma]


def gradients(step):
    rng = np.random.default_rng(100 + step)
    return [rng.normal(size=s).astype(np.float32) * 0.1 for s in ((3, 2), (2,), (2,))]


def clip(grads, norm=1.0):
    global_norm = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in grads))
    return [g * norm / max(global_norm, norm) for g in grads]


def run(optimizer, steps, scale=1.0):
    variables = make_variables()
    for step in range(steps):
        optimizer.apply([g * scale for g in gradients(step)], variables)
    return [v.numpy() for v in variables]


def reference(steps, lr, lamb=False, scale=1.0, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    params = [v.numpy().astype(np.float64) for v in make_variables()]
    decays = [True, False, False]  # kernel decays; bias and LayerNorm are excluded
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for step in range(steps):
        grads = clip([g.astype(np.float64) * scale for g in gradients(step)])
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            if lamb:
                mh, vh = m[i] / (1 - b1 ** (step + 1)), v[i] / (1 - b2 ** (step + 1))
                update = mh / (np.sqrt(vh) + eps)
            else:
                update = m[i] / (np.sqrt(v[i]) + eps)  # no bias correction
            if decays[i]:
                update = update + wd * params[i]
            ratio = 1.0
            if lamb and decays[i]:  # layer adaptation skips the excluded variables too
                ratio = np.linalg.norm(params[i]) / np.linalg.norm(update)
            params[i] = params[i] - ratio * lr * update
    return params


@pytest.mark.parametrize("scale", [1.0, 100.0])  # 100x: clipping to global norm 1.0 kicks in
def test_adam_weight_decay_matches_the_original_update(scale):
    got = run(AdamWeightDecay(learning_rate=1e-2), steps=3, scale=scale)
    want = reference(steps=3, lr=1e-2, scale=scale)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=2e-6)


def test_adam_weight_decay_has_no_bias_correction():
    """First step of Adam without bias correction moves by lr * 0.1 / sqrt(0.001) = 3.16 lr."""
    var = keras.Variable(np.zeros(1, np.float32), name="bias")
    AdamWeightDecay(learning_rate=1e-3).apply([np.array([0.5], np.float32)], [var])
    np.testing.assert_allclose(var.numpy(), [-1e-3 * 0.05 / (np.sqrt(0.00025) + 1e-6)],
                               rtol=1e-5)
    assert abs(var.numpy()[0]) > 3e-3  # bias-corrected Adam would move by about 1e-3


def test_lamb_matches_hand_computed_update():
    got = run(Lamb(learning_rate=1e-2), steps=3)
    want = reference(steps=3, lr=1e-2, lamb=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=2e-6)


def test_create_optimizer_uses_the_schedule():
    optimizer = create_optimizer(5e-5, num_train_steps=100, num_warmup_steps=10)
    assert isinstance(optimizer, AdamWeightDecay)
    assert isinstance(optimizer.learning_rate, float) or optimizer.learning_rate is not None
    variables = make_variables()
    optimizer.apply(gradients(0), variables)  # step 0 of warmup: learning rate 0, nothing moves
    for got, init in zip(variables, make_variables()):
        np.testing.assert_array_equal(got.numpy(), init.numpy())
    optimizer.apply(gradients(1), variables)
    assert float(optimizer.learning_rate) == pytest.approx(1e-5, rel=1e-5)  # step 2: 2/10 * 5e-5
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        create_optimizer(1e-4, 10, 1, optimizer="sgd")


def test_decay_exclusions_on_bert_variables_match_the_original_names(tf1_tiny_dir):
    """Keras variable paths must exclude exactly what the original's TF1 names exclude."""
    from bert_tf2.modeling.checkpoint_names import tf1_variable_map
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertPretrainer
    model = BertPretrainer(BertEncoder(BertConfig.from_json_file(tf1_tiny_dir / "bert_config.json")))
    for optimizer_class in (AdamWeightDecay, Lamb):
        optimizer = optimizer_class()
        optimizer.build(model.trainable_variables)
        decays = {id(v): d for v, d in zip(model.trainable_variables, optimizer._decays)}
        for tf1_name, variable in tf1_variable_map(model).items():
            original = not any(x in tf1_name for x in ("LayerNorm", "layer_norm", "bias"))
            assert decays[id(variable)] == original, tf1_name
