"""A SavedModel's `serve_token_ids` as a LiteRT (TFLite) file: int8 weights where that is measured
to cost nothing, and the fastest CPU path this project has.

Why: on a CPU the served SavedModel runs float32 matrix products through TensorFlow's executor,
about 3x the latency of ONNX Runtime's dynamic int8. The TFLite converter with
`Optimize.DEFAULT` stores every dense kernel as int8 (per output channel) and runs the matrix
products as int8 x int8 with each row of activations quantised on the fly ("dynamic range"),
on XNNPACK's VNNI/AVX-512 kernels; layer norms, softmax and GELU stay float32
(docs/serving.md#the-fast-path-litert-int8 has the measurements and the accuracy).

Only the token-id function goes into the file, with its batch and length left free: the
tokenizer's tensorflow_text ops have no TFLite kernels, so the text is tokenised in Python by the
original's `FullTokenizer` (`inference.litert_runtime`, the task's `litert_serving`), the same ids
the runners use. String outputs (a label name) are left out; the runtime maps ids to names.
`write` puts the file (`EXPORT_DIR/litert/int8.tflite` or `float32.tflite`) and the export's
description (`serving.json`, written at export by `engine.export.save`) in `EXPORT_DIR/litert/`,
each complete or not at all.
"""
from __future__ import annotations

import json
import logging
import os

from bert_tf2.inference.litert_layout import (
    DESCRIPTION,
    FOLDER,
    LiteRTError,
    model_file,
    read_description,
    vocab_file,
)
from bert_tf2.process.atomic_files import atomic_path

logger = logging.getLogger(__name__)

QUANTIZATIONS = ("int8", "float32")


def convert(export_dir: str, quantization: str = "int8") -> tuple:
    """`(flat buffer, outputs)`: `export_dir`'s `serve_token_ids` with its numeric outputs, batch
    and length free, int8 dense kernels with `quantization="int8"`; `outputs` maps each output
    tensor's name in the file to the signature's output name."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the serve_text ops the SavedModel holds)
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    if quantization not in QUANTIZATIONS:
        raise LiteRTError(f"--quantization={quantization}: use one of {', '.join(QUANTIZATIONS)}")
    loaded = tf.saved_model.load(export_dir)
    if "serve_token_ids" not in loaded.signatures:
        raise LiteRTError(f"{export_dir}: has no serve_token_ids signature to convert")
    signature = loaded.signatures["serve_token_ids"]
    specs = signature.structured_input_signature[1]
    numeric = sorted(name for name, spec in signature.structured_outputs.items()
                     if spec.dtype != tf.string)

    @tf.function(input_signature=[{name: tf.TensorSpec(spec.shape, spec.dtype, name=name)
                                   for name, spec in specs.items()}], autograph=False)
    def token_ids(inputs):
        outputs = signature(**inputs)
        return {name: outputs[name] for name in numeric}

    concrete = token_ids.get_concrete_function()
    frozen = convert_variables_to_constants_v2(concrete)
    outputs = {tensor.name.split(":")[0]: name  # outputs flatten in sorted key order
               for tensor, name in zip(frozen.outputs, numeric)}
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    converter.experimental_enable_resource_variables = False
    if quantization == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    try:
        flat = converter.convert()
    except Exception as e:  # the converter raises ConverterError with the MLIR diagnostics
        first = next((line for line in str(e).splitlines() if "error:" in line), str(e))
        raise LiteRTError(f"{export_dir}: serve_token_ids cannot be converted to LiteRT "
                          f"({first.strip()[:200]}); export it again with this version") \
            from None
    _check(export_dir, flat, outputs, concrete)
    return flat, outputs


def _check(export_dir: str, flat: bytes, outputs: dict, token_ids) -> None:
    """Run the file and the SavedModel on the same rows of real vocabulary ids, one padded:
    refuse a file whose outputs are not finite, and log how far apart the float outputs are."""
    import numpy as np

    from bert_tf2.inference.litert_runtime import LiteRTModel, fixed_axes

    with open(vocab_file(export_dir), encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    rng = np.random.default_rng(0)
    rows = (2, *fixed_axes(flat), 24)
    word_ids = rng.integers(min(1000, vocab_size - 1), vocab_size, rows).astype(np.int32)
    mask = np.ones(rows, np.int32)
    mask[0, ..., 16:] = 0
    inputs = {"input_word_ids": word_ids * mask, "input_mask": mask,
              "input_type_ids": np.zeros(rows, np.int32)}
    expected = {k: v.numpy() for k, v in token_ids(inputs).items()}
    got = LiteRTModel(flat, outputs, max_length=rows[-1], threads=1)(**inputs)
    for name, value in got.items():
        if value.dtype.kind == "f":
            if not np.all(np.isfinite(value)):
                raise LiteRTError(f"{export_dir}: the LiteRT file's {name} are not finite; "
                                  f"serve the SavedModel (--export_litert=none)")
            logger.info("LiteRT check: %s within %.2g of the SavedModel's", name,
                        float(np.max(np.abs(value - expected[name]))))


def write(export_dir: str, quantization: str = "int8") -> str:
    """Convert `export_dir` and write `export_dir/litert/QUANTIZATION.tflite` beside a copy of
    the export's `serving.json`; returns the file's path."""
    description = read_description(export_dir)
    flat, outputs = convert(export_dir, quantization)
    folder = os.path.join(export_dir, FOLDER)
    os.makedirs(folder, exist_ok=True)
    with atomic_path(os.path.join(folder, DESCRIPTION)) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({**description, "outputs": outputs}, f, indent=2, sort_keys=True)
    path = os.path.join(folder, model_file(quantization))
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(flat)
    logger.info("LiteRT %s model written to %s (%.1f MB)", quantization, path, len(flat) / 1e6)
    return path
