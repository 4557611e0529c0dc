"""Sentence-level models run the last layer for [CLS] alone (`modeling.encoder.first_token_output`):
on real MiniLM weights and real MRPC dev pairs, the classifier's logits and every gradient equal
those of the full graph (the encoder's pooled output, then the head), and multiple choice's too;
the work skipped is the other tokens' last-layer states, which nothing reads."""
import numpy as np
import tensorflow as tf
from conftest import glue_features


def reference_logits(model, inputs, training=False):
    """What the functional graph computes: the full encoder, its pooled output, the head."""
    return model.head(model.encoder(inputs, training=training)["pooled_output"],
                      training=training)


def test_first_token_output_is_the_sequence_outputs_first_token(minilm_classifier, shared_data,
                                                                tokenizer):
    from bert_tf2.modeling.encoder import first_token_output
    from bert_tf2.tasks.tensors import model_inputs

    inputs = model_inputs(glue_features(shared_data, tokenizer, "MRPC", 24))
    full = np.asarray(minilm_classifier.encoder(inputs)["sequence_output"])[:, 0]
    first = np.asarray(first_token_output(minilm_classifier.encoder, inputs))
    assert first.shape == (24, 384)
    np.testing.assert_allclose(first, full, atol=2e-5, rtol=0)


def test_classifier_logits_and_gradients_equal_the_full_graph(minilm_classifier, shared_data,
                                                              tokenizer):
    from bert_tf2.tasks.tensors import model_inputs

    features = glue_features(shared_data, tokenizer, "MRPC", 24)
    inputs = model_inputs(features)
    model = minilm_classifier
    variables = model.trainable_variables

    def logits_and_grads(forward):
        with tf.GradientTape() as tape:
            logits = forward(inputs)
            loss = tf.reduce_sum(logits * np.array([1.0, -2.0], np.float32))
        return np.asarray(logits), tape.gradient(loss, variables)

    fast, fast_grads = logits_and_grads(lambda x: model(x, training=False)["logits"])
    full, full_grads = logits_and_grads(lambda x: reference_logits(model, x))
    assert np.ptp(full, axis=0).max() > 1e-2  # the pairs do get different logits
    np.testing.assert_allclose(fast, full, atol=1e-5, rtol=0)
    assert len(fast_grads) == len(full_grads) == len(variables)
    for variable, a, b in zip(variables, fast_grads, full_grads):
        a, b = np.asarray(tf.convert_to_tensor(a)), np.asarray(tf.convert_to_tensor(b))
        scale = max(np.abs(b).max(), 1e-3)
        assert np.abs(a - b).max() <= 1e-4 * scale, variable.path


def test_training_mode_runs_dropout_on_the_first_token_path(minilm_classifier, shared_data,
                                                            tokenizer):
    from bert_tf2.tasks.tensors import model_inputs

    inputs = model_inputs(glue_features(shared_data, tokenizer, "MRPC", 8))
    a = np.asarray(minilm_classifier(inputs, training=True)["logits"])
    b = np.asarray(minilm_classifier(inputs, training=True)["logits"])
    plain = np.asarray(minilm_classifier(inputs, training=False)["logits"])
    assert not np.allclose(a, b) and not np.allclose(a, plain)


def test_multiple_choice_logits_equal_the_full_graph(minilm_dir):
    import keras

    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.encoder import BertEncoder
    from bert_tf2.modeling.models import BertMultipleChoice

    keras.utils.set_random_seed(5)
    model = BertMultipleChoice(BertEncoder(checkpoints.read_config(minilm_dir)), num_choices=4)
    checkpoints.load_checkpoint(model, minilm_dir, allow_new_heads=True)
    rng = np.random.default_rng(2)
    lengths = rng.integers(5, 32, (3, 4))
    mask = (np.arange(32)[None, None] < lengths[..., None]).astype(np.int32)
    inputs = {"input_word_ids": rng.integers(1000, 29000, (3, 4, 32)).astype(np.int32) * mask,
              "input_mask": mask,
              "input_type_ids": (np.arange(32)[None, None] >= lengths[..., None] // 2)
              .astype(np.int32) * mask}
    fast = np.asarray(model(inputs, training=False)["logits"])
    flat = {name: value.reshape(12, 32) for name, value in inputs.items()}
    full = np.asarray(reference_logits(model, flat))
    assert fast.shape == (3, 4) and np.ptp(full) > 1e-3
    np.testing.assert_allclose(fast, full, atol=1e-5, rtol=0)
