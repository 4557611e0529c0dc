"""Where an export keeps what the fast path reads, and the one-line refusals when it is not there.

`EXPORT_DIR/assets.extra/serving.json` (the export's description, written by
`engine.export.save`) and `vocab.txt`; `EXPORT_DIR/litert/` holds the LiteRT files
(`int8.tflite`, `float32.tflite`) beside a copy of the description. Shared by the converter
(`engine.litert`, with TensorFlow) and the runtime (`inference.litert_runtime`, without).
"""
from __future__ import annotations

import json
import os

from bert_tf2.process.errors import UserError

FOLDER = "litert"
DESCRIPTION = "serving.json"  # in the SavedModel's assets.extra/ and beside the LiteRT file


class LiteRTError(UserError):
    """An export that cannot become a LiteRT file (one line: which export, what to do)."""


def model_file(quantization: str) -> str:
    return f"{quantization}.tflite"


def vocab_file(export_dir: str) -> str:
    return os.path.join(export_dir, "assets.extra", "vocab.txt")


def require_export(export_dir: str) -> None:
    """A one-line refusal of a folder that is not a runner's export (a run's output_dir, say)."""
    if not os.path.isfile(os.path.join(export_dir, "saved_model.pb")):
        raise LiteRTError(f"{export_dir}: not a SavedModel (no saved_model.pb), so not an "
                          f"export; give the folder a runner's --export_dir wrote")


def refuse_windows(export_dir: str, description: dict) -> None:
    """A classifier or an embedder exported with `--doc_stride` reads a long text in windows
    inside its graph; the LiteRT file holds one window's model, so such an export has no fast
    path (a one-line refusal)."""
    if description.get("doc_stride"):
        raise LiteRTError(f"{export_dir}: exported with --doc_stride (windows of long texts), "
                          f"which the LiteRT path does not cut; serve its SavedModel "
                          f"(serve_text)")


def read_description(export_dir: str) -> dict:
    require_export(export_dir)
    path = os.path.join(export_dir, "assets.extra", DESCRIPTION)
    if not os.path.isfile(path):
        raise LiteRTError(f"{export_dir}: no assets.extra/{DESCRIPTION} (an export from an "
                          f"earlier version); export it again with the runner's --export_dir")
    with open(path, encoding="utf-8") as f:
        return json.load(f)
