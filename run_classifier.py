"""Fine-tune BERT on sentence or sentence-pair classification (GLUE, XNLI, any TSV/CSV).

The original's flags and processors (CoLA, MNLI, MRPC, XNLI) plus SST-2, STS-B (regression), QQP,
QNLI, RTE, WNLI, a generic reader (`--task_name=generic`) and multi-label documents
(`--task_name=multilabel`: JSON lines and labels.txt; or generic with `--multi_label`). Features are converted once into
`output_dir/{split}.tf_record` and reused while the data, vocabulary and settings are unchanged.
Training evaluates at every epoch's end (or every `--eval_every_steps`) with the task's GLUE
metrics, keeps the best weights in `output_dir/best/`, and resumes by itself after an
interruption. `--do_predict` writes `test_results.tsv` (the original's layout: probabilities
only) and `test_predictions.tsv` (example id, predicted label, probabilities); `--export_dir` writes a SavedModel that takes raw strings. The task lives in
`tasks/classification/`; `engine.finetuning.finetune` runs it.

    python run_classifier.py --task_name=MRPC --data_dir=glue/MRPC --output_dir=out/mrpc \
        --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --do_train --do_eval
"""
from __future__ import annotations

from absl import flags

from bert_tf2 import runner_flags

FLAGS = flags.FLAGS

runner_flags.define_finetuning_flags()
flags.DEFINE_string("data_dir", None, "Folder of the task's files (train.tsv, dev.tsv, ...).")
flags.DEFINE_string("task_name", None, "cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli, "
                    "xnli, generic or multilabel (case-insensitive).")
flags.DEFINE_string("xnli_language", "zh", "XNLI: the language to train and evaluate on.")
flags.DEFINE_string("text_a_column", None, "generic: column of the first text (header name or "
                    "0-based index).")
flags.DEFINE_string("text_b_column", None, "generic: column of the second text, if any.")
flags.DEFINE_string("label_column", None, "generic: column of the label.")
flags.DEFINE_string("id_column", None, "generic: column of the example id (test_predictions.tsv).")
flags.DEFINE_list("labels", None, "generic: the label list (default: the labels of train).")
flags.DEFINE_bool("header", True, "generic: the files start with a header row.")
flags.DEFINE_bool("regression", False, "generic: the label is a number (one output, MSE loss).")
flags.DEFINE_bool("multi_label", False, "generic: the label column holds any number of labels "
                  "split by --label_delimiter (a sigmoid per label, binary cross-entropy).")
flags.DEFINE_string("label_delimiter", ",", "generic with --multi_label: what separates the "
                    "labels in a label cell.")
flags.DEFINE_float("threshold", 0.5, "Multi-label: a label is predicted when its probability "
                   "exceeds this.")
flags.DEFINE_enum("tune_threshold", "none", ["none", "global", "per_label"], "Multi-label: tune "
                  "the threshold (one for all labels, or one per label) for the best F1 on dev "
                  "with the kept weights; saved to thresholds.tsv and into --export_dir. Needs "
                  "--do_eval.")
flags.DEFINE_bool("init_label_bias", False, "Multi-label: start a fresh head's biases at the "
                  "log-odds of each label's training frequency instead of 0 (probability 0.5), "
                  "which skips the long 'no label' plateau of many rare labels.")
flags.DEFINE_integer("doc_stride", None, "Long texts: cut a text longer than max_seq_length into "
                     "windows starting this many tokens apart, and pool each document's windows "
                     "into one prediction (default: truncate, as the original).")
flags.DEFINE_enum("window_pooling", "mean", ["mean", "max"], "With --doc_stride: a document's "
                  "logits are the mean of its windows', or the maximum of each.")
flags.DEFINE_integer("max_windows_per_document", 0, "With --doc_stride: train on at most this "
                     "many windows of a document, the first ones (0: all).")
flags.DEFINE_enum("window_loss", "window", ["window", "document"], "With --doc_stride, what "
                  "training scores: 'window' (each window an example carrying its document's "
                  "labels) or 'document' (each step takes --train_batch_size whole documents, "
                  "pools each one's window logits by --window_pooling as prediction does, and "
                  "puts the loss on the documents).")
flags.DEFINE_string("best_metric", None, "Keep the best checkpoint by this eval_results.txt key "
                    "(default: the task's GLUE score, eval_main).")


def processor_options() -> dict:
    """The options the task's processor is made with (part of the features' identity)."""
    name = (FLAGS.task_name or "").lower()
    if name == "xnli":
        return {"language": FLAGS.xnli_language}
    if name == "generic":
        return {"text_a_column": FLAGS.text_a_column, "text_b_column": FLAGS.text_b_column,
                "label_column": FLAGS.label_column, "labels": FLAGS.labels,
                "header": FLAGS.header, "regression": FLAGS.regression,
                "id_column": FLAGS.id_column,
                # Only when set, so that earlier runs' recorded options stay the same.
                **({"multi_label": True, "label_delimiter": FLAGS.label_delimiter}
                   if FLAGS.multi_label else {})}
    return {}


def build_task():
    """The task the flags describe (also what run_search checks a --metric against, before
    a trial runs)."""
    from bert_tf2.tasks.classification.task import ClassificationTask

    return ClassificationTask(FLAGS.task_name, FLAGS.data_dir, processor_options(),
                              threshold=FLAGS.threshold, tune_threshold=FLAGS.tune_threshold,
                              doc_stride=FLAGS.doc_stride, window_pooling=FLAGS.window_pooling,
                              max_windows=FLAGS.max_windows_per_document,
                              window_loss=FLAGS.window_loss,
                              init_label_bias=FLAGS.init_label_bias)


def main(argv):
    del argv
    runner_flags.finetune(build_task(), FLAGS.best_metric)


def console_main():
    runner_flags.main(main)


if __name__ == "__main__":
    console_main()
