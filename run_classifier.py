"""Fine-tune BERT on sentence or sentence-pair classification (GLUE, XNLI, any TSV/CSV).

The original's flags and processors (CoLA, MNLI, MRPC, XNLI) plus SST-2, STS-B (regression), QQP,
QNLI, RTE, WNLI and a generic reader (`--task_name=generic`). Features are converted once into
`output_dir/{split}.tf_record` and reused while the data, vocabulary and settings are unchanged.
Training evaluates at every epoch's end (or every `--eval_every_steps`) with the task's GLUE
metrics, keeps the best weights in `output_dir/best/`, and resumes by itself after an
interruption. `--do_predict` writes `test_results.tsv` (example id, predicted label,
probabilities); `--export_dir` writes a SavedModel that takes raw strings.

    python run_classifier.py --task_name=MRPC --data_dir=glue/MRPC --output_dir=out/mrpc \
        --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --do_train --do_eval
"""
from __future__ import annotations

import logging
import os

from absl import app, flags

import finetuning_flags
import finetuning_runner
from modeling import environment  # noqa: F401  (before TensorFlow)

FLAGS = flags.FLAGS

finetuning_flags.define_flags()
flags.DEFINE_string("data_dir", None, "Folder of the task's files (train.tsv, dev.tsv, ...).")
flags.DEFINE_string("task_name", None, "cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli, "
                    "xnli or generic (case-insensitive).")
flags.DEFINE_string("xnli_language", "zh", "XNLI: the language to train and evaluate on.")
flags.DEFINE_string("text_a_column", None, "generic: column of the first text (header name or "
                    "0-based index).")
flags.DEFINE_string("text_b_column", None, "generic: column of the second text, if any.")
flags.DEFINE_string("label_column", None, "generic: column of the label.")
flags.DEFINE_string("id_column", None, "generic: column of the example id (test_results.tsv).")
flags.DEFINE_list("labels", None, "generic: the label list (default: the labels of train).")
flags.DEFINE_bool("header", True, "generic: the files start with a header row.")
flags.DEFINE_bool("regression", False, "generic: the label is a number (one output, MSE loss).")
flags.DEFINE_string("best_metric", None, "Keep the best checkpoint by this eval_results.txt key "
                    "(default: the task's GLUE score, eval_main).")

logger = logging.getLogger("run_classifier")


def make_processor():
    """The task's processor and the options it was made with (part of the features' identity)."""
    from data_gen.classifier_processors import get_processor

    name = FLAGS.task_name.lower()
    options = {}
    if name == "xnli":
        options = {"language": FLAGS.xnli_language}
    elif name == "generic":
        if FLAGS.text_a_column is None or (FLAGS.label_column is None and (
                FLAGS.do_train or FLAGS.do_eval)):
            raise app.UsageError("--task_name=generic needs --text_a_column and --label_column")
        options = {"text_a_column": FLAGS.text_a_column, "text_b_column": FLAGS.text_b_column,
                   "label_column": FLAGS.label_column, "labels": FLAGS.labels,
                   "header": FLAGS.header, "regression": FLAGS.regression,
                   "id_column": FLAGS.id_column}
    try:
        return get_processor(name, **options), options
    except ValueError as e:
        raise app.UsageError(f"--task_name={FLAGS.task_name}: {e}") from None


class SplitFeatures:
    """Each split's features: converted once (cached TFRecords), then held in memory."""

    def __init__(self, processor, identity: dict, tokenizer, vocab_file: str, work_dir: str):
        self.processor = processor
        self.identity = identity
        self.labels = identity["labels"]
        self.tokenizer = tokenizer
        self.vocab_file = vocab_file
        self.work_dir = work_dir

    def __call__(self, split: str) -> dict:
        from data_gen import classifier_features, feature_cache
        from data_gen.classifier_processors import DataError

        files = self.processor.split_files(FLAGS.data_dir, split)
        missing = [path for path in files if not os.path.isfile(path)]
        if missing:
            raise DataError(f"{self.processor.name} {split}: no {', '.join(missing)}")
        key = feature_cache.fingerprint([*files, self.vocab_file], **self.identity)
        path = os.path.join(self.work_dir, f"{split}.tf_record")
        feature_cache.cached_records(
            path, key, lambda: classifier_features.example_records(
                self.processor.get_examples(FLAGS.data_dir, split), self.labels,
                FLAGS.max_seq_length, self.tokenizer), what=f"{split} features")
        return classifier_features.load_features(path, FLAGS.max_seq_length,
                                                 regression=not self.labels)


def dataset_fn(features: dict, global_batch: int, is_training: bool, trim: bool):
    from data_gen.classifier_features import classifier_dataset

    return finetuning_runner.dataset_fn(classifier_dataset, features, global_batch, is_training,
                                        trim)


def predict_logits(trainer, features: dict, batch_size: int, trim: bool):
    """Logits of every example of a split, in example order."""
    import numpy as np

    outputs = trainer.predict(dataset_fn(features, batch_size, False, trim))
    real = outputs["example_index"] >= 0  # padding rows (several replicas) are -1
    index, logits = outputs["example_index"][real], outputs["logits"][real]
    order = np.argsort(index, kind="stable")
    if not np.array_equal(index[order], features["example_index"]):
        raise RuntimeError("prediction lost or repeated examples")
    return logits[order]


def split_metrics(task, task_name: str, logits, features: dict, prefix: str) -> dict:
    from modeling.glue_metrics import glue_metrics

    labels = features["label_ids"]
    results = glue_metrics(task_name, labels, task.predictions(logits))
    results["loss"] = task.loss(logits, labels)
    return {f"{prefix}{name}": value for name, value in results.items()}


def write_predictions(path: str, examples, logits, labels) -> None:
    """TSV: `id`, `prediction` and, for classification, one probability column per label."""
    from modeling.atomic_files import write_text
    from modeling.classification_task import probabilities

    if len(examples) != len(logits):
        raise RuntimeError(f"{len(examples)} examples but {len(logits)} predictions")
    lines = ["\t".join(["id", "prediction", *(f"probability_{label}" for label in labels)])]
    if labels:
        for example, probs in zip(examples, probabilities(logits)):
            lines.append("\t".join([example.example_id, labels[int(probs.argmax())],
                                    *(f"{p:.6f}" for p in probs)]))
    else:
        lines += [f"{example.example_id}\t{score:.6f}" for example, score in
                  zip(examples, logits[:, 0])]
    write_text(path, "\n".join(lines) + "\n")


def prediction_file(kind: str, split: str, splits: list) -> str:
    suffix = "" if len(splits) == 1 else "_" + split.split("_", 1)[-1]
    return os.path.join(FLAGS.output_dir, f"{kind}{suffix}.tsv")


def main(argv):
    del argv
    from data_gen.tokenization import FullTokenizer
    from modeling import finetuning, serving
    from modeling.classification_task import ClassificationTask
    from modeling.encoder import BertEncoder
    from modeling.models import BertClassifier

    run = finetuning_runner.set_up(required=("task_name", "data_dir"))
    processor, processor_options = make_processor()
    tokenizer = FullTokenizer(run.vocab_file, do_lower_case=FLAGS.do_lower_case)
    labels = [] if processor.is_regression else list(processor.get_labels(FLAGS.data_dir))
    # What decides the features and the head; an output_dir holds one such run.
    identity = {"task": processor.name, "processor_options": processor_options,
                "labels": labels, "max_seq_length": FLAGS.max_seq_length,
                "do_lower_case": FLAGS.do_lower_case}
    task = ClassificationTask(regression=not labels)
    features = SplitFeatures(processor, identity, tokenizer, run.vocab_file, run.work_dir)
    eval_splits = processor.eval_splits()
    best_metric = FLAGS.best_metric or ("eval_main" if len(eval_splits) == 1
                                        else f"eval_{eval_splits[0]}_main")
    check_best_metric(best_metric, processor.name, eval_splits, task)
    finetuning_runner.record_run(identity)  # before any file of another run is touched
    train = features(processor.train_split()) if FLAGS.do_train else None
    evals = {split: features(split) for split in eval_splits} if FLAGS.do_eval else {}
    options = finetuning_flags.options(len(train["example_index"]) if train else None,
                                       run.strategy.num_replicas_in_sync)
    finetuning_runner.record_run(identity, options if train else None)
    logger.info("%s: %s on %d replica(s); %s", processor.name,
                f"{len(train['example_index'])} training examples, {options.num_train_steps} "
                f"steps ({options.num_warmup_steps} warmup)" if train else "no training",
                run.strategy.num_replicas_in_sync,
                ", ".join(f"{s}: {len(f['example_index'])}" for s, f in evals.items()) or
                "no evaluation")
    trainer = finetuning.build_trainer(
        lambda: BertClassifier(BertEncoder(run.config), num_labels=len(labels) or 1), task,
        run.strategy, options)

    def evaluate() -> dict:
        results = {}
        for split, split_features in evals.items():
            prefix = "eval_" if len(evals) == 1 else f"eval_{split}_"
            logits = predict_logits(trainer, split_features, FLAGS.eval_batch_size, run.trim)
            results.update(split_metrics(task, processor.name, logits, split_features, prefix))
        return results

    finetuning_runner.fit(
        trainer, dataset_fn(train, FLAGS.train_batch_size, True, run.trim) if train else None,
        evaluate if evals else None, options, best_metric)
    if not run.chief:
        return
    for split, split_features in evals.items():  # what the kept weights predict on dev
        write_predictions(prediction_file("eval_predictions", split, eval_splits),
                          processor.get_examples(FLAGS.data_dir, split),
                          predict_logits(trainer, split_features, FLAGS.eval_batch_size,
                                         run.trim), labels)
    if FLAGS.do_predict:
        test_splits = processor.test_splits()
        for split in test_splits:
            path = prediction_file("test_results", split, test_splits)
            write_predictions(path, processor.get_examples(FLAGS.data_dir, split),
                              predict_logits(trainer, features(split), FLAGS.predict_batch_size,
                                             run.trim), labels)
            logger.info("predictions for %s: %s", split, path)
    if FLAGS.export_dir:
        serving.save(serving.ClassifierServing(
            trainer.model, run.vocab_file, FLAGS.do_lower_case, FLAGS.max_seq_length, labels,
            pair=processor.is_pair()), FLAGS.export_dir, {"vocab.txt": run.vocab_file})


def check_best_metric(metric: str, task_name: str, eval_splits: list, task) -> None:
    """A usage error, before any training, when --best_metric is not a key evaluation writes."""
    import numpy as np

    from modeling.glue_metrics import glue_metrics

    labels = np.array([0.0, 1.0]) if task.regression else np.array([0, 1])
    names = {"loss", *glue_metrics(task_name, labels, labels)}
    prefixes = ["eval_"] if len(eval_splits) == 1 else [f"eval_{s}_" for s in eval_splits]
    keys = sorted(prefix + name for prefix in prefixes for name in names)
    if metric not in keys:
        raise app.UsageError(f"--best_metric={metric}: evaluation writes {', '.join(keys)}")


def console_main():
    app.run(main)


if __name__ == "__main__":
    console_main()
