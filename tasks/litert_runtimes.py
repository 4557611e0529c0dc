"""Which fast-path runtime serves an export's LiteRT file, by the task its `serving.json` names:
the one place that maps tasks to their `litert_serving` modules (batch_predict.py, examples)."""
from __future__ import annotations

import importlib
import json
import os

from bert_tf2.engine.litert_layout import DESCRIPTION, FOLDER, LiteRTError, require_export

RUNTIMES = {
    "classification": "bert_tf2.tasks.classification.litert_serving:LiteRTClassifier",
    "feature_extraction": "bert_tf2.tasks.feature_extraction.litert_serving:LiteRTEmbedder",
    "multiple_choice": "bert_tf2.tasks.multiple_choice.litert_serving:LiteRTChooser",
    "ner": "bert_tf2.tasks.ner.litert_serving:LiteRTTagger",
    "squad": "bert_tf2.tasks.squad.litert_serving:LiteRTReader",
}


def load_runtime(export_dir: str, quantization: str | None = None, **kwargs):
    """The task's runtime on `export_dir/litert/` (int8 by default, else float32)."""
    require_export(export_dir)
    path = os.path.join(export_dir, FOLDER, DESCRIPTION)
    if not os.path.isfile(path):
        raise LiteRTError(f"{export_dir}: no {FOLDER}/{DESCRIPTION}; make the fast path with "
                          f"`python export_litert.py --saved_model={export_dir}`")
    with open(path, encoding="utf-8") as f:
        task = json.load(f).get("task")
    if task not in RUNTIMES:
        raise LiteRTError(f"{export_dir}: a {task} export has no LiteRT fast path; serve its "
                          f"SavedModel")
    module, name = RUNTIMES[task].split(":")
    return getattr(importlib.import_module(module), name).load(export_dir, quantization, **kwargs)
