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

With `doc_stride` (long documents), `serve_text` cuts each text into the windows fine-tuning cut
(`features.document_windows`, here with `data_gen.graph_windows.Layout`), runs the model on them
`window_batch` rows at a time (memory bounded by that, not by the document), and pools each
document's window logits (mean or max) into one row before the outputs above: one answer per
document.
"""
from __future__ import annotations

import tensorflow as tf

from bert_tf2.data_gen.graph_tokenizer import GraphTokenizer, InputPacker
from bert_tf2.data_gen.graph_windows import Layout, map_in_batches, window_positions
from bert_tf2.engine.export import token_id_spec
from bert_tf2.tasks.classification.window_pooling import pool_window_logits


class ClassifierServing(tf.Module):
    """A sentence (pair) classifier: outputs `logits`, and `probabilities`, `label_id`, `label`
    (classification), `score` (regression), or `probabilities`, `predicted`, `labels`
    (multi-label)."""

    def __init__(self, model, vocab, do_lower_case: bool, max_seq_length: int, labels,
                 pair: bool, thresholds=None, doc_stride: int | None = None,
                 pooling: str = "mean", window_batch: int = 64):
        super().__init__()
        self.model = model
        self.tokenizer = GraphTokenizer(vocab, do_lower_case=do_lower_case)
        self.packer = InputPacker.for_tokenizer(self.tokenizer, max_seq_length,
                                                dynamic_length=True)
        self.labels = tf.constant(list(labels) or [""], tf.string)
        self.num_logits = len(labels) or 1  # one per label (regression: one)
        self.regression = not labels
        self.pair = pair
        self.max_seq_length = max_seq_length
        self.doc_stride = doc_stride
        self.pooling = pooling
        self.window_batch = window_batch
        # Multi-label: one threshold per label (a constant of the graph).
        self.thresholds = (None if thresholds is None
                           else tf.constant([float(t) for t in thresholds], tf.float32))

    @property
    def litert(self) -> bool:
        """Whether `litert_serving.LiteRTClassifier` serves this export (not with windows)."""
        return not self.doc_stride

    def description(self) -> dict:
        """What `litert_serving.LiteRTClassifier` needs beside the LiteRT file."""
        labels = [label.decode("utf-8") for label in self.labels.numpy().tolist()]
        return {"task": "classification", "do_lower_case": self.tokenizer.do_lower_case,
                "max_seq_length": self.max_seq_length, "pair": self.pair,
                "labels": [] if self.regression else labels,
                "thresholds": (None if self.thresholds is None
                               else [float(t) for t in self.thresholds.numpy()]),
                "doc_stride": self.doc_stride, "pooling": self.pooling}

    def logits(self, inputs: dict):
        return tf.cast(self.model(inputs, training=False)["logits"], tf.float32)

    def outputs(self, inputs: dict, logits=None) -> dict:
        if logits is None:
            logits = self.logits(inputs)
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

    def text_outputs(self, text_a, text_b=None) -> dict:
        if not self.doc_stride:
            return self.outputs(self.text_inputs(text_a, text_b))
        inputs, request = self.windows(text_a, text_b)
        logits = map_in_batches(self.logits, inputs, self.window_batch, [None, self.num_logits])
        return self.outputs(None, pool_window_logits(logits, request, self.pooling))

    def windows(self, text_a, text_b=None) -> tuple:
        """The encoder's inputs for every window of every text, and each window's request."""
        a = self.tokenizer(text_a)
        b = self.tokenizer(text_b) if text_b is not None else None
        length_a = a.row_lengths()
        length_b = b.row_lengths() if b is not None else tf.zeros_like(length_a)
        has_b = length_b > 0
        budget = tf.constant(self.max_seq_length - 3, tf.int64)
        long_is_b = has_b & (length_b >= length_a)
        short = tf.where(long_is_b, length_a, length_b)
        short = tf.where(length_a + length_b > budget, tf.minimum(short, budget // 2), short)
        room = tf.where(has_b, budget - short, budget + 1)  # a single text: max_seq_length - 2
        layout = Layout.of(room, tf.where(long_is_b, length_b, length_a), self.doc_stride,
                           empty_window=True)
        request, index = layout.windows()
        start, length = layout.window(request, index)
        long_b = tf.gather(long_is_b, request)
        kept = tf.gather(short, request)
        zero = tf.zeros_like(start)
        segments = [_slice(a, request, tf.where(long_b, zero, start),
                           tf.where(long_b, kept, length))]
        if b is not None:
            segments.append(_slice(b, request, tf.where(long_b, start, zero),
                                   tf.where(long_b, length, kept)))
        return self.packer(segments), request

    def signatures(self) -> dict:
        token_ids = tf.function(self.outputs, input_signature=[token_id_spec()], autograph=False)
        if self.pair:
            text = tf.function(self.text_outputs, input_signature=[
                tf.TensorSpec([None], tf.string, name="text_a"),
                tf.TensorSpec([None], tf.string, name="text_b")], autograph=False)
        else:
            text = tf.function(lambda text_a: self.text_outputs(text_a),
                               input_signature=[tf.TensorSpec([None], tf.string, name="text_a")],
                               autograph=False)
        return {"serving_default": text.get_concrete_function(),
                "serve_text": text.get_concrete_function(),
                "serve_token_ids": token_ids.get_concrete_function()}


def _slice(tokens: tf.RaggedTensor, request, start, length) -> tf.RaggedTensor:
    """`tokens[request][start:start + length]` for each window: ragged `[windows, (length)]`."""
    return tf.gather(tokens.flat_values, window_positions(tokens, request, start, length))
