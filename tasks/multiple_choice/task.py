"""Multiple choice (SWAG, or any context with N candidate answers) as the fine-tuning driver runs it.

Every (context, choice) pair is encoded, a dense layer scores each pooled output
(`modeling.models.BertMultipleChoice`), and a softmax over the N scores picks the choice; choices
an example does not have (fewer than `num_choices`) are masked to a score of -10000, so they are
never picked. The loss is the mean cross-entropy over the choices; evaluation scores accuracy (the
main metric) and the loss. Files: `eval_predictions.tsv` (what the kept weights predict on the
evaluation split) and `test_predictions.tsv`, both `id`, `prediction` (the chosen index) and one
probability per choice, and `test_results.tsv` in the original run_classifier's layout (the
probabilities only, no header). `num_choices` is 4 for SWAG; for `generic` data it is `--num_choices`, or
the most choices of any training example (of the evaluation or prediction file when not training).
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
from keras import ops

from bert_tf2.engine.task import FinetuningTask, Split
from bert_tf2.modeling import losses
from bert_tf2.process.errors import SettingsError
from bert_tf2.tasks.multiple_choice.features import MASKED_LOGIT
from bert_tf2.tasks.tensors import model_inputs

FILES = {"swag": {"train": ("train.csv",), "eval": ("val.csv",), "predict": ("test.csv",)},
         "generic": {"train": ("train.jsonl",), "eval": ("val.jsonl", "dev.jsonl"),
                     "predict": ("test.jsonl",)}}


@dataclasses.dataclass
class MultipleChoiceTask(FinetuningTask):
    """SWAG CSV or generic JSON lines; the runner's flags are its fields."""

    main_metric = "accuracy"

    task_name: str | None = None  # swag or generic (the file format)
    data_dir: str | None = None  # train/val/test .csv (swag) or .jsonl (generic), unless named
    train_file: str | None = None
    eval_file: str | None = None  # scored during and after training
    predict_file: str | None = None  # written to test_results.tsv; scored when labelled
    num_choices: int = 0  # 0: 4 for swag, else the most choices of the data

    def __post_init__(self):
        self.examples = {}  # path -> examples, read once

    @property
    def title(self) -> str:
        return f"multiple choice ({self.task_name}, {self.num_choices} choices)"

    # ------------------------------------------------------------------ driver interface
    def check(self, settings) -> None:
        if (self.task_name or "").lower() not in FILES:
            raise SettingsError(f"--task_name={self.task_name}: one of {', '.join(FILES)}")
        self.task_name = self.task_name.lower()
        for kind in FILES[self.task_name]:
            setattr(self, f"{kind}_file", self._file(kind))
        for wanted, kind in ((settings.do_train, "train"), (settings.do_eval, "eval"),
                             (settings.do_predict, "predict")):
            if wanted and not getattr(self, f"{kind}_file"):
                raise SettingsError(f"--do_{'eval' if kind == 'eval' else kind} needs "
                                    f"--{kind}_file or --data_dir")
        self.training = settings.do_train
        self.wanted = [kind for wanted, kind in ((settings.do_train, "train"),
                                                 (settings.do_eval, "eval"),
                                                 (settings.do_predict, "predict")) if wanted]

    def _file(self, kind: str) -> str | None:
        given = getattr(self, f"{kind}_file")
        if given or not self.data_dir:
            return given
        names = FILES[self.task_name][kind]
        for name in names:
            if os.path.isfile(os.path.join(self.data_dir, name)):
                return os.path.join(self.data_dir, name)
        return os.path.join(self.data_dir, names[0])

    def prepare(self, setup) -> None:
        self.setup = setup
        if self.num_choices:
            return
        if self.task_name == "swag":
            self.num_choices = 4
            return
        kinds = ["train"] if self.training else self.wanted
        if not kinds:  # only --export_dir: nothing says how many choices
            raise SettingsError("--num_choices is required to export without data to read")
        split = {"train": self.train_split, "eval": lambda: self.eval_splits()[0],
                 "predict": lambda: self.predict_splits()[0]}[kinds[0]]()
        self.num_choices = max(len(example.choices) for example in self.read(split))

    def identity(self) -> dict:
        return {"task": "multiple_choice", "format": self.task_name,
                "num_choices": self.num_choices}

    def metric_names(self) -> list:
        return ["accuracy", "loss"]

    def train_split(self) -> Split:
        return Split("train", [self.train_file])

    def eval_splits(self) -> list:
        return [Split("eval", [self.eval_file])]

    def predict_splits(self) -> list:
        from bert_tf2.tasks.multiple_choice.reader import has_labels

        labelled = os.path.isfile(self.predict_file) and has_labels(self.predict_file,
                                                                    self.task_name)
        return [Split("predict", [self.predict_file], labelled,
                      cache_settings={"labelled": labelled})]

    def read(self, split: Split) -> list:
        from bert_tf2.tasks.multiple_choice.reader import read_examples

        path = split.files[0]
        if path not in self.examples:
            self.examples[path] = read_examples(path, self.task_name, split.labelled)
        return self.examples[path]

    def records(self, split: Split):
        from bert_tf2.tasks.multiple_choice.features import example_records

        return example_records(split.examples, self.num_choices, self.setup.max_seq_length,
                               self.setup.tokenizer)

    def load_features(self, path: str) -> dict:
        from bert_tf2.tasks.multiple_choice.features import load_features

        return load_features(path, self.num_choices, self.setup.max_seq_length)

    def dataset(self, features, batch_size, is_training, seed, input_context, batching):
        from bert_tf2.data_gen.datasets import in_memory_dataset

        return in_memory_dataset(features, batch_size, is_training, seed=seed,
                                 input_context=input_context, batching=batching)

    def build_model(self, config):
        from bert_tf2.modeling.encoder import BertEncoder
        from bert_tf2.modeling.models import BertMultipleChoice

        return BertMultipleChoice(BertEncoder(config), num_choices=self.num_choices)

    # ------------------------------------------------------------------ tensors
    @staticmethod
    def choice_logits(model, batch, training: bool):
        """The model's score of every choice, the choices an example lacks masked out."""
        logits = ops.cast(model(model_inputs(batch), training=training)["logits"], "float32")
        return ops.where(ops.cast(batch["choice_mask"], "bool"), logits, MASKED_LOGIT)

    def loss_and_metrics(self, model, batch, training: bool):
        logits = self.choice_logits(model, batch, training)
        labels = ops.cast(batch["label_ids"], "int32")
        loss = losses.classification_loss(logits, labels)
        hits = ops.cast(ops.equal(ops.argmax(logits, -1), labels), "float32")
        return loss, {"accuracy": (ops.sum(hits), ops.cast(ops.shape(logits)[0], "float32"))}

    def predict_step(self, model, batch) -> dict:
        return {"logits": self.choice_logits(model, batch, False),
                "example_index": batch["example_index"]}

    # ------------------------------------------------------------------ results
    def predictions(self, split: Split, outputs: dict) -> np.ndarray:
        """The masked choice logits of every example, in order."""
        return outputs["logits"]

    def score(self, split: Split, logits) -> dict:
        from bert_tf2.tasks.multiple_choice.metrics import choice_metrics

        return choice_metrics(logits, split.features["label_ids"])

    def write_eval_outputs(self, split: Split, logits, output_dir: str) -> None:
        write_table(os.path.join(output_dir, "eval_predictions.tsv"), split.examples, logits)

    def write_predictions(self, split: Split, logits, output_dir: str) -> str:
        from bert_tf2.tasks.prediction_files import probabilities, write_test_results

        write_table(os.path.join(output_dir, "test_predictions.tsv"), split.examples, logits)
        path = os.path.join(output_dir, "test_results.tsv")
        write_test_results(path, probabilities(logits))
        return path

    def serving_module(self, model, vocab_file: str):
        from bert_tf2.tasks.multiple_choice.serving import MultipleChoiceServing

        return MultipleChoiceServing(model, vocab_file, self.setup.do_lower_case,
                                     self.setup.max_seq_length, self.num_choices)


def write_table(path: str, examples, logits) -> None:
    """Ours: `id`, `prediction` (the chosen index), one probability per choice."""
    from bert_tf2.tasks.prediction_files import probabilities, write_prediction_table

    probs = probabilities(logits)
    write_prediction_table(path, [example.example_id for example in examples],
                           [int(i) for i in probs.argmax(-1)],
                           [f"probability_{i}" for i in range(probs.shape[-1])], probs)
