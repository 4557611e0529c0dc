"""Fine-tune BERT for extractive question answering on SQuAD v1.1 or v2.0, and score it.

The original's flags, defaults and algorithm (sliding windows, max-context, n-best decoding, the
null-score threshold, `get_final_text`), with the scores it never computed: when `--predict_file`
holds gold answers, EM and F1 exactly as the official evaluation scripts compute them (SQuAD 2.0
adds HasAns / NoAns and the best threshold) go to `eval_results.txt` and TensorBoard, at every
epoch's end while training (`--do_eval`), and `output_dir/best/` keeps the weights with the best
F1. `--do_predict` writes `predictions.json`, `nbest_predictions.json` and (v2) `null_odds.json`
for `--predict_file`; `--export_dir` writes a SavedModel that answers a question about a context
given as raw strings. Features are cached in `output_dir` and resumed runs continue.

    python run_squad.py --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
        --train_file=train-v1.1.json --predict_file=dev-v1.1.json --output_dir=out/squad \
        --do_train --do_eval --do_predict --learning_rate=3e-5 --num_train_epochs=2
"""
from __future__ import annotations

import json
import logging
import os

from absl import app, flags

import finetuning_flags
import finetuning_runner
from modeling import environment  # noqa: F401  (before TensorFlow)

FLAGS = flags.FLAGS

finetuning_flags.define_flags(max_seq_length=384, learning_rate=5e-5, num_train_epochs=3.0,
                              predict_batch_size=8)
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

logger = logging.getLogger("run_squad")


class SplitFeatures:
    """A SQuAD file's examples and its windows' features (cached TFRecords, then in memory)."""

    def __init__(self, identity: dict, tokenizer, vocab_file: str, work_dir: str):
        self.identity = identity
        self.tokenizer = tokenizer
        self.vocab_file = vocab_file
        self.work_dir = work_dir

    def __call__(self, name: str, path: str, is_training: bool) -> tuple[list, dict]:
        from data_gen import feature_cache, squad_data

        settings = squad_data.SquadSettings(FLAGS.max_seq_length, FLAGS.doc_stride,
                                            FLAGS.max_query_length)
        if not os.path.isfile(path):
            raise squad_data.DataError(f"{path}: no such file")
        examples = squad_data.read_squad_examples(path, is_training,
                                                  FLAGS.version_2_with_negative)
        if not examples:
            raise squad_data.DataError(f"{path}: no questions{' to train on' * is_training}")
        key = feature_cache.fingerprint([path, self.vocab_file], is_training=is_training,
                                        **self.identity)
        records = os.path.join(self.work_dir, f"{name}.tf_record")
        feature_cache.cached_records(
            records, key, lambda: squad_data.feature_records(examples, self.tokenizer, settings,
                                                             is_training),
            what=f"{name} features")
        return examples, squad_data.load_features(records, FLAGS.max_seq_length)


def dataset_fn(features: dict, global_batch: int, is_training: bool, trim: bool):
    from data_gen.classifier_features import classifier_dataset
    from data_gen.squad_data import model_features

    return finetuning_runner.dataset_fn(classifier_dataset, model_features(features, is_training),
                                        global_batch, is_training, trim)


def predict_answers(trainer, examples: list, features: dict, inv_vocab: dict, trim: bool):
    """The decoded answers (`squad_postprocess.Answers`) of the model as it stands."""
    import numpy as np

    from modeling.squad_postprocess import DecodeSettings, predict_answers as decode

    outputs = trainer.predict(dataset_fn(features, FLAGS.predict_batch_size, False, trim))
    real = outputs["example_index"] >= 0  # padding rows (several replicas) are -1
    rows = outputs["example_index"][real]
    order = np.argsort(rows, kind="stable")
    if not np.array_equal(rows[order], np.arange(len(features["input_ids"]))):
        raise RuntimeError("prediction lost or repeated windows")
    settings = DecodeSettings(FLAGS.n_best_size, FLAGS.max_answer_length, FLAGS.do_lower_case,
                              FLAGS.version_2_with_negative, FLAGS.null_score_diff_threshold)
    return decode(examples, features, outputs["start_logits"][real][order],
                  outputs["end_logits"][real][order], inv_vocab, settings)


def has_gold_answers(dataset: list) -> bool:
    return all(qa.get("answers") or qa.get("is_impossible")
               for article in dataset for paragraph in article["paragraphs"]
               for qa in paragraph["qas"])


def scores(dataset: list, answers) -> dict:
    from modeling import squad_metrics

    if FLAGS.version_2_with_negative:
        return squad_metrics.squad_v2_scores(dataset, answers.predictions, answers.null_odds)
    return squad_metrics.squad_v1_scores(dataset, answers.predictions)


def check_best_metric(metric: str) -> None:
    """A usage error, before any training, when --best_metric is not a key evaluation writes."""
    names = (["exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_exact",
              "best_f1"] if FLAGS.version_2_with_negative else ["exact_match", "f1"])
    keys = [f"eval_{name}" for name in names]
    if metric not in keys:
        raise app.UsageError(f"--best_metric={metric}: evaluation writes {', '.join(keys)}")


def write_answers(answers) -> None:
    from modeling.atomic_files import write_text

    files = {"predictions.json": answers.predictions,
             "nbest_predictions.json": answers.nbest}
    if FLAGS.version_2_with_negative:
        files["null_odds.json"] = answers.null_odds
    for name, content in files.items():
        write_text(os.path.join(FLAGS.output_dir, name), json.dumps(content, indent=4) + "\n")
    logger.info("wrote %s to %s", ", ".join(files), FLAGS.output_dir)


def main(argv):
    del argv
    from data_gen.squad_files import load_squad
    from data_gen.tokenization import FullTokenizer
    from modeling import finetuning, serving
    from modeling.encoder import BertEncoder
    from modeling.models import BertSpanLabeler
    from modeling.squad_task import SpanTask

    if FLAGS.do_train and not FLAGS.train_file:
        raise app.UsageError("--do_train needs --train_file")
    if (FLAGS.do_eval or FLAGS.do_predict) and not FLAGS.predict_file:
        raise app.UsageError("--do_eval and --do_predict need --predict_file")
    if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
        raise app.UsageError(f"--max_seq_length={FLAGS.max_seq_length} leaves no room for the "
                             f"context after --max_query_length={FLAGS.max_query_length} + 3")
    check_best_metric(FLAGS.best_metric)
    if FLAGS.verbose_logging:
        logging.getLogger("modeling.squad_postprocess").setLevel(logging.DEBUG)
    run = finetuning_runner.set_up()
    tokenizer = FullTokenizer(run.vocab_file, do_lower_case=FLAGS.do_lower_case)
    inv_vocab = {i: token for token, i in tokenizer.vocab.items()}
    # What decides the features and the head; an output_dir holds one such run.
    identity = {"task": "squad", "version_2_with_negative": FLAGS.version_2_with_negative,
                "max_seq_length": FLAGS.max_seq_length, "doc_stride": FLAGS.doc_stride,
                "max_query_length": FLAGS.max_query_length, "do_lower_case": FLAGS.do_lower_case}
    finetuning_runner.record_run(identity)
    features = SplitFeatures(identity, tokenizer, run.vocab_file, run.work_dir)
    train_examples, train = (features("train", FLAGS.train_file, is_training=True)
                             if FLAGS.do_train else (None, None))
    gold, predict = None, None
    if FLAGS.do_eval or FLAGS.do_predict:
        gold = load_squad(FLAGS.predict_file)["data"]
        predict = features("eval", FLAGS.predict_file, is_training=False)
        if not has_gold_answers(gold):
            if FLAGS.do_eval:
                raise app.UsageError(f"--do_eval: {FLAGS.predict_file} has questions without "
                                     f"answers to score against")
            gold = None
    # The original's step count: training examples (questions), not windows, per epoch.
    options = finetuning_flags.options(len(train_examples) if train else None,
                                       run.strategy.num_replicas_in_sync)
    finetuning_runner.record_run(identity, options if train else None)
    logger.info("SQuAD %s: %s on %d replica(s); %s", "2.0" if FLAGS.version_2_with_negative
                else "1.1", f"{len(train_examples)} training questions in "
                f"{len(train['input_ids'])} windows, {options.num_train_steps} steps "
                f"({options.num_warmup_steps} warmup)" if train else "no training",
                run.strategy.num_replicas_in_sync,
                f"{len(predict[0])} questions to predict in {len(predict[1]['input_ids'])} "
                f"windows" if predict else "no prediction")
    trainer = finetuning.build_trainer(lambda: BertSpanLabeler(BertEncoder(run.config)),
                                       SpanTask(FLAGS.max_seq_length), run.strategy, options)

    def evaluate() -> dict:
        answers = predict_answers(trainer, *predict, inv_vocab, run.trim)
        return {f"eval_{name}": value for name, value in scores(gold, answers).items()}

    finetuning_runner.fit(
        trainer, dataset_fn(train, FLAGS.train_batch_size, True, run.trim) if train else None,
        evaluate if FLAGS.do_eval else None, options, FLAGS.best_metric)
    if not run.chief:
        return
    if FLAGS.do_predict:
        answers = predict_answers(trainer, *predict, inv_vocab, run.trim)
        write_answers(answers)
        if gold is not None:
            logger.info("scores of the predictions: %s",
                        finetuning.format_results(scores(gold, answers)))
    if FLAGS.export_dir:
        from modeling.squad_serving import SquadServing

        serving.save(SquadServing(
            trainer.model, run.vocab_file, FLAGS.do_lower_case, FLAGS.max_seq_length,
            FLAGS.doc_stride, FLAGS.max_query_length, FLAGS.n_best_size, FLAGS.max_answer_length,
            FLAGS.version_2_with_negative, FLAGS.null_score_diff_threshold),
            FLAGS.export_dir, {"vocab.txt": run.vocab_file})


def console_main():
    app.run(main)


if __name__ == "__main__":
    console_main()
