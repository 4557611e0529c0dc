"""Which runtime answers an export's raw texts (`--runtime`): its LiteRT int8 or float32 file,
through the fast path of the task its `serving.json` names, or its SavedModel's `serve_text`.
The one place that maps tasks to their `litert_serving` modules (serve.py, batch_predict.py,
the examples)."""
from __future__ import annotations

import importlib
import json
import os

from bert_tf2.inference.litert_layout import (
    DESCRIPTION,
    FOLDER,
    LiteRTError,
    model_file,
    require_export,
)

RUNTIMES = ("int8", "float32", "savedmodel")
LITERT_RUNTIMES = {
    "classification": "bert_tf2.tasks.classification.litert_serving:LiteRTClassifier",
    "feature_extraction": "bert_tf2.tasks.feature_extraction.litert_serving:LiteRTEmbedder",
    "multiple_choice": "bert_tf2.tasks.multiple_choice.litert_serving:LiteRTChooser",
    "ner": "bert_tf2.tasks.ner.litert_serving:LiteRTTagger",
    "squad": "bert_tf2.tasks.squad.litert_serving:LiteRTReader",
}


def default_runtime(export_dir: str) -> str:
    """int8 where the export has it, else float32, else the SavedModel."""
    for quantization in ("int8", "float32"):
        if os.path.isfile(os.path.join(export_dir, FOLDER, model_file(quantization))):
            return quantization
    return "savedmodel"


def load_runtime(export_dir: str, runtime: str | None = None, **kwargs):
    """The runtime (`inference.runtime`) `runtime` names on `export_dir` (default:
    `default_runtime`); `kwargs` go to a LiteRT runtime's `load`."""
    require_export(export_dir)
    runtime = runtime or default_runtime(export_dir)
    if runtime == "savedmodel":
        from bert_tf2.inference.saved_model_text import SavedModelText

        return SavedModelText.load(export_dir, "serve_text")
    path = os.path.join(export_dir, FOLDER, DESCRIPTION)
    if not os.path.isfile(path):
        raise LiteRTError(f"{export_dir}: no {FOLDER}/{DESCRIPTION}; make the fast path with "
                          f"`python export_litert.py --saved_model={export_dir}`")
    with open(path, encoding="utf-8") as f:
        task = json.load(f).get("task")
    if task not in LITERT_RUNTIMES:
        raise LiteRTError(f"{export_dir}: a {task} export has no LiteRT fast path; serve its "
                          f"SavedModel")
    module, name = LITERT_RUNTIMES[task].split(":")
    return getattr(importlib.import_module(module), name).load(export_dir, runtime, **kwargs)


def token_ids_runtime(runtime):
    """What answers an export's `serve_token_ids` (the encoder's int32 inputs in, by name) beside
    `runtime`: its LiteRT model (the LiteRT file is that signature with its numeric outputs), the
    SavedModel's own signature, or None where `runtime` has neither. It has `fixed_axes` (the
    sizes between batch and length: multiple choice's choices) and `max_length` (None: any)."""
    from bert_tf2.inference.litert_runtime import LiteRTModel

    model = getattr(runtime, "model", None)
    if isinstance(model, LiteRTModel):
        return model
    signatures = getattr(model, "signatures", None)
    if signatures is not None and "serve_token_ids" in signatures:
        return _SavedModelTokenIds(signatures["serve_token_ids"])
    return None


class _SavedModelTokenIds:
    """A SavedModel's `serve_token_ids` called with NumPy arrays, answering NumPy arrays."""

    max_length = None

    def __init__(self, signature):
        self.signature = signature
        shape = signature.structured_input_signature[1]["input_word_ids"].shape
        self.fixed_axes = tuple(shape[1:-1])

    def __call__(self, **inputs) -> dict:
        import tensorflow as tf

        return {name: value.numpy() for name, value in self.signature(**{
            name: tf.constant(value, tf.int32) for name, value in inputs.items()}).items()}
