"""What extraction computes from the encoder: chosen hidden layers per token, or one pooled vector.

`extraction_model(encoder, layers=[-1, -2, -3, -4])` is a functional Keras model with the
encoder's named inputs and a dict output `layer_output_J` for the J-th requested layer, indexed as
the original's `get_all_encoder_layers()[i]` (the transformer blocks' outputs; -1 is the last).
`extraction_model(encoder, pooling="mean", normalize=True)` outputs `embedding`: the mean of the
last layer over real tokens (the mask), as sentence-transformers pools, or the `[CLS]` vector,
optionally L2-normalised. `pool` is written once, in `keras.ops`, and serves the batch tool and the
exported SavedModel alike.
"""
from __future__ import annotations

import keras
from keras import ops

from bert_tf2.modeling.encoder import encoder_inputs

POOLINGS = ("cls", "mean")


def check_layers(layers: list, num_layers: int) -> list:
    """The requested layer indexes, each within -L..L-1 (a ValueError names the first outside)."""
    for index in layers:
        if not -num_layers <= index < num_layers:
            raise ValueError(f"layer {index} is outside the model's {num_layers} layers "
                             f"(indexes {-num_layers}..{num_layers - 1})")
    return list(layers)


def pool(sequence_output, input_mask, pooling: str, normalize: bool = False):
    """[batch, length, hidden] -> [batch, hidden]: `cls` (the first token) or `mean` (over the
    positions where `input_mask` is 1; sentence-transformers' clamp of the count at 1e-9), then
    optionally divided by its L2 norm (clamped at 1e-12, as torch's `normalize`)."""
    sequence_output = ops.cast(sequence_output, "float32")
    if pooling == "cls":
        pooled = sequence_output[:, 0]
    elif pooling == "mean":
        mask = ops.expand_dims(ops.cast(input_mask, "float32"), -1)
        pooled = ops.sum(sequence_output * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1e-9)
    else:
        raise ValueError(f"unknown pooling {pooling!r}; one of {', '.join(POOLINGS)}")
    return l2_normalized(pooled) if normalize else pooled


def l2_normalized(vectors):
    """Each row divided by its L2 norm, clamped at 1e-12 (torch's `normalize`)."""
    norm = ops.sqrt(ops.sum(ops.square(vectors), axis=-1, keepdims=True))
    return vectors / ops.maximum(norm, 1e-12)


def extraction_model(encoder, layers=(-1, -2, -3, -4), pooling: str | None = None,
                     normalize: bool = False) -> keras.Model:
    """The encoder's inputs -> `layer_output_J` per requested layer, or `embedding` (pooled)."""
    inputs = encoder_inputs()
    outputs = encoder(inputs)
    if pooling:
        result = {"embedding": pool(outputs["sequence_output"], inputs["input_mask"], pooling,
                                    normalize)}
    else:
        all_layers = outputs["encoder_outputs"]
        check_layers(layers, len(all_layers))
        result = {f"layer_output_{j}": ops.cast(all_layers[index], "float32")
                  for j, index in enumerate(layers)}
    return keras.Model(inputs, result, name="feature_extractor")
