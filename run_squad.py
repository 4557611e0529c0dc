"""Fine-tune BERT for extractive question answering on SQuAD v1.1 or v2.0, and score it.

The original's flags, defaults and algorithm (sliding windows, max-context, n-best decoding, the
null-score threshold, `get_final_text`), with the scores it never computed: when `--predict_file`
holds gold answers, EM and F1 exactly as the official evaluation scripts compute them (SQuAD 2.0
adds HasAns / NoAns and the best threshold) go to `eval_results.txt` and TensorBoard, at every
epoch's end while training (`--do_eval`), and `output_dir/best/` keeps the weights with the best
F1. `--do_predict` writes `predictions.json`, `nbest_predictions.json` and (v2) `null_odds.json`
for `--predict_file`; `--export_dir` writes a SavedModel that answers a question about a context
given as raw strings. Features are cached in `output_dir` and resumed runs continue. The task lives
in `tasks/squad/`; `engine.finetuning.finetune` runs it.

    python run_squad.py --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
        --train_file=train-v1.1.json --predict_file=dev-v1.1.json --output_dir=out/squad \
        --do_train --do_eval --do_predict --learning_rate=3e-5 --num_train_epochs=2
"""
from __future__ import annotations

import logging

from absl import flags

from bert_tf2 import runner_flags
from bert_tf2.process import flag_ranges

FLAGS = flags.FLAGS

runner_flags.define_finetuning_flags(max_seq_length=384, learning_rate=5e-5,
                                     num_train_epochs=3.0, predict_batch_size=8)
flags.DEFINE_string("train_file", None, "SQuAD JSON for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict (and score, when it holds "
                    "answers), e.g. dev-v1.1.json.")
flags.DEFINE_integer("doc_stride", 128, "Tokens between the starts of a long context's windows.")
flags.DEFINE_integer("max_query_length", 64, "Question tokens kept; longer ones are truncated.")
flags.DEFINE_integer("n_best_size", 20, "Candidate starts and ends per window, and entries of "
                     "nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in WordPiece tokens.")
flags.DEFINE_bool("verbose_logging", False, "Log where an answer could not be mapped back to "
                  "the context's text.")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0, "v2: answer null when null score - best "
                   "non-null score exceeds this.")
flags.DEFINE_string("best_metric", "eval_f1", "Keep the best checkpoint by this "
                    "eval_results.txt key.")
flag_ranges.at_least_one("doc_stride", "max_query_length", "n_best_size", "max_answer_length")
flag_ranges.check("null_score_diff_threshold")


def build_task():
    """The task the flags describe (also what run_search checks a --metric against, before
    a trial runs)."""
    from bert_tf2.tasks.squad.task import SquadTask

    return SquadTask(FLAGS.train_file, FLAGS.predict_file, FLAGS.version_2_with_negative,
                     FLAGS.doc_stride, FLAGS.max_query_length, FLAGS.n_best_size,
                     FLAGS.max_answer_length, FLAGS.null_score_diff_threshold)


def main(argv):
    del argv
    if FLAGS.verbose_logging:
        logging.getLogger("bert_tf2.tasks.squad.postprocess").setLevel(logging.DEBUG)
    runner_flags.finetune(build_task(), FLAGS.best_metric)


def console_main():
    runner_flags.main(main)


if __name__ == "__main__":
    console_main()
