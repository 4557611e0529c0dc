"""SavedModel export for serving: the fine-tuned model with its tokenizer inside the graph.

Each export has two signatures:
- `serve_token_ids`: the encoder's inputs (`input_word_ids`, `input_mask`, `input_type_ids`, int32
  `[batch, length]`), for callers that tokenise themselves;
- `serve_text` (also `serving_default`): raw strings, tokenised by `GraphTokenizer` (the original's
  ids) and packed by `InputPacker` as fine-tuning packed them (`[CLS] A [SEP] B [SEP]`, trimmed to
  `max_seq_length` as the original trims, padded to the longest row of the request).
The SavedModel needs only `tensorflow` and `tensorflow_text` (for its ops) to load and run.

Task heads differ in what they return; `classifier_outputs` is the sentence-classification one.
"""
from __future__ import annotations

import logging
import os
import shutil

import tensorflow as tf

from data_gen.graph_tokenizer import GraphTokenizer, InputPacker
from modeling.atomic_files import (recover_directory, replace_directory,
                                   staging_directory)
from modeling.encoder import INPUT_NAMES

logger = logging.getLogger(__name__)


def token_id_spec() -> dict:
    return {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES}


class ClassifierServing(tf.Module):
    """A sentence (pair) classifier: outputs `logits`, and `probabilities`, `label_id`, `label`
    (classification) or `score` (regression)."""

    def __init__(self, model, vocab, do_lower_case: bool, max_seq_length: int, labels,
                 pair: bool):
        super().__init__()
        self.model = model
        self.tokenizer = GraphTokenizer(vocab, do_lower_case=do_lower_case)
        self.packer = InputPacker.for_tokenizer(self.tokenizer, max_seq_length,
                                                dynamic_length=True)
        self.labels = tf.constant(list(labels) or [""], tf.string)
        self.regression = not labels
        self.pair = pair

    def outputs(self, inputs: dict) -> dict:
        logits = tf.cast(self.model(inputs, training=False)["logits"], tf.float32)
        if self.regression:
            return {"logits": logits, "score": logits[:, 0]}
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


def save(module: tf.Module, export_dir: str, extra_files: dict | None = None) -> str:
    """Write `module` with its `signatures()` to `export_dir`, replacing it only when complete.

    `extra_files` (name -> source path) are copied into `export_dir/assets.extra/` (vocab.txt,
    bert_config.json: what a user needs to reproduce the inputs).
    """
    export_dir = os.path.abspath(export_dir)
    recover_directory(export_dir)
    staging = staging_directory(export_dir)
    tf.saved_model.save(module, staging, signatures=module.signatures())
    if extra_files:
        extra = os.path.join(staging, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        for name, source in extra_files.items():
            shutil.copyfile(source, os.path.join(extra, name))
    replace_directory(staging, export_dir)
    logger.info("SavedModel written to %s (signatures: %s)", export_dir,
                ", ".join(sorted(module.signatures())))
    return export_dir
