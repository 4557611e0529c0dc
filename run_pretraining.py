"""BERT pretraining (masked LM + next sentence) on the records of `create_pretraining_data`.

The original's flags and defaults, plus: --optimizer=adamw|lamb, --num_accumulation_steps,
--dtype, --jit_compile, --distribution_strategy, --steps_per_loop (alias of --iterations_per_loop),
--dynamic_masking, --keep_checkpoint_max. A restarted run resumes from the newest checkpoint in
--output_dir by itself. At the end the model is also written as a Google TF1 checkpoint in
`output_dir/tf1/` (bert_config.json, bert_model.ckpt.*), which fine-tuning and the original's tools
load.

    python run_pretraining.py --input_file=out/records/*.tfrecord --output_dir=out/pretrain \
        --bert_config_file=bert_config.json --do_train --do_eval --num_train_steps=10000
"""
from __future__ import annotations

import glob
import logging
import os

from absl import app, flags

import runner_flags

from modeling import environment  # noqa: F401  (before TensorFlow)

FLAGS = flags.FLAGS

# The original's flags.
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model to train.")
flags.DEFINE_string("input_file", None, "Input TFRecord files: comma-separated globs.")
flags.DEFINE_string("output_dir", None, "Checkpoints, summaries and eval results go here.")
flags.DEFINE_string("init_checkpoint", None,
                    "Start from these weights: a TF1 checkpoint, a Hugging Face model.safetensors, "
                    "a .keras file, or a checkpoint of this runner (phase 2 from phase 1).")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the records.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per record.")
flags.DEFINE_bool("do_train", False, "Train.")
flags.DEFINE_bool("do_eval", False, "Evaluate on --input_file and write eval_results.txt.")
flags.DEFINE_integer("train_batch_size", 32, "Global batch size of one update.")
flags.DEFINE_integer("eval_batch_size", 8, "Global batch size for evaluation.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_integer("num_train_steps", 100000, "Number of updates.")
flags.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup updates.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many updates.")
flags.DEFINE_integer("iterations_per_loop", 1000, "Updates per host loop (the original's name).")
flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval batches.")

# Beyond the original (and the engine's flags, shared with the fine-tuning runners).
runner_flags.define_engine_flags()
flags.DEFINE_bool("dynamic_masking", False, "Mask afresh at input time instead of the records' "
                  "static masks (needs --vocab_file).")
flags.DEFINE_string("vocab_file", None, "vocab.txt: needed by --dynamic_masking; copied to "
                    "the TF1 export.")
flags.DEFINE_float("masked_lm_prob", 0.15, "--dynamic_masking: share of tokens masked.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "How many checkpoints to keep.")
flags.DEFINE_integer("random_seed", 12345, "Seed of initialisation, dropout and input order.")

logger = logging.getLogger("run_pretraining")


def input_files(pattern: str) -> list:
    files = []
    for part in pattern.split(","):
        matched = sorted(glob.glob(part.strip()))
        if not matched:
            raise ValueError(f"--input_file: no file matches {part.strip()!r}")
        files.extend(matched)
    return files


def dataset_fn(files, global_batch: int, is_training: bool, dynamic_mask_args=None):
    """A function of the input context, as `Trainer` wants it."""
    from data_gen.dynamic_masking import with_dynamic_masking
    from data_gen.pretraining_dataset import pretraining_dataset

    def make(context):
        batch = context.get_per_replica_batch_size(global_batch) if context else global_batch
        dataset = pretraining_dataset(files, batch, FLAGS.max_seq_length,
                                      FLAGS.max_predictions_per_seq, is_training,
                                      seed=FLAGS.random_seed, input_context=context)
        if dynamic_mask_args:
            dataset = with_dynamic_masking(dataset, FLAGS.random_seed, **dynamic_mask_args)
        return dataset
    return make


def dynamic_mask_args(config):
    if not FLAGS.dynamic_masking:
        return None
    if not FLAGS.vocab_file:
        raise ValueError("--dynamic_masking needs --vocab_file (for the [MASK], [CLS], [SEP] ids)")
    from data_gen.tokenization import load_vocab
    vocab = load_vocab(FLAGS.vocab_file)
    missing = [t for t in ("[MASK]", "[CLS]", "[SEP]") if t not in vocab]
    if missing:
        raise ValueError(f"--vocab_file {FLAGS.vocab_file}: no {', '.join(missing)}")
    return {"vocab_size": config.vocab_size, "mask_id": vocab["[MASK]"],
            "cls_id": vocab["[CLS]"], "sep_id": vocab["[SEP]"],
            "masked_lm_prob": FLAGS.masked_lm_prob}


def build(config, strategy, steps: int):
    import keras

    from modeling import checkpoints
    from modeling.encoder import BertEncoder
    from modeling.models import BertPretrainer
    from modeling.optimization import create_optimizer

    with strategy.scope():
        model = BertPretrainer(BertEncoder(config),
                               max_predictions_per_seq=FLAGS.max_predictions_per_seq)
        optimizer = create_optimizer(FLAGS.learning_rate, steps, FLAGS.num_warmup_steps,
                                     FLAGS.optimizer)
        if FLAGS.dtype == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        if FLAGS.init_checkpoint:
            checkpoints.load_initial_weights(model, FLAGS.init_checkpoint, allow_new_heads=True)
    return model, optimizer


def main(argv):
    del argv
    import keras

    from modeling import checkpoints, convert
    from modeling.config import BertConfig
    from modeling.distribution import get_strategy, set_precision
    from modeling.pretraining_task import PretrainingTask
    from modeling.training import Trainer, TrainerConfig, write_eval_results

    runner_flags.setup_logging()
    for name in ("bert_config_file", "input_file", "output_dir"):
        if not FLAGS[name].value:
            raise app.UsageError(f"--{name} is required")
    if not (FLAGS.do_train or FLAGS.do_eval):
        raise app.UsageError("at least one of --do_train or --do_eval must be set")
    if FLAGS.train_batch_size % FLAGS.num_accumulation_steps:
        raise app.UsageError(f"--train_batch_size={FLAGS.train_batch_size} is not a multiple of "
                             f"--num_accumulation_steps={FLAGS.num_accumulation_steps}")
    strategy_name = "tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy
    steps_per_loop = FLAGS.steps_per_loop or FLAGS.iterations_per_loop

    keras.utils.set_random_seed(FLAGS.random_seed)
    set_precision(FLAGS.dtype)
    config = BertConfig.from_json_file(FLAGS.bert_config_file)
    files = input_files(FLAGS.input_file)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    strategy = get_strategy(strategy_name, FLAGS.tpu_name)
    logger.info("%d input files, %s on %d replica(s), dtype %s", len(files), strategy_name,
                strategy.num_replicas_in_sync, FLAGS.dtype)
    model, optimizer = build(config, strategy, FLAGS.num_train_steps)
    trainer = Trainer(model, optimizer, PretrainingTask(), strategy, TrainerConfig(
        output_dir=FLAGS.output_dir, num_train_steps=FLAGS.num_train_steps,
        steps_per_loop=steps_per_loop, save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max,
        num_accumulation_steps=FLAGS.num_accumulation_steps, jit_compile=FLAGS.jit_compile,
        examples_per_step=FLAGS.train_batch_size))
    masking = dynamic_mask_args(config)

    if FLAGS.do_train:
        # Each dataset element holds the micro-batches of one update.
        trainer.train(dataset_fn(files, FLAGS.train_batch_size, True, masking))
        export = os.path.join(FLAGS.output_dir, "tf1")
        convert.save_any(model, export, "tf1", global_step=trainer.global_step)
        if FLAGS.vocab_file:
            checkpoints.copy_vocab(FLAGS.vocab_file, export)
        logger.info("TF1 checkpoint of the trained model: %s", export)
    elif not trainer.restore_latest() and not FLAGS.init_checkpoint:
        raise app.UsageError(f"--do_eval without --do_train: no checkpoint in "
                             f"{FLAGS.output_dir} and no --init_checkpoint")

    if FLAGS.do_eval:
        results = trainer.evaluate(dataset_fn(files, FLAGS.eval_batch_size, False, masking),
                                   max_steps=FLAGS.max_eval_steps)
        results["global_step"] = trainer.global_step
        path = os.path.join(FLAGS.output_dir, "eval_results.txt")
        write_eval_results(path, results)
        logger.info("eval results (%s): %s", path,
                    ", ".join(f"{k} = {v:.4g}" for k, v in sorted(results.items())))


def console_main():
    app.run(main)


if __name__ == "__main__":
    console_main()
