"""What answers a served export's requests: its LiteRT file (int8 or float32, without TensorFlow)
or its SavedModel's `serve_text`, behind one interface.

`load(export_dir, runtime)` gives a `Runtime`: `inputs` (the text signature's input names),
`takes_list` (the inputs that take a list of texts per row: multiple choice's `choices`), and
`runtime(rows)` (rows of `{input: text}` -> `{output: array over the rows}`), the same outputs as
`batch_predict.py` writes for the same runtime. `runtime=None` takes int8 where the export has it,
else float32, else the SavedModel.
"""
from __future__ import annotations

import os

from bert_tf2.engine.litert_layout import FOLDER, model_file, require_export

RUNTIMES = ("int8", "float32", "savedmodel")
WARM_BATCHES = (1, 2, 4, 8)  # the batch sizes run before the server is ready


def default_runtime(export_dir: str) -> str:
    for quantization in ("int8", "float32"):
        if os.path.isfile(os.path.join(export_dir, FOLDER, model_file(quantization))):
            return quantization
    return "savedmodel"


class Runtime:
    def __init__(self, predictor, name: str):
        self.predictor, self.name = predictor, name
        self.inputs = predictor.inputs
        self.takes_list = predictor.takes_list

    def __call__(self, rows: list) -> dict:
        return self.predictor.predict(rows)

    def warm_up(self) -> dict:
        """Run what requests will need now (the LiteRT interpreter at its largest shape, 8 rows;
        the SavedModel traced at batch 1, 2, 4 and 8), and return one row's outputs (what the
        metadata describes)."""
        row = {name: ["warm up"] * 2 if self.takes_list[name] else "warm up"
               for name in self.inputs}
        warm = getattr(self.predictor.signature, "warm_up", None)
        if warm is not None:
            warm(WARM_BATCHES)
        else:  # the SavedModel: trace the batch sizes of the warm-up once
            for batch in WARM_BATCHES:
                self([row] * batch)
        outputs = self([row])
        return {name: value[0] for name, value in outputs.items()}


def load(export_dir: str, runtime: str | None = None) -> Runtime:
    from bert_tf2.engine.saved_model_predict import LiteRTPredictor, SavedModelPredictor
    from bert_tf2.tasks.litert_runtimes import load_runtime

    require_export(export_dir)
    runtime = runtime or default_runtime(export_dir)
    if runtime == "savedmodel":
        predictor = SavedModelPredictor(export_dir, "serve_text")
    else:
        predictor = LiteRTPredictor(load_runtime, export_dir, runtime)
    return Runtime(predictor.load(), runtime)
