"""The command-line flags every fine-tuning runner shares, with the original's names and defaults.

`define_flags()` is called by a runner at import (it is the program); library modules never define
flags. `options(...)` turns the parsed flags and the training-set size into
`modeling.finetuning.FinetuneOptions`, with the original's step arithmetic:
`num_train_steps = int(examples / train_batch_size * num_train_epochs)` and
`num_warmup_steps = int(num_train_steps * warmup_proportion)`, unless given explicitly.
"""
from __future__ import annotations

from absl import app, flags

import runner_flags

FLAGS = flags.FLAGS


def define_flags(max_seq_length: int = 128, learning_rate: float = 5e-5,
                 num_train_epochs: float = 3.0, predict_batch_size: int = 8) -> None:
    # The original's flags.
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model "
                        "(optional when --init_checkpoint has its config beside it).")
    flags.DEFINE_string("vocab_file", None, "vocab.txt the model was trained with (default: "
                        "the one beside --init_checkpoint).")
    flags.DEFINE_string("output_dir", None, "Features, checkpoints, results and summaries.")
    flags.DEFINE_string("init_checkpoint", None, "Pretrained weights: a TF1 checkpoint, a Hugging "
                        "Face model.safetensors (or its folder), a .keras file, or a checkpoint "
                        "of this project's runners.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (uncased models).")
    flags.DEFINE_integer("max_seq_length", max_seq_length, "Maximum WordPiece tokens per example.")
    flags.DEFINE_bool("do_train", False, "Fine-tune on the training split.")
    flags.DEFINE_bool("do_eval", False, "Evaluate on the dev split (during and after training).")
    flags.DEFINE_bool("do_predict", False, "Predict the test split.")
    flags.DEFINE_integer("train_batch_size", 32, "Global batch size of one update.")
    flags.DEFINE_integer("eval_batch_size", 8, "Batch size for evaluation.")
    flags.DEFINE_integer("predict_batch_size", predict_batch_size, "Batch size for prediction.")
    flags.DEFINE_float("learning_rate", learning_rate, "Peak learning rate of AdamWeightDecay.")
    flags.DEFINE_float("num_train_epochs", num_train_epochs, "Epochs of fine-tuning.")
    flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with linear warmup.")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps.")
    flags.DEFINE_integer("iterations_per_loop", 100, "Steps per host loop and progress line "
                         "(the original's name; its default was 1000, for TPUs).")
    # Also in the original's pretraining runner; given explicitly they override the epochs.
    flags.DEFINE_integer("num_train_steps", None, "Updates (default: from the epochs).")
    flags.DEFINE_integer("num_warmup_steps", None, "Warmup updates (default: from the proportion).")
    # Beyond the original (and the engine's flags, shared with run_pretraining.py).
    runner_flags.define_engine_flags()
    flags.DEFINE_integer("eval_every_steps", 0, "Evaluate every this many steps during training "
                         "(0: at the end of every epoch).")
    flags.DEFINE_bool("use_best_checkpoint", True, "Predict and export with the weights that "
                      "scored best on the dev split (in output_dir/best/), not the last ones.")
    flags.DEFINE_string("export_dir", None, "Write a SavedModel for serving here.")
    flags.DEFINE_integer("keep_checkpoint_max", 1, "Training checkpoints to keep (for resuming).")
    flags.DEFINE_bool("trim_padding", True, "Cut each batch to its longest example (same "
                      "outputs, faster); off: every batch is max_seq_length wide, as the original.")
    flags.DEFINE_integer("random_seed", 12345, "Seed of the head's initialisation, dropout and "
                         "the order of training examples.")


def check_common() -> None:
    """Usage errors shared by the runners, before anything slow happens."""
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required")
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or FLAGS.export_dir):
        raise app.UsageError("nothing to do: set --do_train, --do_eval, --do_predict or "
                             "--export_dir")
    if (FLAGS.do_train or not FLAGS.init_checkpoint) and not (
            FLAGS.init_checkpoint or FLAGS.bert_config_file):
        raise app.UsageError("--bert_config_file or --init_checkpoint is required")


def options(num_train_examples: int | None, replicas: int = 1):
    """`FinetuneOptions` from the flags for a training set of `num_train_examples` (None: no
    training, so no step arithmetic) on `replicas` replicas."""
    from modeling.finetuning import FinetuneOptions

    per_replica = FLAGS.train_batch_size // replicas
    if FLAGS.train_batch_size % replicas or per_replica % FLAGS.num_accumulation_steps:
        raise app.UsageError(f"--train_batch_size={FLAGS.train_batch_size} does not split into "
                             f"{replicas} replica(s) x --num_accumulation_steps="
                             f"{FLAGS.num_accumulation_steps} equal micro-batches")
    num_train_steps, num_warmup_steps, steps_per_epoch = 1, 0, 0.0
    if num_train_examples is not None:
        steps_per_epoch = num_train_examples / FLAGS.train_batch_size
        num_train_steps = FLAGS.num_train_steps or int(
            num_train_examples / FLAGS.train_batch_size * FLAGS.num_train_epochs)
        if num_train_steps < 1:
            raise app.UsageError(f"{num_train_examples} training examples at batch "
                                 f"{FLAGS.train_batch_size} for {FLAGS.num_train_epochs} epochs "
                                 f"make no training step")
        num_warmup_steps = (FLAGS.num_warmup_steps if FLAGS.num_warmup_steps is not None
                            else int(num_train_steps * FLAGS.warmup_proportion))
    return FinetuneOptions(
        output_dir=FLAGS.output_dir, learning_rate=FLAGS.learning_rate,
        num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
        train_batch_size=FLAGS.train_batch_size, steps_per_epoch=steps_per_epoch,
        eval_every_steps=FLAGS.eval_every_steps, init_checkpoint=FLAGS.init_checkpoint,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max,
        steps_per_loop=FLAGS.steps_per_loop or FLAGS.iterations_per_loop,
        optimizer=FLAGS.optimizer, num_accumulation_steps=FLAGS.num_accumulation_steps,
        jit_compile=FLAGS.jit_compile, dtype=FLAGS.dtype)


def strategy():
    from modeling.distribution import get_strategy

    return get_strategy("tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy, FLAGS.tpu_name)


def model_files():
    """(BertConfig, vocab path) from --bert_config_file / --vocab_file, else from the files
    beside --init_checkpoint."""
    import os

    from modeling import checkpoints
    from modeling.config import BertConfig

    if FLAGS.bert_config_file:
        config = BertConfig.from_json_file(FLAGS.bert_config_file)
    else:
        config = checkpoints.read_config(FLAGS.init_checkpoint)
    vocab = FLAGS.vocab_file
    if not vocab and FLAGS.init_checkpoint:
        path = FLAGS.init_checkpoint
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        candidate = os.path.join(folder, checkpoints.VOCAB)
        vocab = candidate if os.path.isfile(candidate) else None
    if not vocab:
        raise app.UsageError("--vocab_file is required (no vocab.txt beside --init_checkpoint)")
    if not os.path.isfile(vocab):
        raise app.UsageError(f"--vocab_file {vocab}: no such file")
    return config, vocab
