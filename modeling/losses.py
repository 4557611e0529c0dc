"""The original's losses (SPEC.md section 3), computed in float32 from logits, and the
multi-label one (a sigmoid per label) that forks of the original add by hand."""
from keras import ops


def token_nll(logits, labels):
    """Negative log-likelihood of each label under softmax(logits), in float32."""
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    labels = ops.cast(labels, "int32")
    return -ops.squeeze(ops.take_along_axis(log_probs, labels[..., None], axis=-1), -1)


def masked_lm_loss(logits, masked_lm_ids, masked_lm_weights):
    """sum(w * nll) / (sum(w) + 1e-5) over the prediction slots; padded slots have weight 0."""
    weights = ops.cast(masked_lm_weights, "float32")
    return ops.sum(weights * token_nll(logits, masked_lm_ids)) / (ops.sum(weights) + 1e-5)


def next_sentence_loss(logits, next_sentence_labels):
    """Mean negative log-likelihood of the two-way next-sentence prediction."""
    return ops.mean(token_nll(logits, ops.reshape(next_sentence_labels, (-1,))))


def classification_loss(logits, labels):
    return ops.mean(token_nll(logits, labels))


def regression_loss(predictions, targets):
    """Mean squared error of a one-output head (STS-B)."""
    predictions = ops.reshape(ops.cast(predictions, "float32"), (-1,))
    return ops.mean(ops.square(predictions - ops.cast(ops.reshape(targets, (-1,)), "float32")))


def span_loss(start_logits, end_logits, start_positions, end_positions):
    """(CE_start + CE_end) / 2 over the sequence positions."""
    return (classification_loss(start_logits, start_positions)
            + classification_loss(end_logits, end_positions)) / 2.0


def multi_label_loss(logits, targets):
    """Mean binary cross-entropy of each label's sigmoid, over examples and labels (targets are
    0/1), in the stable form max(x, 0) - x*z + log(1 + exp(-|x|))."""
    logits = ops.cast(logits, "float32")
    targets = ops.cast(targets, "float32")
    return ops.mean(ops.relu(logits) - logits * targets + ops.log1p(ops.exp(-ops.abs(logits))))
