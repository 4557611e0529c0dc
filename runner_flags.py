"""The flags every runner shares, with the original's names and defaults, and their values handed on.

Runners are the only modules that define or read flags. The engine's flags (device strategy, TPU
compatibility, precision, XLA, accumulation, optimizer, steps per loop) mean the same in every
runner; the fine-tuning flags (the original run_classifier's and run_squad's) the same in every
fine-tuning runner. `finetune_settings()` and `pretrain_settings()` turn the parsed flags into the
engine's settings; `run(driver, task, settings)` calls the driver; `finetune(task)` is the
fine-tuning driver with the flags' settings. `main(program_main)` starts a runner: a user error
(bad data, config, checkpoint or setting) or a bad flag is one line, `PROGRAM: error: FILE:LINE:
...`, with exit status 1 (2 for flags and settings), the traceback too when `BERT_TRACEBACK` is set.
"""
from __future__ import annotations

import dataclasses
import logging
import types

from absl import flags

from bert_tf2.engine.build import RunSettings
from bert_tf2.engine.finetuning import FinetuneSettings
from bert_tf2.engine.pretraining import PretrainSettings
from bert_tf2.process import flag_ranges

FLAGS = flags.FLAGS


def defaults_of(settings_class, **overrides) -> types.SimpleNamespace:
    """The defaults of a settings dataclass (`FinetuneSettings`, `PretrainSettings`), whence
    every flag that sets one of its fields takes its default: each default is written once, in
    the engine. `overrides`: a runner's own defaults, the original script's (run_squad's
    max_seq_length of 384, ...)."""
    values = {field.name: field.default for field in dataclasses.fields(settings_class)
              if field.default is not dataclasses.MISSING}
    unknown = set(overrides) - set(values)
    if unknown:
        raise TypeError(f"{settings_class.__name__} has no {', '.join(sorted(unknown))}")
    return types.SimpleNamespace(**{**values, **overrides})


def define_engine_flags() -> None:
    d = defaults_of(RunSettings)
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
    flags.DEFINE_enum("optimizer", d.optimizer, ["adamw", "lamb"],
                      "AdamWeightDecay (original) or LAMB.")
    flags.DEFINE_integer("num_accumulation_steps", d.num_accumulation_steps,
                         "Micro-batches per update; --train_batch_size is the whole update.")
    flags.DEFINE_enum("dtype", d.dtype, ["float32", "mixed_float16", "mixed_bfloat16"],
                      "Compute precision; variables, LayerNorm, softmax and losses stay float32.")
    flags.DEFINE_bool("jit_compile", d.jit_compile, "XLA-compile the forward and backward pass.")
    flags.DEFINE_bool("compile_optimizer", d.compile_optimizer, "XLA-compile the optimizer's "
                      "update (one device; 2.3x faster updates on a CPU, the same math). Unset: "
                      "where the run's weights x steps reach 5e8, so that it pays for its "
                      "compile.")
    flags.DEFINE_enum("distribution_strategy", d.distribution_strategy,
                      ["one_device", "mirrored", "multi_worker_mirrored", "tpu"],
                      "How to spread the work (multi_worker_mirrored reads TF_CONFIG).")
    flag_ranges.at_least_one("num_tpu_cores", "steps_per_loop", "num_accumulation_steps")


def check_training_flags() -> None:
    """The ranges of the flags fine-tuning and pretraining share (`process.flag_ranges`)."""
    flag_ranges.at_least_one("train_batch_size", "eval_batch_size", "save_checkpoints_steps",
                             "iterations_per_loop", "num_train_steps", "keep_checkpoint_max")
    flag_ranges.check("learning_rate", 0, above=True)
    flag_ranges.check("num_warmup_steps", 0)
    flag_ranges.check("random_seed", 0, 2**31 - 1)


def define_finetuning_flags(**overrides) -> None:
    """The fine-tuning flags, with `FinetuneSettings`' defaults but for `overrides`, the runner's
    own (`defaults_of`)."""
    d = defaults_of(FinetuneSettings, **overrides)
    # The original's flags.
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model "
                        "(optional when --init_checkpoint has its config beside it).")
    flags.DEFINE_string("vocab_file", None, "vocab.txt the model was trained with (default: "
                        "the one beside --init_checkpoint).")
    flags.DEFINE_string("output_dir", None, "Features, checkpoints, results and summaries.")
    flags.DEFINE_string("init_checkpoint", None, "Pretrained weights: a TF1 checkpoint, a Hugging "
                        "Face model.safetensors (or its folder), a .keras file, or a checkpoint "
                        "of this project's runners.")
    flags.DEFINE_bool("do_lower_case", d.do_lower_case, "Lower-case the input (uncased models).")
    flags.DEFINE_integer("max_seq_length", d.max_seq_length, "Maximum WordPiece tokens per "
                         "example.")
    flags.DEFINE_bool("do_train", d.do_train, "Fine-tune on the training split.")
    flags.DEFINE_bool("do_eval", d.do_eval, "Evaluate on the dev split (during and after "
                      "training).")
    flags.DEFINE_bool("do_predict", d.do_predict, "Predict the test split.")
    flags.DEFINE_integer("train_batch_size", d.train_batch_size, "Global batch size of one update.")
    flags.DEFINE_integer("eval_batch_size", d.eval_batch_size, "Batch size for evaluation.")
    flags.DEFINE_integer("predict_batch_size", d.predict_batch_size, "Batch size for prediction.")
    flags.DEFINE_float("learning_rate", d.learning_rate, "Peak learning rate of AdamWeightDecay.")
    flags.DEFINE_float("num_train_epochs", d.num_train_epochs, "Epochs of fine-tuning.")
    flags.DEFINE_float("warmup_proportion", d.warmup_proportion, "Share of the steps with linear "
                       "warmup.")
    flags.DEFINE_integer("save_checkpoints_steps", d.save_checkpoints_steps, "Checkpoint every "
                         "this many steps.")
    flags.DEFINE_integer("iterations_per_loop", d.steps_per_loop, "Steps per host loop and "
                         "progress line (the original's name; its default was 1000, for TPUs).")
    # Also in the original's pretraining runner; given explicitly they override the epochs.
    flags.DEFINE_integer("num_train_steps", d.num_train_steps, "Updates (default: from the "
                         "epochs).")
    flags.DEFINE_integer("num_warmup_steps", d.num_warmup_steps, "Warmup updates (default: from "
                         "the proportion).")
    # Beyond the original (and the engine's flags, shared with run_pretraining.py).
    define_engine_flags()
    flags.DEFINE_integer("eval_every_steps", d.eval_every_steps, "Evaluate every this many steps "
                         "during training (0: at the end of every epoch).")
    flags.DEFINE_bool("use_best_checkpoint", d.use_best_checkpoint, "Predict and export with the "
                      "weights that scored best on the dev split (in output_dir/best/), not the "
                      "last ones.")
    flags.DEFINE_string("export_dir", d.export_dir, "Write a SavedModel for serving here.")
    flags.DEFINE_enum("export_litert", d.export_litert, ["int8", "float32", "none"],
                      "With --export_dir, also write the fast CPU path, a LiteRT file of the "
                      "model with int8 (or float32) dense kernels, in EXPORT_DIR/litert/ "
                      "(every task; docs/serving.md).")
    flags.DEFINE_string("export_keras_hub", d.export_keras_hub, "Also write the kept weights as a "
                        "KerasHub preset folder here (a classifier as BertTextClassifier, any "
                        "other task's encoder as BertBackbone; needs keras-hub).")
    flags.DEFINE_bool("keras_hub_approximate_gelu", d.keras_hub_approximate_gelu, "With "
                      "--export_keras_hub, export a model with the exact GELU (gelu_exact) "
                      "anyway: KerasHub computes the tanh approximation (outputs move by up to "
                      "about 5e-3 on MiniLM).")
    flags.DEFINE_integer("keep_checkpoint_max", d.keep_checkpoint_max, "Training checkpoints to "
                         "keep (for resuming).")
    flags.DEFINE_bool("trim_padding", d.trim_padding, "Cut each batch to its longest example (same "
                      "outputs, faster); off: every batch is max_seq_length wide, as the original.")
    flags.DEFINE_bool("bucket_by_length", d.bucket_by_length, "With --trim_padding, batch "
                      "examples of similar length together (sorted within windows of 50 shuffled "
                      "batches; seeded), so that batches hold little padding.")
    flags.DEFINE_bool("pack_examples", d.pack_examples, "Training: pack several examples into each "
                      "max_seq_length row (attention kept within each example), so that no "
                      "padding is computed; classification only.")
    flags.DEFINE_integer("random_seed", d.random_seed, "Seed of the head's initialisation, "
                         "dropout and the order of training examples.")
    check_training_flags()
    flag_ranges.check("max_seq_length", 3, why="[CLS], a token and [SEP]")
    flag_ranges.at_least_one("predict_batch_size")
    flag_ranges.check("num_train_epochs", 0, above=True)
    flag_ranges.check("warmup_proportion", 0, 1)
    flag_ranges.check("eval_every_steps", 0, why="0: at the end of every epoch")


def define_data_file_flags(train: str, evaluation: str, prediction: str) -> None:
    """`--data_dir` and the three files it holds by default, each of which can be given alone;
    the arguments name those defaults for the help text."""
    flags.DEFINE_string("data_dir", None, f"Folder of {train}, {evaluation} and {prediction}; "
                        f"each file can also be given on its own.")
    flags.DEFINE_string("train_file", None, f"Training data (default: DATA_DIR/{train}).")
    flags.DEFINE_string("eval_file", None, f"Data scored during and after training (default: "
                        f"DATA_DIR/{evaluation}).")
    flags.DEFINE_string("predict_file", None, f"Data for --do_predict (default: "
                        f"DATA_DIR/{prediction}); scored when it has labels.")


def _engine_values() -> dict:
    return {"output_dir": FLAGS.output_dir, "bert_config_file": FLAGS.bert_config_file,
            "init_checkpoint": FLAGS.init_checkpoint, "vocab_file": FLAGS.vocab_file,
            "train_batch_size": FLAGS.train_batch_size, "eval_batch_size": FLAGS.eval_batch_size,
            "learning_rate": FLAGS.learning_rate, "num_train_steps": FLAGS.num_train_steps,
            "num_warmup_steps": FLAGS.num_warmup_steps,
            "save_checkpoints_steps": FLAGS.save_checkpoints_steps,
            "keep_checkpoint_max": FLAGS.keep_checkpoint_max,
            "steps_per_loop": FLAGS.steps_per_loop or FLAGS.iterations_per_loop,
            "optimizer": FLAGS.optimizer, "num_accumulation_steps": FLAGS.num_accumulation_steps,
            "dtype": FLAGS.dtype, "jit_compile": FLAGS.jit_compile,
            "compile_optimizer": FLAGS.compile_optimizer,
            "distribution_strategy": "tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy,
            "tpu_address": FLAGS.tpu_name, "random_seed": FLAGS.random_seed}


def finetune_settings(best_metric: str | None = None):
    """The fine-tuning flags as `engine.finetuning.FinetuneSettings`."""
    return FinetuneSettings(
        **_engine_values(), max_seq_length=FLAGS.max_seq_length,
        do_lower_case=FLAGS.do_lower_case, do_train=FLAGS.do_train, do_eval=FLAGS.do_eval,
        do_predict=FLAGS.do_predict, export_dir=FLAGS.export_dir,
        export_litert=FLAGS.export_litert, export_keras_hub=FLAGS.export_keras_hub,
        keras_hub_approximate_gelu=FLAGS.keras_hub_approximate_gelu,
        predict_batch_size=FLAGS.predict_batch_size, num_train_epochs=FLAGS.num_train_epochs,
        warmup_proportion=FLAGS.warmup_proportion, eval_every_steps=FLAGS.eval_every_steps,
        use_best_checkpoint=FLAGS.use_best_checkpoint, trim_padding=FLAGS.trim_padding,
        bucket_by_length=FLAGS.bucket_by_length, pack_examples=FLAGS.pack_examples,
        best_metric=best_metric)


def pretrain_settings():
    """run_pretraining's flags as `engine.pretraining.PretrainSettings`."""
    return PretrainSettings(**_engine_values(), do_train=FLAGS.do_train, do_eval=FLAGS.do_eval,
                            max_eval_steps=FLAGS.max_eval_steps,
                            hidden_dropout_prob=FLAGS.hidden_dropout_prob,
                            attention_probs_dropout_prob=FLAGS.attention_probs_dropout_prob,
                            train_budget_minutes=FLAGS.train_budget_minutes,
                            warmup_proportion=FLAGS.warmup_proportion,
                            warmup_start_fraction=FLAGS.warmup_start_fraction,
                            batch_size_ramp=FLAGS.batch_size_ramp)


def finetune(task, best_metric: str | None = None) -> None:
    """Run the fine-tuning driver on `task` with the fine-tuning flags' settings."""
    from bert_tf2.engine.finetuning import finetune as driver

    run(driver, task, finetune_settings(best_metric))


def run(driver, task, settings) -> None:
    """`driver(task, settings)` with the runners' logging; its user errors (`SettingsError`,
    `DataError`, ...) reach `main()`, which prints them as one line (`process.errors`)."""
    setup_logging()
    driver(task, settings)


def main(program_main) -> None:
    """A runner's entry point: absl's `app.run` with one-line user and flag errors."""
    from bert_tf2.process.errors import run_main

    run_main(program_main)


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("tensorflow", "absl", "jax"):  # TensorFlow's own INFO lines (checkpoint sharding...)
        logging.getLogger(noisy).setLevel(logging.WARNING)
