"""Fine-tune BERT for named-entity recognition (CoNLL-2003 and any CoNLL-style tagging data).

The original never shipped an NER runner; this one follows its conventions and the paper's recipe:
each word's first WordPiece carries the word's tag and the other pieces are ignored; sentences too
long for `max_seq_length` are cut into overlapping windows and every word is read back from the
window where it has the most context. Scores are entity-level precision, recall and F1, overall
and per type, exactly as the `conlleval` script computes them (IOB1 or IOB2), written to
`eval_results.txt` and TensorBoard at every epoch's end, with the conlleval report in
`eval_report.txt` and the predictions in CoNLL format (`word gold predicted`) in
`eval_predictions.txt`. `--mode=feature_based` is the paper's ablation: the encoder is frozen,
its top four layers are concatenated per token, and a two-layer BiLSTM tags them.

    python run_ner.py --data_dir=conll2003 --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
        --output_dir=out/ner --do_train --do_eval --learning_rate=5e-5 --num_train_epochs=3
"""
from __future__ import annotations

import logging
import os

from absl import app, flags

import finetuning_flags
import finetuning_runner
from modeling import environment  # noqa: F401  (before TensorFlow)

FLAGS = flags.FLAGS

finetuning_flags.define_flags(max_seq_length=128, learning_rate=5e-5, num_train_epochs=3.0,
                              predict_batch_size=32)
flags.DEFINE_string("data_dir", None, "Folder of train.txt, valid.txt (or dev.txt) and test.txt; "
                    "each file can also be given on its own.")
flags.DEFINE_string("train_file", None, "Training data (default: DATA_DIR/train.txt).")
flags.DEFINE_string("eval_file", None, "Data scored during and after training (default: "
                    "DATA_DIR/valid.txt, else DATA_DIR/dev.txt).")
flags.DEFINE_string("predict_file", None, "Data to tag with --do_predict (default: "
                    "DATA_DIR/test.txt); tags, if present, are scored.")
flags.DEFINE_enum("input_format", "conll", ["conll", "slash"], "conll: a word per line, columns "
                  "separated by whitespace, blank lines between sentences, -DOCSTART- lines "
                  "ignored; slash: a sentence per line of word/TAG tokens.")
flags.DEFINE_integer("label_column", -1, "conll: the tag's column (negative: from the end).")
flags.DEFINE_list("labels", None, "The tag set (default: the tags of the training data).")
flags.DEFINE_integer("doc_stride", 64, "WordPieces between the starts of a long sentence's "
                     "windows.")
flags.DEFINE_enum("mode", "fine_tune", ["fine_tune", "feature_based"], "fine_tune: train the "
                  "encoder with a linear tagger on top; feature_based: freeze the encoder and "
                  "train a BiLSTM on its top layers (the paper's ablation).")
flags.DEFINE_integer("feature_layers", 4, "feature_based: top encoder layers concatenated.")
flags.DEFINE_integer("lstm_layers", 2, "feature_based: BiLSTM layers.")
flags.DEFINE_integer("lstm_units", 0, "feature_based: units per direction (0: hidden_size).")
flags.DEFINE_string("best_metric", "eval_f1", "Keep the best checkpoint by this "
                    "eval_results.txt key.")

logger = logging.getLogger("run_ner")


def data_file(flag: str, names: tuple) -> str | None:
    if FLAGS[flag].value:
        return FLAGS[flag].value
    if FLAGS.data_dir:
        for name in names:
            path = os.path.join(FLAGS.data_dir, name)
            if os.path.isfile(path):
                return path
        return os.path.join(FLAGS.data_dir, names[0])
    return None


def read_sentences(path: str, has_labels: bool = True) -> list:
    from data_gen import ner_data

    if FLAGS.input_format == "slash":
        return ner_data.read_slash_tagged(path)
    return ner_data.read_conll(path, FLAGS.label_column, has_labels=has_labels)


def has_tags(path: str) -> bool:
    """Whether a prediction file carries tags: slash format always; conll with >1 column."""
    if FLAGS.input_format == "slash":
        return True
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            columns = line.split()
            if columns and columns[0] != "-DOCSTART-":
                return len(columns) > 1
    return False


class SplitFeatures:
    """A file's sentences and window features (cached TFRecords, then in memory)."""

    def __init__(self, identity: dict, labels: list, tokenizer, vocab_file: str, work_dir: str):
        self.identity = identity
        self.labels = labels
        self.tokenizer = tokenizer
        self.vocab_file = vocab_file
        self.work_dir = work_dir

    def __call__(self, name: str, path: str, has_labels: bool = True) -> tuple[list, dict]:
        from data_gen import feature_cache, ner_data, ner_features

        sentences = read_sentences(path, has_labels)
        if has_labels:
            ner_data.check_labels(sentences, self.labels)
        key = feature_cache.fingerprint([path, self.vocab_file], has_labels=has_labels,
                                        **self.identity)
        records = os.path.join(self.work_dir, f"{name}.tf_record")
        feature_cache.cached_records(
            records, key, lambda: ner_features.example_records(
                sentences, self.labels if has_labels else None, FLAGS.max_seq_length,
                self.tokenizer, FLAGS.doc_stride), what=f"{name} features")
        return sentences, ner_features.load_features(records, FLAGS.max_seq_length)


def dataset_fn(features: dict, global_batch: int, is_training: bool, trim: bool):
    from data_gen.ner_features import ner_dataset

    return finetuning_runner.dataset_fn(ner_dataset, features, global_batch, is_training, trim)


def predict_tags(trainer, sentences: list, features: dict, labels: list, trim: bool) -> list:
    """Every sentence's predicted tags, one per word."""
    import numpy as np

    from data_gen.ner_features import reassemble

    outputs = trainer.predict(dataset_fn(features, FLAGS.predict_batch_size, False, trim))
    real = outputs["example_index"] >= 0  # padding rows (several replicas) are -1
    if not np.array_equal(outputs["example_index"][real], features["example_index"]):
        raise RuntimeError("prediction lost, repeated or reordered windows")
    ids = reassemble(features, outputs["predicted_ids"][real], len(sentences))
    return [[labels[i] for i in sentence] for sentence in ids]


def scores(sentences: list, predicted: list):
    from modeling import conlleval

    return conlleval.evaluate([s.labels for s in sentences], predicted)


def score_results(result) -> dict:
    values = {"precision": result.precision, "recall": result.recall, "f1": result.f1,
              "accuracy": result.accuracy}
    for name, typed in result.per_type.items():
        values.update({f"{name}_precision": typed.precision, f"{name}_recall": typed.recall,
                       f"{name}_f1": typed.f1})
    return values


def write_tagged(path: str, sentences: list, predicted: list) -> None:
    """CoNLL lines `word [gold] predicted`, a blank line after each sentence."""
    from modeling.atomic_files import write_text

    lines = []
    for sentence, tags in zip(sentences, predicted):
        golds = sentence.labels or [None] * len(tags)
        for word, gold, tag in zip(sentence.words, golds, tags):
            lines.append(" ".join([word, tag] if gold is None else [word, gold, tag]))
        lines.append("")
    write_text(path, "\n".join(lines) + "\n")


def build_model(config, num_tags: int):
    import dataclasses

    from modeling.encoder import BertEncoder
    from modeling.models import BertFeatureTagger, BertTokenClassifier

    if FLAGS.mode == "fine_tune":
        return BertTokenClassifier(BertEncoder(config), num_tags=num_tags)
    # Frozen features: the encoder runs without dropout, as extracted features would be.
    frozen = dataclasses.replace(config, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0)
    return BertFeatureTagger(BertEncoder(frozen), num_tags=num_tags,
                             lstm_units=FLAGS.lstm_units, num_layers=FLAGS.lstm_layers,
                             feature_layers=FLAGS.feature_layers)


def main(argv):
    del argv
    from data_gen import ner_data
    from data_gen.tokenization import FullTokenizer
    from modeling import conlleval, finetuning
    from modeling.tagging_task import TaggingTask

    train_file = data_file("train_file", ("train.txt",))
    eval_file = data_file("eval_file", ("valid.txt", "dev.txt"))
    predict_file = data_file("predict_file", ("test.txt",))
    if FLAGS.do_train and not train_file:
        raise app.UsageError("--do_train needs --train_file or --data_dir")
    if FLAGS.do_eval and not eval_file:
        raise app.UsageError("--do_eval needs --eval_file or --data_dir")
    if FLAGS.do_predict and not predict_file:
        raise app.UsageError("--do_predict needs --predict_file or --data_dir")
    if not FLAGS.best_metric.startswith("eval_"):
        raise app.UsageError(f"--best_metric={FLAGS.best_metric}: evaluation keys start with "
                             f"eval_ (eval_f1, eval_precision, eval_PER_f1, ...)")
    run = finetuning_runner.set_up()
    if FLAGS.mode == "feature_based" and not (
            1 <= FLAGS.feature_layers <= run.config.num_hidden_layers):
        raise app.UsageError(f"--feature_layers={FLAGS.feature_layers}: the model has "
                             f"{run.config.num_hidden_layers} layers")
    train_sentences = None
    if train_file and (FLAGS.do_train or not FLAGS.labels):
        train_sentences = read_sentences(train_file)
    if train_sentences is None and not FLAGS.labels:
        raise app.UsageError("the tag set comes from --train_file (or --data_dir) or --labels")
    labels = ner_data.label_list(train_sentences, FLAGS.labels) if train_sentences else list(
        FLAGS.labels)
    try:
        scheme = ner_data.detect_scheme([s.labels for s in train_sentences or ()]) or "no"
    except ValueError:  # tags other than O, B-, I-: scored by conlleval's rules all the same
        scheme = "other"
    tokenizer = FullTokenizer(run.vocab_file, do_lower_case=FLAGS.do_lower_case)
    # What decides the features and the head; an output_dir holds one such run.
    identity = {"task": "ner", "mode": FLAGS.mode, "labels": labels,
                "max_seq_length": FLAGS.max_seq_length, "doc_stride": FLAGS.doc_stride,
                "do_lower_case": FLAGS.do_lower_case, "input_format": FLAGS.input_format,
                "label_column": FLAGS.label_column}
    if FLAGS.mode == "feature_based":
        identity.update({"feature_layers": FLAGS.feature_layers,
                         "lstm_layers": FLAGS.lstm_layers, "lstm_units": FLAGS.lstm_units})
    finetuning_runner.record_run(identity)
    features = SplitFeatures(identity, labels, tokenizer, run.vocab_file, run.work_dir)
    train = features("train", train_file)[1] if FLAGS.do_train else None
    evaluation = features("eval", eval_file) if FLAGS.do_eval else None
    options = finetuning_flags.options(len(train_sentences) if train else None,
                                       run.strategy.num_replicas_in_sync)
    finetuning_runner.record_run(identity, options if train else None)
    logger.info("NER (%s, %d tags, %s tagging): %s on %d replica(s); %s", FLAGS.mode, len(labels), scheme,
                f"{len(train_sentences)} training sentences in {len(train['input_ids'])} "
                f"windows, {options.num_train_steps} steps ({options.num_warmup_steps} warmup)"
                if train else "no training", run.strategy.num_replicas_in_sync,
                f"{len(evaluation[0])} sentences to score" if evaluation else "no evaluation")
    trainer = finetuning.build_trainer(lambda: build_model(run.config, len(labels)),
                                       TaggingTask(FLAGS.max_seq_length), run.strategy, options)

    def evaluate() -> dict:
        predicted = predict_tags(trainer, *evaluation, labels, run.trim)
        return {f"eval_{k}": v for k, v in score_results(scores(evaluation[0], predicted)).items()}

    finetuning_runner.fit(
        trainer, dataset_fn(train, FLAGS.train_batch_size, True, run.trim) if train else None,
        evaluate if evaluation else None, options, FLAGS.best_metric)
    if not run.chief:
        return
    from modeling.atomic_files import write_text

    if evaluation:  # what the kept weights predict
        predicted = predict_tags(trainer, *evaluation, labels, run.trim)
        write_tagged(os.path.join(FLAGS.output_dir, "eval_predictions.txt"), evaluation[0],
                     predicted)
        write_text(os.path.join(FLAGS.output_dir, "eval_report.txt"),
                   conlleval.report(scores(evaluation[0], predicted)))
    if FLAGS.do_predict:
        labelled = has_tags(predict_file)
        sentences, windows = features("predict", predict_file, has_labels=labelled)
        predicted = predict_tags(trainer, sentences, windows, labels, run.trim)
        path = os.path.join(FLAGS.output_dir, "test_predictions.txt")
        write_tagged(path, sentences, predicted)
        logger.info("tagged %d sentences of %s: %s", len(sentences), predict_file, path)
        if labelled:
            report = conlleval.report(scores(sentences, predicted))
            write_text(os.path.join(FLAGS.output_dir, "test_report.txt"), report)
            logger.info("scores of the predictions:\n%s", report)
    if FLAGS.export_dir:
        from modeling import serving
        from modeling.ner_serving import NerServing

        serving.save(NerServing(trainer.model, run.vocab_file, FLAGS.do_lower_case,
                                FLAGS.max_seq_length, labels, FLAGS.doc_stride), FLAGS.export_dir,
                     {"vocab.txt": run.vocab_file})


def console_main():
    app.run(main)


if __name__ == "__main__":
    console_main()
