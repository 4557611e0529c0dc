"""The pretraining task: MLM + NSP loss for training, and the original's evaluation metrics.

Batches are the pretraining records' features (`input_ids`, `input_mask`, `segment_ids`,
`masked_lm_positions`, `masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels`). Metrics are
(sum, count) pairs as `training.Trainer` wants them: `masked_lm_accuracy` and `masked_lm_loss`
weighted by `masked_lm_weights`, as the original's `metric_fn` computes them.
"""
from keras import ops

from modeling import losses


def model_inputs(batch) -> dict:
    """Record feature names -> the pretrainer's input names."""
    return {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
            "input_type_ids": batch["segment_ids"],
            "masked_lm_positions": batch["masked_lm_positions"]}


class PretrainingTask:
    def loss_and_metrics(self, model, batch, training: bool):
        outputs = model(model_inputs(batch), training=training)
        mlm_logits, nsp_logits = outputs["mlm_logits"], outputs["nsp_logits"]
        ids = ops.cast(batch["masked_lm_ids"], "int32")
        weights = ops.cast(batch["masked_lm_weights"], "float32")
        labels = ops.reshape(ops.cast(batch["next_sentence_labels"], "int32"), (-1,))
        mlm_loss = losses.masked_lm_loss(mlm_logits, ids, weights)
        nsp_loss = losses.next_sentence_loss(nsp_logits, labels)
        mlm_nll = losses.token_nll(mlm_logits, ids)
        nsp_nll = losses.token_nll(nsp_logits, labels)
        mlm_hits = ops.cast(ops.equal(ops.argmax(mlm_logits, -1), ids), "float32")
        nsp_hits = ops.cast(ops.equal(ops.argmax(nsp_logits, -1), labels), "float32")
        examples = ops.cast(ops.shape(labels)[0], "float32")
        metrics = {
            "masked_lm_accuracy": (ops.sum(mlm_hits * weights), ops.sum(weights)),
            "masked_lm_loss": (ops.sum(mlm_nll * weights), ops.sum(weights)),
            "next_sentence_accuracy": (ops.sum(nsp_hits), examples),
            "next_sentence_loss": (ops.sum(nsp_nll), examples),
        }
        return mlm_loss + nsp_loss, metrics
