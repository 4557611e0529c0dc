"""SavedModel export: a task's serving module written so that it appears complete or not at all.

Every task's serving module (`tasks/*/serving.py`, a `tf.Module` with a `signatures()` method)
has two signatures:
- `serve_token_ids`: the encoder's inputs (`input_word_ids`, `input_mask`, `input_type_ids`, int32
  `[batch, length]`, `token_id_spec`), for callers that tokenise themselves;
- `serve_text` (also `serving_default`): raw strings, tokenised in the graph by
  `data_gen.graph_tokenizer.GraphTokenizer` (the original's ids) and packed as fine-tuning packed
  them.
The SavedModel needs only `tensorflow` and `tensorflow_text` (for its ops) to load and run. `save`
stages it beside `export_dir` and swaps it in when complete, with `vocab.txt` (and what else the
caller names) in `assets.extra/`, and the module's `description()` (what a runtime outside
TensorFlow needs to tokenise and read the outputs: task, vocabulary casing, lengths, labels) as
`assets.extra/serving.json`, from which `engine.litert` makes the LiteRT file.
The signatures are traced without AutoGraph (`tf.function(autograph=False)`, as the training
steps are): their Python `if`s test Python values, so converting them bought nothing and cost a
fifth of an export's time; a condition on a tensor fails at export instead of being converted.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil

import tensorflow as tf

from bert_tf2.modeling.encoder import INPUT_NAMES
from bert_tf2.process.atomic_files import recover_directory, staged_directory

logger = logging.getLogger(__name__)


def token_id_spec() -> dict:
    return {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES}


@contextlib.contextmanager
def _no_keras_default_signature():
    """Keras 3 gives every model on TensorFlow a property, `_default_save_signature`, that makes
    a new `tf.function` of the model's call; `tf.saved_model.save` takes every function among an
    object's attributes, so it traced each Keras model in the module again (with AutoGraph) and
    stored it, a function no signature calls: 0.29 CPU-seconds of a tiny classifier's export,
    and 200 KB of its 2.3 MB graph to load again. While the export is written, the property
    gives None, as it does for a layer that is not a model."""
    try:
        from keras.src.backend.tensorflow.layer import TFLayer
    except ImportError:  # another Keras layout: the export is as before
        yield
        return
    before = TFLayer.__dict__.get("_default_save_signature")
    if before is None:
        yield
        return
    TFLayer._default_save_signature = property(lambda layer: None)
    try:
        yield
    finally:
        TFLayer._default_save_signature = before


def save(module: tf.Module, export_dir: str, extra_files: dict | None = None,
         litert: str = "none") -> str:
    """Write `module` with its `signatures()` to `export_dir`, replacing it only when complete.

    `extra_files` (name -> source path) are copied into `export_dir/assets.extra/` (vocab.txt,
    bert_config.json: what a user needs to reproduce the inputs). `litert` ("int8", "float32")
    also writes the LiteRT file (`engine.litert`) into the export before it is swapped in, where
    the module says its task has a LiteRT runtime (`module.litert`).
    """
    export_dir = os.path.abspath(export_dir)
    recover_directory(export_dir)
    signatures = module.signatures()  # traced once: each call traces the model again
    with staged_directory(export_dir, fault_point="export") as staging:
        with _no_keras_default_signature():
            tf.saved_model.save(module, staging, signatures=signatures)
        extra = os.path.join(staging, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        for name, source in (extra_files or {}).items():
            shutil.copyfile(source, os.path.join(extra, name))
        if hasattr(module, "description"):
            with open(os.path.join(extra, "serving.json"), "w", encoding="utf-8") as f:
                json.dump(module.description(), f, indent=2, sort_keys=True)
        if litert != "none":
            if getattr(module, "litert", False):
                from bert_tf2.engine import litert as litert_file
                litert_file.write(staging, litert)
            else:
                logger.info("no LiteRT file: this export is served by its SavedModel alone "
                            "(docs/serving.md#the-fast-path-litert-int8)")
    logger.info("SavedModel written to %s (signatures: %s)", export_dir,
                ", ".join(sorted(signatures)))
    return export_dir
