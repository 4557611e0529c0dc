"""SavedModel export for sentence (pair) classification: raw strings in, labels out.

`serve_text` (also `serving_default`) takes `text_a` (and `text_b` for a pair task), string
`[batch]`, tokenised by `GraphTokenizer` (the original's ids) and packed by `InputPacker` as
fine-tuning packed them (`[CLS] A [SEP] B [SEP]`, trimmed to `max_seq_length` as the original
trims, padded to the longest row of the request); it returns `logits`, and `probabilities`,
`label_id`, `label` (classification), `score` (regression), or for a multi-label task
`probabilities` (a sigmoid per label, in the label order), `predicted` (0/1 per label: the
probability above its threshold, the run's `thresholds.tsv` or --threshold) and `labels` (the
predicted names joined by ",", "" for none). `serve_token_ids` takes the
encoder's inputs. Saved by `engine.export.save`.
"""
from __future__ import annotations

import tensorflow as tf

from data_gen.graph_tokenizer import GraphTokenizer, InputPacker
from engine.export import token_id_spec


class ClassifierServing(tf.Module):
    """A sentence (pair) classifier: outputs `logits`, and `probabilities`, `label_id`, `label`
    (classification), `score` (regression), or `probabilities`, `predicted`, `labels`
    (multi-label)."""

    def __init__(self, model, vocab, do_lower_case: bool, max_seq_length: int, labels,
                 pair: bool, thresholds=None):
        super().__init__()
        self.model = model
        self.tokenizer = GraphTokenizer(vocab, do_lower_case=do_lower_case)
        self.packer = InputPacker.for_tokenizer(self.tokenizer, max_seq_length,
                                                dynamic_length=True)
        self.labels = tf.constant(list(labels) or [""], tf.string)
        self.regression = not labels
        self.pair = pair
        # Multi-label: one threshold per label (a constant of the graph).
        self.thresholds = (None if thresholds is None
                           else tf.constant([float(t) for t in thresholds], tf.float32))

    def outputs(self, inputs: dict) -> dict:
        logits = tf.cast(self.model(inputs, training=False)["logits"], tf.float32)
        if self.regression:
            return {"logits": logits, "score": logits[:, 0]}
        if self.thresholds is not None:
            probabilities = tf.sigmoid(logits)
            predicted = probabilities > self.thresholds
            names = tf.ragged.boolean_mask(
                tf.broadcast_to(self.labels, tf.shape(predicted)), predicted)
            return {"logits": logits, "probabilities": probabilities,
                    "predicted": tf.cast(predicted, tf.int32),
                    "labels": tf.strings.reduce_join(names, axis=-1, separator=",")}
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label_id": label_id, "label": tf.gather(self.labels, label_id)}

    def text_inputs(self, text_a, text_b=None) -> dict:
        segments = [self.tokenizer(text_a)]
        if text_b is not None:
            segments.append(self.tokenizer(text_b))
        return self.packer(segments)

    def signatures(self) -> dict:
        token_ids = tf.function(self.outputs, input_signature=[token_id_spec()])
        if self.pair:
            text = tf.function(lambda text_a, text_b: self.outputs(
                self.text_inputs(text_a, text_b)), input_signature=[
                tf.TensorSpec([None], tf.string, name="text_a"),
                tf.TensorSpec([None], tf.string, name="text_b")])
        else:
            text = tf.function(lambda text_a: self.outputs(self.text_inputs(text_a)),
                               input_signature=[tf.TensorSpec([None], tf.string, name="text_a")])
        return {"serving_default": text.get_concrete_function(),
                "serve_text": text.get_concrete_function(),
                "serve_token_ids": token_ids.get_concrete_function()}
