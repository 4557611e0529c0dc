"""The extractive question-answering task (SQuAD) for the shared fine-tuning loop.

Loss: the original's, the mean of the start and end positions' cross-entropies over the window's
positions. With trimmed batches (`--trim_padding`, the default) the softmax runs over the batch's
width rather than all `max_seq_length` positions: the original also taught the model that padded
positions are not answers, though decoding never considers them. `predict_step` returns each
window's logits padded back to `max_seq_length` (with a large negative value, so a padded
position is never among the n-best) and its row, for `squad_postprocess`.
"""
from __future__ import annotations

from keras import ops

from modeling import losses
from modeling.task_io import model_inputs, pad_positions

PADDED_LOGIT = -10000.0


class SpanTask:
    def __init__(self, max_seq_length: int):
        self.max_seq_length = max_seq_length

    def loss_and_metrics(self, model, batch, training: bool):
        outputs = model(model_inputs(batch), training=training)
        start, end = outputs["start_logits"], outputs["end_logits"]
        loss = losses.span_loss(start, end, batch["start_positions"], batch["end_positions"])
        examples = ops.cast(ops.shape(start)[0], "float32")
        hits = ops.logical_and(
            ops.equal(ops.cast(ops.argmax(start, -1), "int32"),
                      ops.cast(batch["start_positions"], "int32")),
            ops.equal(ops.cast(ops.argmax(end, -1), "int32"),
                      ops.cast(batch["end_positions"], "int32")))
        return loss, {"span_accuracy": (ops.sum(ops.cast(hits, "float32")), examples)}

    def predict_step(self, model, batch) -> dict:
        outputs = model(model_inputs(batch), training=False)
        return {name: pad_positions(ops.cast(outputs[name], "float32"), self.max_seq_length,
                                    PADDED_LOGIT)
                for name in ("start_logits", "end_logits")} | {
            "example_index": batch["example_index"]}
