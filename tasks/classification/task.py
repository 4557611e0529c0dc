"""Sentence (pair) classification (GLUE, XNLI, any TSV/CSV) as the fine-tuning driver runs it.

The task's reader is a processor (`processors.get_processor`: the original's CoLA, MNLI, MRPC, XNLI
plus SST-2, STS-B, QQP, QNLI, RTE, WNLI, `generic` and `multilabel`); its labels come from the
training data (or `labels.txt`). The loss is the original's: mean cross-entropy of the labels, or,
for a regression task (one output, STS-B), the mean squared error; a multi-label task (any number
of labels per text) has a sigmoid per label and the mean binary cross-entropy. Evaluation scores
each split with its GLUE metrics (`metrics.glue_metrics`; multi-label: `multi_label_metrics`,
whose main score is micro-F1) and the loss; the main metric (`eval_main`) picks the best weights.
With `init_label_bias`, a fresh multi-label head starts with each label's bias at the log-odds of
its training frequency (`label_log_odds`). A multi-label decision is "probability above the
label's threshold": `threshold` (0.5) for every label, or, with `tune_threshold`, the threshold
(global or per label) that maximises F1 on the first evaluation split under the kept weights,
written to `thresholds.tsv`, used for the predictions and saved in the SavedModel.
Long documents (`doc_stride`, ours): each text longer than a row becomes overlapping windows, one
feature row each (`features.document_windows`; training keeps the first `max_windows` of a document
if set); evaluation, prediction and the SavedModel pool a document's window logits into one
(`window_pooling`: the mean, or the maximum of each logit), so every metric, file and answer is
one per document. An epoch of steps counts documents, as run_squad counts questions. Training
reads each window as an example with its document's labels (`window_loss="window"`), or, with
`window_loss="document"`, takes `train_batch_size` whole documents per step (all their windows,
`data_gen.datasets` `whole_examples`), pools each document's window logits as prediction does and
puts the loss on the documents: a window without evidence of a label is not taught to find it.
Files (`tasks.prediction_files`): `test_results.tsv`, the original's layout (probabilities only,
no header; regression: the score), and `test_predictions.tsv` and `eval_predictions.tsv` (what
the kept weights predict on dev): `id`, `prediction` and one probability per label (regression:
the score; multi-label: the predicted labels joined by "," and one probability per label, and
`eval_per_label.tsv` with each label's precision, recall, F1 and support). Tasks with two
evaluation or test splits (MNLI) write one file per split, suffixed `_matched`, `_mismatched`,
except `test_results.tsv`, which stays the matched split's, as the original wrote it.
"""
from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np
from keras import ops

from bert_tf2.data_gen.errors import DataError
from bert_tf2.engine.task import FinetuningTask, Split
from bert_tf2.modeling import losses
from bert_tf2.process.errors import SettingsError
from bert_tf2.tasks.classification.window_pooling import POOLINGS, pool_window_logits, pool_windows
from bert_tf2.tasks.tensors import model_inputs

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ClassificationTask(FinetuningTask):
    """A GLUE-style task read by a processor; the runner's flags are its fields."""

    task_name: str | None = None  # a GLUE task, xnli or generic (`processors.get_processor`)
    data_dir: str | None = None
    processor_options: dict = dataclasses.field(default_factory=dict)
    regression: bool = False  # until `check` reads it from the processor
    threshold: float = 0.5  # multi-label: a label is predicted when its probability exceeds it
    tune_threshold: str = "none"  # multi-label: "global" or "per_label" tunes it on dev
    doc_stride: int | None = None  # windows over long texts (None: the original's truncation)
    window_pooling: str = "mean"  # how a document's window logits become one: "mean" or "max"
    max_windows: int = 0  # training: at most this many windows of a document (0: all)
    window_loss: str = "window"  # training: "window" (each window an example) or "document"
    init_label_bias: bool = False  # multi-label: a fresh head's biases at the labels' log-odds
    packs_examples = True  # training rows may hold several examples (`--pack_examples`)

    def __post_init__(self):
        self.processor = None
        self.labels = []
        self.multi_label = False
        self.thresholds = None  # multi-label: one per label, once known
        self.label_frequencies = None  # multi-label: of the training documents, once read

    # ------------------------------------------------------------------ driver interface
    def check(self, settings) -> None:
        from bert_tf2.tasks.classification.processors import get_processor

        for name, value in (("task_name", self.task_name), ("data_dir", self.data_dir)):
            if not value:
                raise SettingsError(f"--{name} is required")
        name = self.task_name.lower()
        if name == "generic" and (self.processor_options.get("text_a_column") is None or (
                self.processor_options.get("label_column") is None
                and (settings.do_train or settings.do_eval))):
            raise SettingsError("--task_name=generic needs --text_a_column and --label_column")
        try:
            self.processor = get_processor(name, **self.processor_options)
        except ValueError as e:
            raise SettingsError(f"--task_name={self.task_name}: {e}") from None
        self.regression = self.processor.is_regression
        self.multi_label = self.processor.is_multi_label
        if not 0.0 < self.threshold < 1.0:
            raise SettingsError(f"--threshold={self.threshold}: a probability strictly between 0 "
                                "and 1 is needed")
        if self.tune_threshold not in TUNINGS:
            raise SettingsError(f"--tune_threshold={self.tune_threshold}: one of "
                                f"{', '.join(TUNINGS)}")
        if not self.multi_label and (self.threshold != 0.5 or self.tune_threshold != "none"):
            raise SettingsError("--threshold and --tune_threshold apply to multi-label tasks "
                                "(--task_name=multilabel, or generic with --multi_label)")
        if self.doc_stride is not None and self.doc_stride < 1:
            raise SettingsError(f"--doc_stride={self.doc_stride}: at least 1 (leave it out to "
                                "truncate as the original)")
        if self.doc_stride is not None and settings.max_seq_length < 4:
            raise SettingsError(f"--max_seq_length={settings.max_seq_length} with --doc_stride: "
                                "at least 4 ([CLS], two [SEP] and a token of the text that is "
                                "cut)")
        if self.window_pooling not in POOLINGS:
            raise SettingsError(f"--window_pooling={self.window_pooling}: one of "
                                f"{', '.join(POOLINGS)}")
        if self.max_windows < 0:
            raise SettingsError(f"--max_windows_per_document={self.max_windows}: at least 0 "
                                "(0: every window)")
        if self.doc_stride is None and (self.max_windows or self.window_pooling != "mean"):
            raise SettingsError("--window_pooling and --max_windows_per_document apply to "
                                "windows: add --doc_stride")
        if self.window_loss not in WINDOW_LOSSES:
            raise SettingsError(f"--window_loss={self.window_loss}: one of "
                                f"{', '.join(WINDOW_LOSSES)}")
        if self.window_loss == "document":
            if self.doc_stride is None:
                raise SettingsError("--window_loss=document applies to windows: add --doc_stride")
            if settings.pack_examples or settings.num_accumulation_steps > 1:
                raise SettingsError("--window_loss=document cannot be combined with "
                                    "--pack_examples or --num_accumulation_steps (its batches "
                                    "hold whole documents, a varying number of rows)")
        self.row_unit = "window" if self.doc_stride else None
        if self.init_label_bias and not self.multi_label:
            raise SettingsError("--init_label_bias applies to multi-label tasks "
                                "(--task_name=multilabel, or generic with --multi_label)")
        if self.tune_threshold != "none" and not settings.do_eval:
            raise SettingsError(f"--tune_threshold={self.tune_threshold} tunes on the dev split: "
                                "add --do_eval")

    @property
    def title(self) -> str:
        return self.processor.name

    def prepare(self, setup) -> None:
        self.setup = setup
        self.labels = [] if self.regression else list(self.processor.get_labels(self.data_dir))
        self.thresholds = np.full(len(self.labels), self.threshold)

    def identity(self) -> dict:
        identity = {"task": self.processor.name, "processor_options": self.processor_options,
                    "labels": self.labels}
        if self.doc_stride:  # only then, so that earlier runs' identity stays the same
            identity.update(doc_stride=self.doc_stride, max_windows=self.max_windows,
                            window_loss=self.window_loss)
        if self.window_loss == "document":  # trained for this pooling: predict with it alone
            identity["window_pooling"] = self.window_pooling
        return identity

    def metric_names(self) -> list:
        from bert_tf2.tasks.classification.metrics import glue_metrics

        if self.multi_label:
            from bert_tf2.tasks.classification.metrics import multi_label_metrics

            return sorted({"loss", *multi_label_metrics(np.eye(2), np.eye(2))})
        labels = np.array([0.0, 1.0]) if self.regression else np.array([0, 1])
        return sorted({"loss", *glue_metrics(self.processor.name, labels, labels)})

    def train_split(self) -> Split:
        return self._split(self.processor.train_split())

    def eval_splits(self) -> list:
        return [self._split(name) for name in self.processor.eval_splits()]

    def predict_splits(self) -> list:
        return [self._split(name, labelled=False) for name in self.processor.test_splits()]

    def _split(self, name: str, labelled: bool = True) -> Split:
        return Split(name, self.processor.split_files(self.data_dir, name), labelled)

    def read(self, split: Split) -> list:
        missing = [path for path in split.files if not os.path.isfile(path)]
        if missing:
            raise DataError(f"{missing[0]}: missing file ({self.processor.name} {split.name} "
                            f"split); check --data_dir")
        examples = self.processor.get_examples(self.data_dir, split.name)
        if self.multi_label and split.name == self.processor.train_split():
            counts = {label: 0 for label in self.labels}
            for example in examples:
                for label in example.label:
                    counts[label] += 1
            self.label_frequencies = np.array([counts[label] for label in self.labels]) / len(
                examples)
        return examples

    def records(self, split: Split):
        from bert_tf2.tasks.classification.features import example_records

        training = split.name == self.processor.train_split()
        return example_records(split.examples, self.labels, self.setup.max_seq_length,
                               self.setup.tokenizer, multi_label=self.multi_label,
                               doc_stride=self.doc_stride,
                               max_windows=self.max_windows if training else 0)

    def load_features(self, path: str) -> dict:
        from bert_tf2.tasks.classification.features import load_features

        return load_features(path, self.setup.max_seq_length, regression=not self.labels,
                             multi_label_size=len(self.labels) if self.multi_label else 0)

    def dataset(self, features, batch_size, is_training, seed, input_context, batching):
        """With `batching.pack`, training batches hold the same examples as unpacked ones
        (a fresh permutation, not bucketed) packed into fewer rows (`data_gen.example_packing`);
        evaluation and prediction batches are never packed."""
        from bert_tf2.data_gen.datasets import in_memory_dataset
        from bert_tf2.data_gen.example_packing import pack_batch

        if self.window_loss == "document" and is_training:  # whole documents, not bucketed
            return in_memory_dataset(features, batch_size, is_training, seed=seed,
                                     input_context=input_context, whole_examples=True,
                                     batching=dataclasses.replace(batching, bucket_window=0))
        if batching.pack and is_training:
            length = self.setup.max_seq_length
            return in_memory_dataset(
                features, batch_size, is_training, seed=seed, input_context=input_context,
                batching=dataclasses.replace(batching, trim=False, bucket_window=0),
                transform=lambda batch: pack_batch(
                    batch, length, width_multiple=batching.width_multiple))
        return in_memory_dataset(features, batch_size, is_training, seed=seed,
                                 input_context=input_context, batching=batching)

    def build_model(self, config):
        from bert_tf2.modeling.encoder import BertEncoder
        from bert_tf2.modeling.models import BertClassifier

        model = BertClassifier(BertEncoder(config), num_labels=len(self.labels) or 1)
        if self.init_label_bias and self.label_frequencies is not None:
            # Each label's bias at the log-odds of its training frequency, so that the fresh head
            # starts at the label prior rather than at 0.5 for every label (a checkpoint holding
            # the head, or a resumed run, replaces it).
            model.head.projection.output_bias.assign(label_log_odds(self.label_frequencies))
        return model

    # ------------------------------------------------------------------ tensors
    def loss_and_metrics(self, model, batch, training: bool):
        if "example_starts" in batch:  # packed rows
            logits = model.packed_logits(model_inputs(batch), batch["example_starts"],
                                         training=training)
        else:
            logits = model(model_inputs(batch), training=training)["logits"]
        if "example_slot" in batch:  # whole documents: the loss on their pooled window logits
            slots = batch["example_slot"]
            logits = pool_window_logits(ops.cast(logits, "float32"), slots, self.window_pooling)
            batch = {"label_ids": ops.segment_max(batch["label_ids"], slots, sorted=True)}
        examples = ops.cast(ops.shape(logits)[0], "float32")
        if self.regression:
            loss = losses.regression_loss(logits, batch["label_ids"])
            return loss, {"mean_squared_error": (loss * examples, examples)}
        if self.multi_label:
            targets = ops.cast(batch["label_ids"], "float32")
            loss = losses.multi_label_loss(logits, targets)
            exact = ops.all(ops.equal(ops.greater(logits, 0.0), ops.greater(targets, 0.5)),
                            axis=-1)
            return loss, {"subset_accuracy": (ops.sum(ops.cast(exact, "float32")), examples)}
        labels = ops.cast(batch["label_ids"], "int32")
        loss = losses.classification_loss(logits, labels)
        hits = ops.cast(ops.equal(ops.argmax(logits, -1), labels), "float32")
        return loss, {"accuracy": (ops.sum(hits), examples)}

    def predict_step(self, model, batch) -> dict:
        logits = ops.cast(model(model_inputs(batch), training=False)["logits"], "float32")
        return {"logits": logits, "example_index": batch["example_index"]}

    # ------------------------------------------------------------------ results
    def predictions(self, split: Split, outputs: dict) -> np.ndarray:
        """The logits (regression: the scores in column 0) of every example, in order; with
        windows, each document's windows pooled (`pool_windows`)."""
        if not self.doc_stride:
            return outputs["logits"]
        return pool_windows(outputs["logits"], split.features["example_index"],
                            len(split.examples), self.window_pooling)

    def _labels(self, split: Split) -> np.ndarray:
        """The gold label(s) of each example (with windows: of its first row)."""
        labels = split.features["label_ids"]
        if not self.doc_stride:
            return labels
        _, first = np.unique(split.features["example_index"], return_index=True)
        return labels[first]

    def score(self, split: Split, logits) -> dict:
        from bert_tf2.tasks.classification.metrics import glue_metrics

        labels = self._labels(split)
        if self.multi_label:
            from bert_tf2.tasks.classification.metrics import multi_label_metrics

            results = multi_label_metrics(labels, self.predicted(logits))
        else:
            results = glue_metrics(self.processor.name, labels, self.predicted(logits))
        results["loss"] = self.loss(logits, labels)
        return results

    def predicted(self, logits: np.ndarray, thresholds=None) -> np.ndarray:
        """Label ids (classification), scores (regression) or, multi-label, a 0/1 matrix (the
        probabilities above `thresholds`, by default `threshold`) from the model's logits."""
        if self.multi_label:
            limits = np.full(logits.shape[-1], self.threshold) if thresholds is None else thresholds
            return (sigmoid(logits) > limits).astype(np.int32)
        return logits[:, 0] if self.regression else np.argmax(logits, axis=-1)

    def loss(self, logits: np.ndarray, labels: np.ndarray) -> float:
        """The training loss over a whole split, from collected logits (float64)."""
        return float(np.mean(self.losses(logits, labels)))

    def losses(self, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Each example's training loss (float64): cross-entropy, or squared error."""
        logits = logits.astype(np.float64)
        if self.regression:
            return (logits[:, 0] - labels) ** 2
        if self.multi_label:  # the stable binary cross-entropy, averaged over the labels
            return np.mean(np.maximum(logits, 0) - logits * labels
                           + np.log1p(np.exp(-np.abs(logits))), axis=-1)
        from bert_tf2.tasks.prediction_files import log_softmax

        return -log_softmax(logits)[np.arange(len(labels)), labels]

    def example_losses(self, split: Split, logits) -> np.ndarray:
        return self.losses(logits, self._labels(split))

    def write_eval_outputs(self, split: Split, logits, output_dir: str) -> None:
        eval_splits = self.processor.eval_splits()
        if self.multi_label and split.name == eval_splits[0]:
            self._tune_thresholds(split, logits, output_dir)
        self._write_table(self._file(output_dir, "eval_predictions", split, eval_splits), split,
                          logits)
        if self.multi_label:
            from bert_tf2.tasks.classification.metrics import per_label_metrics
            from bert_tf2.tasks.prediction_files import write_label_table

            write_label_table(self._file(output_dir, "eval_per_label", split, eval_splits),
                              self.labels, per_label_metrics(self._labels(split),
                                                             self._decided(logits)))

    def _decided(self, logits) -> np.ndarray:
        """The multi-label decisions under the thresholds in force (tuned, or `threshold`)."""
        return self.predicted(logits, self.thresholds)

    def _tune_thresholds(self, split: Split, logits, output_dir: str) -> None:
        """Tuned thresholds from the kept weights' logits on the first dev split (none: the
        default), written to `thresholds.tsv` and used from here on."""
        from bert_tf2.tasks.classification.metrics import multi_label_metrics
        from bert_tf2.tasks.classification.thresholds import tune_thresholds
        from bert_tf2.tasks.prediction_files import write_label_table

        if self.tune_threshold == "none":
            return
        labels = self._labels(split)
        before = multi_label_metrics(labels, self.predicted(logits))["micro_f1"]
        self.thresholds = tune_thresholds(sigmoid(logits), labels,
                                          per_label=self.tune_threshold == "per_label")
        after = multi_label_metrics(labels, self._decided(logits))["micro_f1"]
        path = os.path.join(output_dir, "thresholds.tsv")
        write_label_table(path, self.labels, {"threshold": self.thresholds})
        logger.info("thresholds tuned on %s (%s): micro-F1 %.4f at %g, %.4f tuned (on the split "
                    "they were tuned on); %s", split.name, self.tune_threshold, before,
                    self.threshold, after, path)

    def write_predictions(self, split: Split, logits, output_dir: str) -> str:
        from bert_tf2.tasks.prediction_files import probabilities, write_test_results

        splits = self.processor.test_splits()
        self._write_table(self._file(output_dir, "test_predictions", split, splits), split, logits)
        # The original's file; of several test splits (MNLI), the one it predicted keeps its name.
        path = (os.path.join(output_dir, "test_results.tsv") if split.name == splits[0]
                else self._file(output_dir, "test_results", split, splits))
        if self.multi_label:
            write_test_results(path, sigmoid(logits))
        else:
            write_test_results(path, logits[:, :1] if self.regression else probabilities(logits))
        return path

    def _write_table(self, path: str, split: Split, logits) -> None:
        """Ours: `id`, `prediction` and one probability per label (regression: the score)."""
        from bert_tf2.tasks.prediction_files import probabilities, write_prediction_table

        ids = [example.example_id for example in split.examples]
        if self.multi_label:
            decided = self._decided(logits)
            write_prediction_table(path, ids, [",".join(np.asarray(self.labels)[row == 1])
                                               for row in decided],
                                   [f"probability_{label}" for label in self.labels],
                                   sigmoid(logits))
            return
        if self.regression:
            write_prediction_table(path, ids, [f"{score:.6f}" for score in logits[:, 0]], [],
                                   np.zeros((len(logits), 0)))
            return
        probs = probabilities(logits)
        write_prediction_table(path, ids, [self.labels[int(i)] for i in probs.argmax(-1)],
                               [f"probability_{label}" for label in self.labels], probs)

    @staticmethod
    def _file(output_dir: str, kind: str, split: Split, splits: list) -> str:
        suffix = "" if len(splits) == 1 else "_" + split.name.split("_", 1)[-1]
        return os.path.join(output_dir, f"{kind}{suffix}.tsv")

    def serving_module(self, model, vocab_file: str):
        from bert_tf2.tasks.classification.serving import ClassifierServing

        return ClassifierServing(model, vocab_file, self.setup.do_lower_case,
                                 self.setup.max_seq_length, self.labels,
                                 pair=self.processor.is_pair(self.data_dir),
                                 thresholds=self.thresholds if self.multi_label else None,
                                 doc_stride=self.doc_stride, pooling=self.window_pooling)


TUNINGS = ("none", "global", "per_label")
WINDOW_LOSSES = ("window", "document")


def label_log_odds(frequencies, floor: float = 1e-4) -> np.ndarray:
    """log(p / (1 - p)) of each label's frequency, p kept within [floor, 1 - floor]."""
    p = np.clip(np.asarray(frequencies, np.float64), floor, 1 - floor)
    return np.log(p / (1 - p)).astype(np.float32)


def sigmoid(logits) -> np.ndarray:
    """Each label's probability (multi-label), in float64."""
    logits = np.asarray(logits, np.float64)
    return np.exp(-np.logaddexp(0.0, -logits))
