"""Extractive question answering (SQuAD v1.1 and v2.0) as the fine-tuning driver runs it.

Reading (`reader`) and windowing (`features`) are the original run_squad's. Loss: the original's,
the mean of the start and end positions' cross-entropies over the window's positions. With trimmed
batches (`--trim_padding`, the default) the softmax runs over the batch's width rather than all
`max_seq_length` positions: the original also taught the model that padded positions are not
answers, though decoding never considers them. `predict_step` returns each window's logits padded
back to `max_seq_length` (with a large negative value, so a padded position is never among the
n-best); `postprocess` decodes them into answers as the original's `write_predictions`, and
`metrics` scores them as the official evaluation scripts (v2.0: HasAns / NoAns and the best
threshold), with F1 as the main metric. Files: `predictions.json`, `nbest_predictions.json` and
(v2.0) `null_odds.json`, in the original's layout. `--predict_file` is both the evaluation and the
prediction split; an epoch counts questions, not windows, as the original's step arithmetic does.
"""
from __future__ import annotations

import dataclasses
import json
import os

from keras import ops

from bert_tf2.data_gen.errors import DataError
from bert_tf2.engine.task import FinetuningTask, Split
from bert_tf2.modeling import losses
from bert_tf2.process.errors import SettingsError
from bert_tf2.tasks.tensors import model_inputs, pad_positions

PADDED_LOGIT = -10000.0
V1_METRICS = ["exact_match", "f1"]
V2_METRICS = ["exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1",
              "best_exact", "best_f1"]


@dataclasses.dataclass
class SquadTask(FinetuningTask):
    """SQuAD v1.1 or v2.0 from the official JSON; the runner's flags are its fields."""

    unit = "question"
    row_unit = "window"
    main_metric = "f1"

    train_file: str | None = None
    predict_file: str | None = None  # evaluated and predicted
    version_2_with_negative: bool = False  # SQuAD 2.0: questions may have no answer
    doc_stride: int = 128  # tokens between the starts of a long context's windows
    max_query_length: int = 64  # question tokens kept
    n_best_size: int = 20  # candidate starts and ends per window, and n-best entries
    max_answer_length: int = 30  # longest answer, in WordPiece tokens
    null_score_diff_threshold: float = 0.0  # v2: null when null - best non-null exceeds it

    def __post_init__(self):
        self.gold = {}  # split name -> the SQuAD file's `data`, for scoring
        self.evaluating = False

    @property
    def title(self) -> str:
        return "SQuAD 2.0" if self.version_2_with_negative else "SQuAD 1.1"

    # ------------------------------------------------------------------ driver interface
    def check(self, settings) -> None:
        if settings.do_train and not self.train_file:
            raise SettingsError("--do_train needs --train_file")
        if (settings.do_eval or settings.do_predict) and not self.predict_file:
            raise SettingsError("--do_eval and --do_predict need --predict_file")
        if settings.max_seq_length <= self.max_query_length + 3:
            raise SettingsError(f"--max_seq_length={settings.max_seq_length} leaves no room for "
                                f"the context after --max_query_length={self.max_query_length}"
                                f" + 3")
        self.evaluating = settings.do_eval

    def prepare(self, setup) -> None:
        self.setup = setup
        self.max_seq_length = setup.max_seq_length
        self.inv_vocab = {i: token for token, i in setup.tokenizer.vocab.items()}

    def identity(self) -> dict:
        return {"task": "squad", "version_2_with_negative": self.version_2_with_negative,
                "doc_stride": self.doc_stride, "max_query_length": self.max_query_length}

    def metric_names(self) -> list:
        return V2_METRICS if self.version_2_with_negative else V1_METRICS

    def train_split(self) -> Split:
        return Split("train", [self.train_file], cache_settings={"is_training": True})

    def eval_splits(self) -> list:
        return [Split("eval", [self.predict_file], cache_settings={"is_training": False})]

    def predict_splits(self) -> list:
        return self.eval_splits()  # the same file: read once, as the same split

    def read(self, split: Split) -> list:
        from bert_tf2.tasks.squad.files import load_squad
        from bert_tf2.tasks.squad.reader import read_squad_examples

        path = split.files[0]
        is_training = split.cache_settings["is_training"]
        if not os.path.isfile(path):
            raise DataError(f"{path}: no such file")
        examples = read_squad_examples(path, is_training, self.version_2_with_negative)
        if not examples:
            raise DataError(f"{path}: no questions{' to train on' * is_training}")
        if not is_training:
            gold = load_squad(path)["data"]
            split.labelled = has_gold_answers(gold)
            if split.labelled:
                self.gold[split.name] = gold
            elif self.evaluating:
                raise SettingsError(f"--do_eval: {path} has questions without answers to score "
                                    f"against")
        return examples

    def records(self, split: Split):
        from bert_tf2.tasks.squad.features import SquadSettings, feature_records

        settings = SquadSettings(self.max_seq_length, self.doc_stride, self.max_query_length)
        return feature_records(split.examples, self.setup.tokenizer, settings,
                               split.cache_settings["is_training"])

    def load_features(self, path: str) -> dict:
        from bert_tf2.tasks.squad.features import load_features

        return load_features(path, self.max_seq_length)

    def dataset(self, features, batch_size, is_training, seed, input_context, batching):
        from bert_tf2.data_gen.datasets import in_memory_dataset
        from bert_tf2.tasks.squad.features import model_features

        return in_memory_dataset(model_features(features, is_training), batch_size, is_training,
                                 seed=seed, input_context=input_context,
                                 batching=batching)

    def build_model(self, config):
        from bert_tf2.modeling.encoder import BertEncoder
        from bert_tf2.modeling.models import BertSpanLabeler

        return BertSpanLabeler(BertEncoder(config))

    # ------------------------------------------------------------------ tensors
    def loss_and_metrics(self, model, batch, training: bool):
        outputs = model(model_inputs(batch), training=training)
        start, end = outputs["start_logits"], outputs["end_logits"]
        loss = losses.span_loss(start, end, batch["start_positions"], batch["end_positions"])
        examples = ops.cast(ops.shape(start)[0], "float32")
        hits = ops.logical_and(
            ops.equal(ops.cast(ops.argmax(start, -1), "int32"),
                      ops.cast(batch["start_positions"], "int32")),
            ops.equal(ops.cast(ops.argmax(end, -1), "int32"),
                      ops.cast(batch["end_positions"], "int32")))
        return loss, {"span_accuracy": (ops.sum(ops.cast(hits, "float32")), examples)}

    def predict_step(self, model, batch) -> dict:
        outputs = model(model_inputs(batch), training=False)
        return {name: pad_positions(ops.cast(outputs[name], "float32"), self.max_seq_length,
                                    PADDED_LOGIT)
                for name in ("start_logits", "end_logits")} | {
            "example_index": batch["example_index"]}

    # ------------------------------------------------------------------ results
    def predictions(self, split: Split, outputs: dict):
        """The decoded answers (`postprocess.Answers`) of every question of `split`."""
        from bert_tf2.tasks.squad.postprocess import DecodeSettings, predict_answers

        settings = DecodeSettings(self.n_best_size, self.max_answer_length,
                                  self.setup.do_lower_case, self.version_2_with_negative,
                                  self.null_score_diff_threshold)
        return predict_answers(split.examples, split.features, outputs["start_logits"],
                               outputs["end_logits"], self.inv_vocab, settings)

    def score(self, split: Split, answers) -> dict:
        from bert_tf2.tasks.squad import metrics

        gold = self.gold[split.name]
        if self.version_2_with_negative:
            return metrics.squad_v2_scores(gold, answers.predictions, answers.null_odds)
        return metrics.squad_v1_scores(gold, answers.predictions)

    def write_predictions(self, split: Split, answers, output_dir: str) -> str:
        from bert_tf2.process.atomic_files import write_text

        files = {"predictions.json": answers.predictions,
                 "nbest_predictions.json": answers.nbest}
        if self.version_2_with_negative:
            files["null_odds.json"] = answers.null_odds
        for name, content in files.items():
            write_text(os.path.join(output_dir, name), json.dumps(content, indent=4) + "\n")
        return os.path.join(output_dir, "predictions.json")

    def serving_module(self, model, vocab_file: str):
        from bert_tf2.tasks.squad.serving import SquadServing

        return SquadServing(model, vocab_file, self.setup.do_lower_case, self.max_seq_length,
                            self.doc_stride, self.max_query_length, self.n_best_size,
                            self.max_answer_length, self.version_2_with_negative,
                            self.null_score_diff_threshold)


def has_gold_answers(dataset: list) -> bool:
    return all(qa.get("answers") or qa.get("is_impossible")
               for article in dataset for paragraph in article["paragraphs"]
               for qa in paragraph["qas"])
