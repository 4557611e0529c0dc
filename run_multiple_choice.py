"""Fine-tune BERT for multiple choice: SWAG, or any data of a context with N candidate answers.

The paper's SWAG recipe (BERT-Base 81.6 dev accuracy), which the original never released: every
(context, ending) pair is encoded, a dense layer scores each pooled output and a softmax over the
scores picks the ending. `--task_name=swag` reads the original SWAG CSV files (`train.csv`,
`val.csv`, `test.csv`); `--task_name=generic` reads JSON lines
`{"id", "context", "question" (optional), "choices": [...], "label"}` with any number of choices.
Training evaluates accuracy at every epoch's end, keeps the best weights in `output_dir/best/` and
resumes by itself; `--do_predict` writes `test_results.tsv` (id, chosen index, a probability per
choice); `--export_dir` writes a SavedModel that takes raw strings. The task lives in
`tasks/multiple_choice/`; `engine.finetuning.finetune` runs it.

    python run_multiple_choice.py --task_name=swag --data_dir=swagaf/data --output_dir=out/swag \
        --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --do_train --do_eval \
        --learning_rate=2e-5 --num_train_epochs=3 --max_seq_length=80 --train_batch_size=16
"""
from __future__ import annotations

from absl import flags

from bert_tf2 import runner_flags
from bert_tf2.process import flag_ranges

FLAGS = flags.FLAGS

runner_flags.define_finetuning_flags(max_seq_length=128, learning_rate=2e-5,
                                     num_train_epochs=3.0, predict_batch_size=8)
flags.DEFINE_string("task_name", None, "swag (the original SWAG CSV layout) or generic (JSON "
                    "lines with any number of choices).")
runner_flags.define_data_file_flags("train.csv|jsonl", "val.csv|jsonl (or dev.jsonl)",
                                    "test.csv|jsonl")
flags.DEFINE_integer("num_choices", 0, "Choices the model scores (0: 4 for swag, else the most "
                     "of any training example).")
flag_ranges.check("num_choices", 0, why="0: 4 for swag, else the most of any training example")
flags.DEFINE_string("best_metric", "eval_accuracy", "Keep the best checkpoint by this "
                    "eval_results.txt key.")


def build_task():
    """The task the flags describe (also what run_search checks a --metric against, before
    a trial runs)."""
    from bert_tf2.tasks.multiple_choice.task import MultipleChoiceTask

    return MultipleChoiceTask(FLAGS.task_name, FLAGS.data_dir, FLAGS.train_file, FLAGS.eval_file,
                              FLAGS.predict_file, FLAGS.num_choices)


def main(argv):
    del argv
    runner_flags.finetune(build_task(), FLAGS.best_metric)


def console_main():
    runner_flags.main(main)


if __name__ == "__main__":
    console_main()
