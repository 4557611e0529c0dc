"""Sentence (pair) classification (GLUE, XNLI, any TSV/CSV) as the fine-tuning driver runs it.

The task's reader is a processor (`reader.get_processor`: the original's CoLA, MNLI, MRPC, XNLI
plus SST-2, STS-B, QQP, QNLI, RTE, WNLI and `generic`); its labels come from the training data.
The loss is the original's: mean cross-entropy of the labels, or, for a regression task (one
output, STS-B), the mean squared error. Evaluation scores each split with its GLUE metrics
(`metrics.glue_metrics`) and the loss; the main metric (`eval_main`) picks the best weights.
Files (`tasks.prediction_files`): `test_results.tsv`, the original's layout (probabilities only,
no header; regression: the score), and `test_predictions.tsv` and `eval_predictions.tsv` (what
the kept weights predict on dev): `id`, `prediction` and one probability per label (regression:
the score). Tasks with two evaluation or test splits (MNLI) write one file per split, suffixed
`_matched`, `_mismatched`, except `test_results.tsv`, which stays the matched split's, as the
original wrote it.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
from keras import ops

from data_gen.errors import DataError
from engine.task import FinetuningTask, Split
from modeling import losses
from modeling.errors import SettingsError
from tasks.tensors import model_inputs


@dataclasses.dataclass
class ClassificationTask(FinetuningTask):
    """A GLUE-style task read by a processor; the runner's flags are its fields."""

    task_name: str | None = None  # a GLUE task, xnli or generic (`reader.get_processor`)
    data_dir: str | None = None
    processor_options: dict = dataclasses.field(default_factory=dict)
    regression: bool = False  # until `check` reads it from the processor
    packs_examples = True  # training rows may hold several examples (`--pack_examples`)

    def __post_init__(self):
        self.processor = None
        self.labels = []

    # ------------------------------------------------------------------ driver interface
    def check(self, settings) -> None:
        from tasks.classification.reader import get_processor

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

    @property
    def title(self) -> str:
        return self.processor.name

    def prepare(self, setup) -> None:
        self.setup = setup
        self.labels = [] if self.regression else list(self.processor.get_labels(self.data_dir))

    def identity(self) -> dict:
        return {"task": self.processor.name, "processor_options": self.processor_options,
                "labels": self.labels}

    def metric_names(self) -> list:
        from tasks.classification.metrics import glue_metrics

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
        return self.processor.get_examples(self.data_dir, split.name)

    def records(self, split: Split):
        from tasks.classification.features import example_records

        return example_records(split.examples, self.labels, self.setup.max_seq_length,
                               self.setup.tokenizer)

    def load_features(self, path: str) -> dict:
        from tasks.classification.features import load_features

        return load_features(path, self.setup.max_seq_length, regression=not self.labels)

    def dataset(self, features, batch_size, is_training, seed, input_context, batching):
        """With `batching.pack`, training batches hold the same examples as unpacked ones
        (a fresh permutation, not bucketed) packed into fewer rows (`data_gen.example_packing`);
        evaluation and prediction batches are never packed."""
        from data_gen.datasets import in_memory_dataset
        from data_gen.example_packing import pack_batch

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
        from modeling.encoder import BertEncoder
        from modeling.models import BertClassifier

        return BertClassifier(BertEncoder(config), num_labels=len(self.labels) or 1)

    # ------------------------------------------------------------------ tensors
    def loss_and_metrics(self, model, batch, training: bool):
        if "example_starts" in batch:  # packed rows
            logits = model.packed_logits(model_inputs(batch), batch["example_starts"],
                                         training=training)
        else:
            logits = model(model_inputs(batch), training=training)["logits"]
        examples = ops.cast(ops.shape(logits)[0], "float32")
        if self.regression:
            loss = losses.regression_loss(logits, batch["label_ids"])
            return loss, {"mean_squared_error": (loss * examples, examples)}
        labels = ops.cast(batch["label_ids"], "int32")
        loss = losses.classification_loss(logits, labels)
        hits = ops.cast(ops.equal(ops.argmax(logits, -1), labels), "float32")
        return loss, {"accuracy": (ops.sum(hits), examples)}

    def predict_step(self, model, batch) -> dict:
        logits = ops.cast(model(model_inputs(batch), training=False)["logits"], "float32")
        return {"logits": logits, "example_index": batch["example_index"]}

    # ------------------------------------------------------------------ results
    def predictions(self, split: Split, outputs: dict) -> np.ndarray:
        """The logits (regression: the scores in column 0) of every example, in order."""
        return outputs["logits"]

    def score(self, split: Split, logits) -> dict:
        from tasks.classification.metrics import glue_metrics

        labels = split.features["label_ids"]
        results = glue_metrics(self.processor.name, labels, self.predicted(logits))
        results["loss"] = self.loss(logits, labels)
        return results

    def predicted(self, logits: np.ndarray) -> np.ndarray:
        """Label ids (classification) or scores (regression) from the model's logits."""
        return logits[:, 0] if self.regression else np.argmax(logits, axis=-1)

    def loss(self, logits: np.ndarray, labels: np.ndarray) -> float:
        """The training loss over a whole split, from collected logits (float64)."""
        return float(np.mean(self.losses(logits, labels)))

    def losses(self, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Each example's training loss (float64): cross-entropy, or squared error."""
        logits = logits.astype(np.float64)
        if self.regression:
            return (logits[:, 0] - labels) ** 2
        from tasks.prediction_files import log_softmax

        return -log_softmax(logits)[np.arange(len(labels)), labels]

    def example_losses(self, split: Split, logits) -> np.ndarray:
        return self.losses(logits, split.features["label_ids"])

    def write_eval_outputs(self, split: Split, logits, output_dir: str) -> None:
        self._write_table(self._file(output_dir, "eval_predictions", split,
                                     self.processor.eval_splits()), split, logits)

    def write_predictions(self, split: Split, logits, output_dir: str) -> str:
        from tasks.prediction_files import probabilities, write_test_results

        splits = self.processor.test_splits()
        self._write_table(self._file(output_dir, "test_predictions", split, splits), split, logits)
        # The original's file; of several test splits (MNLI), the one it predicted keeps its name.
        path = (os.path.join(output_dir, "test_results.tsv") if split.name == splits[0]
                else self._file(output_dir, "test_results", split, splits))
        write_test_results(path, logits[:, :1] if self.regression else probabilities(logits))
        return path

    def _write_table(self, path: str, split: Split, logits) -> None:
        """Ours: `id`, `prediction` and one probability per label (regression: the score)."""
        from tasks.prediction_files import probabilities, write_prediction_table

        ids = [example.example_id for example in split.examples]
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
        from tasks.classification.serving import ClassifierServing

        return ClassifierServing(model, vocab_file, self.setup.do_lower_case,
                                 self.setup.max_seq_length, self.labels,
                                 pair=self.processor.is_pair())
