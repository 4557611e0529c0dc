"""What a fine-tuning task gives the shared driver (`engine.finetuning.finetune`).

The driver owns this contract and knows tasks only through it. A task is one folder of `tasks/`
(reader, features, metrics, serving) and one `FinetuningTask` subclass that the driver calls in
this order:

1. `check(settings)`: usage errors that need no file (flag combinations), before anything else;
2. `prepare(setup)`: the model's config, the tokenizer, `max_seq_length` and casing are known;
   read what the head needs (the label list from the training data, say);
3. `identity()`: what decides the features and the head (recorded in `run_config.json`; an
   `output_dir` holds one such run, and cached features are keyed by it);
4. `train_split()`, `eval_splits()`, `predict_splits()`: the `Split`s to read, each converted once
   by `read` and `records` into `OUTPUT_DIR/NAME.tf_record` and held in memory (`load_features`);
5. `build_model(config)`, `loss_and_metrics`, `predict_step`, `dataset`: what training, evaluation
   and prediction run (`engine.training.Trainer`);
6. `predictions(split, outputs)`: the model's outputs on a split (collected in row order) as the
   task's answers; `score` its metrics from them, `write_eval_outputs` and `write_predictions`
   its result files;
7. `serving_module(model, vocab_file)`: the `tf.Module` that `--export_dir` saves.

Rows of every split's features carry `example_index` and `is_real_example` (see
`data_gen.datasets`); `predict_step` must return `example_index` so that the driver can put the
outputs back in row order.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Iterable


@dataclasses.dataclass
class Split:
    """A named part of a task's data, and once read, its examples and features."""

    name: str  # the features file's stem: OUTPUT_DIR/NAME.tf_record
    files: list  # the input files (fingerprinted, with the vocabulary, for the features cache)
    labelled: bool = True  # holds gold labels to score against
    cache_settings: dict = dataclasses.field(default_factory=dict)  # beyond the task's identity
    examples: Any = None  # what `FinetuningTask.read` gave
    features: dict | None = None  # NumPy arrays by name, one row per model input

    @property
    def rows(self) -> int:
        return len(self.features["example_index"])


@dataclasses.dataclass
class Setup:
    """What `prepare` learns once the driver has resolved the model's files."""

    config: Any  # modeling.config.BertConfig
    vocab_file: str
    tokenizer: Any  # data_gen.tokenization.FullTokenizer
    max_seq_length: int
    do_lower_case: bool


class FinetuningTask(abc.ABC):
    """A fine-tuning task, as the driver sees it (see the module docstring for the order)."""

    title: str  # how the log names it ("MRPC", "SQuAD 1.1", "NER (fine_tune, 9 tags)")
    unit = "example"  # what one example is called in the log (question, sentence)
    row_unit: str | None = None  # what a feature row is, where examples have several (window)
    main_metric = "main"  # evaluation key (without `eval_`) that picks the best weights
    packs_examples = False  # its training batches can pack several examples into one row

    def check(self, settings) -> None:
        """Raise `process.errors.SettingsError` for settings this task cannot run with."""

    @abc.abstractmethod
    def prepare(self, setup: Setup) -> None: ...

    @abc.abstractmethod
    def identity(self) -> dict: ...

    def metric_names(self) -> list | None:
        """The keys `score` returns, to check `--best_metric` before training (None: only known
        from the data)."""
        return None

    # ------------------------------------------------------------------ data
    @abc.abstractmethod
    def train_split(self) -> Split: ...

    @abc.abstractmethod
    def eval_splits(self) -> list: ...

    @abc.abstractmethod
    def predict_splits(self) -> list: ...

    @abc.abstractmethod
    def read(self, split: Split) -> Any:
        """The split's examples, read from `split.files`."""

    @abc.abstractmethod
    def records(self, split: Split) -> Iterable[bytes]:
        """The serialised features of `split.examples`, in order."""

    @abc.abstractmethod
    def load_features(self, path: str) -> dict: ...

    def num_train_examples(self, split: Split) -> int:
        """What an epoch counts (the original's step arithmetic): examples, not windows."""
        return len(split.examples)

    @abc.abstractmethod
    def dataset(self, features: dict, batch_size: int, is_training: bool, seed: int,
                input_context, batching):
        """The `tf.data` batches of `features` for one input pipeline, shaped as `batching`
        (`data_gen.datasets.Batching`) says."""

    # ------------------------------------------------------------------ model
    @abc.abstractmethod
    def build_model(self, config): ...

    @abc.abstractmethod
    def loss_and_metrics(self, model, batch, training: bool): ...

    @abc.abstractmethod
    def predict_step(self, model, batch) -> dict: ...

    # ------------------------------------------------------------------ results
    @abc.abstractmethod
    def predictions(self, split: Split, outputs: dict) -> Any:
        """The model's `predict_step` outputs on `split` (in row order) as the task's answers:
        labels, answer spans, tags per word."""

    @abc.abstractmethod
    def score(self, split: Split, predictions) -> dict:
        """The task's metrics of `predictions` on `split` (keys without the `eval_` prefix)."""

    def example_losses(self, split: Split, predictions):
        """The training loss of each example (a NumPy vector), for tasks whose original runner
        reports Estimator's `loss` key (the mean over evaluation batches of each batch's mean
        loss); None (the default): no such key."""
        return None

    def write_eval_outputs(self, split: Split, predictions, output_dir: str) -> None:
        """Files showing what the kept weights predict on an evaluation split (default: none)."""

    @abc.abstractmethod
    def write_predictions(self, split: Split, predictions, output_dir: str) -> str:
        """The prediction file(s) of `split`; returns the main file's path."""

    @abc.abstractmethod
    def serving_module(self, model, vocab_file: str): ...
