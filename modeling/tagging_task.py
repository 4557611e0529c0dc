"""The token-tagging task (NER) for the shared fine-tuning loop.

Batches are `data_gen.ner_features` windows: `label_ids` hold a tag id on each word's first
WordPiece and -1 elsewhere, `label_weights` 1.0 where a label counts. The loss is the mean
cross-entropy over the labelled positions of the batch; `predict_step` returns each position's
predicted tag id, padded back to `max_seq_length` with -1, and the window's row, for
`ner_features.reassemble` and conlleval scoring.
"""
from __future__ import annotations

from keras import ops

from modeling import losses
from modeling.task_io import model_inputs, pad_positions


class TaggingTask:
    def __init__(self, max_seq_length: int):
        self.max_seq_length = max_seq_length

    def loss_and_metrics(self, model, batch, training: bool):
        logits = model(model_inputs(batch), training=training)["logits"]
        weights = ops.cast(batch["label_weights"], "float32")
        labels = ops.maximum(ops.cast(batch["label_ids"], "int32"), 0)
        count = ops.sum(weights)
        loss = ops.sum(weights * losses.token_nll(logits, labels)) / ops.maximum(count, 1.0)
        hits = ops.cast(ops.equal(ops.cast(ops.argmax(logits, -1), "int32"), labels), "float32")
        return loss, {"token_accuracy": (ops.sum(hits * weights), count)}

    def predict_step(self, model, batch) -> dict:
        logits = model(model_inputs(batch), training=False)["logits"]
        predicted = ops.cast(ops.argmax(logits, -1), "int32")
        return {"predicted_ids": pad_positions(predicted, self.max_seq_length, -1),
                "example_index": batch["example_index"]}
