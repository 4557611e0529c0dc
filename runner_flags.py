"""Flags and logging set-up that every runner shares (pretraining and fine-tuning alike).

The training engine's flags (device strategy, TPU compatibility, precision, XLA, accumulation,
optimizer, steps per loop) mean the same in every runner, so they are defined once here. Runners
call `define_engine_flags()` when they are imported as the program; library modules never define
flags.
"""
import logging

from absl import flags


def define_engine_flags() -> None:
    # The original's TPU flags.
    flags.DEFINE_bool("use_tpu", False, "Same as --distribution_strategy=tpu.")
    flags.DEFINE_string("tpu_name", None, "TPU name or address (grpc://...).")
    flags.DEFINE_string("tpu_zone", None, "Accepted for compatibility; the TPU resolver finds it.")
    flags.DEFINE_string("gcp_project", None,
                        "Accepted for compatibility; the TPU resolver finds it.")
    flags.DEFINE_string("master", None, "Accepted for compatibility (use --tpu_name).")
    flags.DEFINE_integer("num_tpu_cores", 8,
                         "Accepted for compatibility; TPUStrategy counts cores.")
    # Beyond the original.
    flags.DEFINE_integer("steps_per_loop", None, "Alias of --iterations_per_loop.")
    flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"],
                      "AdamWeightDecay (original) or LAMB.")
    flags.DEFINE_integer("num_accumulation_steps", 1,
                         "Micro-batches per update; --train_batch_size is the whole update.")
    flags.DEFINE_enum("dtype", "float32", ["float32", "mixed_float16", "mixed_bfloat16"],
                      "Compute precision; variables, LayerNorm, softmax and losses stay float32.")
    flags.DEFINE_bool("jit_compile", False, "XLA-compile the forward and backward pass.")
    flags.DEFINE_enum("distribution_strategy", "one_device",
                      ["one_device", "mirrored", "multi_worker_mirrored", "tpu"],
                      "How to spread the work (multi_worker_mirrored reads TF_CONFIG).")


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("tensorflow", "absl"):  # TensorFlow's own INFO lines (checkpoint sharding...)
        logging.getLogger(noisy).setLevel(logging.WARNING)
