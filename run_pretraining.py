"""BERT pretraining (masked LM + next sentence) on the records of `create_pretraining_data`.

The original's flags and defaults, plus: --optimizer=adamw|lamb, --num_accumulation_steps,
--dtype, --jit_compile, --distribution_strategy, --steps_per_loop (alias of --iterations_per_loop),
--dynamic_masking, --keep_checkpoint_max, and pretraining on a budget (--recipe=budget,
--train_budget_minutes, --batch_size_ramp, --no_nsp, the dropout overrides). A restarted run
resumes from the newest checkpoint in --output_dir by itself. At the end the model is also written
as a Google TF1 checkpoint in `output_dir/tf1/` (bert_config.json, bert_model.ckpt.*), which
fine-tuning and the original's tools load. The task lives in `tasks/pretraining/`; `engine.pretraining.pretrain` runs it.

    python run_pretraining.py --input_file=out/records/*.tfrecord --output_dir=out/pretrain \
        --bert_config_file=bert_config.json --do_train --do_eval --num_train_steps=10000
"""
from __future__ import annotations

from absl import app, flags

from bert_tf2 import runner_flags
from bert_tf2.engine.pretraining import BUDGET_ONLY, pretrain
from bert_tf2.process import flag_ranges

FLAGS = flags.FLAGS
# The defaults of the flags that set PretrainSettings' fields are its own (the original's).
D = runner_flags.defaults_of(runner_flags.PretrainSettings)

# The original's flags.
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model to train (default, "
                    "with --init_checkpoint: the config beside it).")
flags.DEFINE_string("input_file", None, "Input TFRecord files: comma-separated globs.")
flags.DEFINE_string("output_dir", None, "Checkpoints, summaries and eval results go here.")
flags.DEFINE_string("init_checkpoint", None,
                    "Start from these weights: a TF1 checkpoint, a Hugging Face model.safetensors, "
                    "a .keras file, or a checkpoint of this runner (phase 2 from phase 1).")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the records.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per record.")
flags.DEFINE_bool("do_train", D.do_train, "Train.")
flags.DEFINE_bool("do_eval", D.do_eval, "Evaluate on --input_file and write eval_results.txt.")
flags.DEFINE_integer("train_batch_size", D.train_batch_size, "Global batch size of one update.")
flags.DEFINE_integer("eval_batch_size", D.eval_batch_size, "Global batch size for evaluation.")
flags.DEFINE_float("learning_rate", D.learning_rate, "Peak learning rate.")
flags.DEFINE_integer("num_train_steps", D.num_train_steps, "Number of updates.")
flags.DEFINE_integer("num_warmup_steps", D.num_warmup_steps, "Linear warmup updates.")
flags.DEFINE_integer("save_checkpoints_steps", D.save_checkpoints_steps,
                     "Checkpoint every this many updates.")
flags.DEFINE_integer("iterations_per_loop", D.steps_per_loop,
                     "Updates per host loop (the original's name).")
flags.DEFINE_integer("max_eval_steps", D.max_eval_steps, "Maximum number of eval batches.")

# Beyond the original (and the engine's flags, shared with the fine-tuning runners).
runner_flags.define_engine_flags()
flags.DEFINE_bool("dynamic_masking", False, "Mask afresh at input time instead of the records' "
                  "static masks (needs --vocab_file).")
flags.DEFINE_string("vocab_file", None, "vocab.txt: needed by --dynamic_masking; copied to "
                    "the TF1 export.")
flags.DEFINE_float("masked_lm_prob", 0.15, "--dynamic_masking: share of tokens masked.")
flags.DEFINE_integer("keep_checkpoint_max", D.keep_checkpoint_max, "How many checkpoints to keep.")
flags.DEFINE_integer("random_seed", D.random_seed,
                     "Seed of initialisation, dropout and input order.")

# Pretraining on a budget (docs/pretraining.md).
flags.DEFINE_enum("recipe", "original", ["original", "budget"],
                  "original: Google's recipe. budget: --no_nsp --dynamic_masking --masked_lm_prob=0.3, "
                  "no dropout, --learning_rate=3e-4 on the budget's clock (--warmup_proportion=0.75 "
                  "--warmup_start_fraction=0.25), bfloat16 where the device has it (TPU, A100 on, AMX "
                  "CPU); needs --train_budget_minutes. Flags given on the command line win.")
flags.DEFINE_bool("no_nsp", False, "Train the masked LM alone (records of create_pretraining_data "
                  "--no_nsp or --pack_sentences); the pooler and the NSP head stay in the "
                  "model with their initial weights.")
flags.DEFINE_float("hidden_dropout_prob", D.hidden_dropout_prob, "Dropout while pretraining "
                   "instead of bert_config.json's (the TF1 export keeps the file's).")
flags.DEFINE_float("attention_probs_dropout_prob", D.attention_probs_dropout_prob,
                   "Attention dropout while pretraining instead of bert_config.json's.")
flags.DEFINE_float("train_budget_minutes", D.train_budget_minutes,
                   "Train for this much wall time: the learning rate follows the share of it "
                   "spent, and the run checkpoints and ends when it is spent (or at "
                   "--num_train_steps); a resumed run goes on with the time its checkpoint "
                   "recorded.")
flags.DEFINE_float("warmup_proportion", D.warmup_proportion, "With --train_budget_minutes: the "
                   "share of the budget over which the learning rate rises to its peak (then "
                   "falls linearly to 0 at the end).")
flags.DEFINE_float("warmup_start_fraction", D.warmup_start_fraction,
                   "With --train_budget_minutes: the first learning rate, as a fraction of "
                   "--learning_rate.")
flags.DEFINE_float("batch_size_ramp", D.batch_size_ramp, "With --train_budget_minutes: updates "
                   "grow linearly with the time spent from 1 to --num_accumulation_steps "
                   "micro-batches, all of them from this share of the budget on (0: no ramp).")
runner_flags.check_training_flags()
flag_ranges.at_least_one("max_seq_length", "max_predictions_per_seq", "max_eval_steps")
flag_ranges.check("masked_lm_prob", 0, 1, above=True)
flag_ranges.check("hidden_dropout_prob", 0, 1)
flag_ranges.check("attention_probs_dropout_prob", 0, 1)
flag_ranges.check("train_budget_minutes", 0, above=True)
flag_ranges.check("warmup_proportion", 0, 1, above=True)
flag_ranges.check("warmup_start_fraction", 0, 1)
flag_ranges.check("batch_size_ramp", 0, 1)


def apply_recipe() -> None:
    """`--recipe`'s values for the flags the command line left unset (`tasks.pretraining.
    recipes`), logged; the flags it needs from the user, checked."""
    from absl import logging

    from bert_tf2.tasks.pretraining.recipes import NEEDS, ON_BFLOAT16_HARDWARE, RECIPES

    for name in NEEDS.get(FLAGS.recipe, ()) if FLAGS.do_train else ():
        if FLAGS[name].value is None:
            raise app.UsageError(f"--recipe={FLAGS.recipe} needs --{name}")
    applied = []
    values = dict(RECIPES[FLAGS.recipe])
    if FLAGS.recipe in ON_BFLOAT16_HARDWARE and not FLAGS["dtype"].present:
        from bert_tf2.engine.distribution import bfloat16_in_hardware

        # (not before several processes join: the budget is refused there anyway)
        if FLAGS.use_tpu or (FLAGS.distribution_strategy != "multi_worker_mirrored"
                             and bfloat16_in_hardware()):
            values.update(ON_BFLOAT16_HARDWARE[FLAGS.recipe])
    for name, value in values.items():
        if not FLAGS[name].present:
            FLAGS[name].value = value
            applied.append(f"--{name}={value}")
    if applied:
        logging.info("--recipe=%s sets %s", FLAGS.recipe, " ".join(applied))
    for name, otherwise in BUDGET_ONLY.items():
        if FLAGS[name].present and FLAGS.train_budget_minutes is None:
            raise app.UsageError(f"--{name} shapes the schedule of --train_budget_minutes; "
                                 f"without a budget, {otherwise}")


def main(argv):
    del argv
    from bert_tf2.tasks.pretraining.task import PretrainingTask

    for name in ("input_file", "output_dir"):
        if not FLAGS[name].value:
            raise app.UsageError(f"--{name} is required")
    if not (FLAGS.bert_config_file or FLAGS.init_checkpoint):
        raise app.UsageError("--bert_config_file is required (or --init_checkpoint with its "
                             "bert_config.json or config.json beside it)")
    apply_recipe()
    task = PretrainingTask(FLAGS.input_file, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
                           FLAGS.dynamic_masking, FLAGS.masked_lm_prob, nsp=not FLAGS.no_nsp)
    runner_flags.run(pretrain, task, runner_flags.pretrain_settings())


def console_main():
    runner_flags.main(main)


if __name__ == "__main__":
    console_main()
