"""The original's losses (SPEC.md section 3) against values computed by hand."""
import math

import numpy as np

from bert_tf2.modeling import losses
from bert_tf2.tasks.pretraining.task import PretrainingTask


def log_softmax(x):
    x = np.asarray(x, np.float64)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_masked_lm_loss_weights_and_epsilon():
    logits = np.array([[[2.0, 0.0, -1.0], [0.5, 0.5, 0.0], [9.0, 9.0, 9.0]]], np.float32)
    ids = np.array([[0, 2, 1]])
    weights = np.array([[1.0, 1.0, 0.0]], np.float32)  # the third slot is padding
    lp = log_softmax(logits[0])
    expected = (-lp[0, 0] - lp[1, 2]) / (2.0 + 1e-5)
    assert math.isclose(float(losses.masked_lm_loss(logits, ids, weights)), expected,
                        rel_tol=1e-6)
    # No real prediction at all: 0 / 1e-5, not a division by zero.
    assert float(losses.masked_lm_loss(logits, ids, np.zeros_like(weights))) == 0.0


def test_next_sentence_and_pretraining_total():
    nsp_logits = np.array([[1.0, -1.0], [0.2, 0.3]], np.float32)
    labels = np.array([[0], [1]])
    lp = log_softmax(nsp_logits)
    expected_nsp = -(lp[0, 0] + lp[1, 1]) / 2
    mlm_logits = np.array([[[1.0, 2.0]], [[0.5, 0.0]]], np.float32)
    batch = {"input_ids": np.zeros((2, 3), np.int32), "input_mask": np.ones((2, 3), np.int32),
             "segment_ids": np.zeros((2, 3), np.int32),
             "masked_lm_positions": np.array([[1], [2]], np.int32),
             "masked_lm_ids": np.array([[1], [0]]),
             "masked_lm_weights": np.array([[1.0], [0.0]], np.float32),
             "next_sentence_labels": labels}

    def model(inputs, training):  # the pretrainer's outputs, fixed
        assert set(inputs) == {"input_word_ids", "input_mask", "input_type_ids",
                               "masked_lm_positions"}
        return {"mlm_logits": mlm_logits, "nsp_logits": nsp_logits}

    loss, metrics = PretrainingTask("unused", 3, 1).loss_and_metrics(model, batch, False)
    expected_mlm = -log_softmax(mlm_logits[0, 0])[1] / (1 + 1e-5)  # the second slot is padding
    assert math.isclose(float(loss), expected_nsp + expected_mlm, rel_tol=1e-6)
    nsp_sum, nsp_count = metrics["next_sentence_loss"]
    assert math.isclose(float(nsp_sum) / float(nsp_count), expected_nsp, rel_tol=1e-6)
    mlm_sum, mlm_count = metrics["masked_lm_loss"]
    assert float(mlm_count) == 1.0
    assert math.isclose(float(mlm_sum), -log_softmax(mlm_logits[0, 0])[1], rel_tol=1e-6)


def test_span_classification_and_regression_losses():
    start = np.array([[0.1, 2.0, -1.0]], np.float32)
    end = np.array([[1.0, 0.0, 3.0]], np.float32)
    expected = -(log_softmax(start[0])[1] + log_softmax(end[0])[2]) / 2
    got = float(losses.span_loss(start, end, np.array([1]), np.array([2])))
    assert math.isclose(got, expected, rel_tol=1e-6)
    assert math.isclose(float(losses.regression_loss(np.array([[1.0], [3.0]]),
                                                     np.array([2.0, 2.5]))),
                        (1.0 + 0.25) / 2, rel_tol=1e-6)
    assert math.isclose(float(losses.classification_loss(np.array([[0.0, 0.0]]), np.array([1]))),
                        math.log(2), rel_tol=1e-6)
