"""Named-entity recognition (CoNLL-2003 and any CoNLL-style tagging data) as the driver runs it.

The original never shipped an NER runner; this task follows its conventions and the paper's
recipe: each word's first WordPiece carries the word's tag and the other pieces are ignored;
sentences too long for `max_seq_length` are cut into overlapping windows and every word is read
back from the window where it has the most context (`features`). The loss is the mean
cross-entropy over the labelled positions of the batch. Scores are entity-level precision, recall
and F1, overall and per type, exactly as the `conlleval` script computes them (IOB1 or IOB2,
`metrics`), with F1 as the main metric. `mode="feature_based"` is the paper's ablation: the
encoder is frozen, its top layers are concatenated per token, and a BiLSTM tags them. Files: the
predictions in CoNLL format (`word [gold] predicted`) in `eval_predictions.txt` and
`test_predictions.txt`, with the conlleval report in `eval_report.txt` (and `test_report.txt` when
the prediction file has tags).
"""
from __future__ import annotations

import dataclasses
import logging
import os

from keras import ops

from bert_tf2.engine.task import FinetuningTask, Split
from bert_tf2.modeling import losses
from bert_tf2.process.errors import SettingsError
from bert_tf2.tasks.tensors import model_inputs, pad_positions

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class NerTask(FinetuningTask):
    """NER from CoNLL columns or slash-tagged lines; the runner's flags are its fields."""

    unit = "sentence"
    row_unit = "window"
    main_metric = "f1"

    data_dir: str | None = None  # train.txt, valid.txt (or dev.txt), test.txt, unless named below
    train_file: str | None = None
    eval_file: str | None = None  # scored during and after training
    predict_file: str | None = None  # tagged by do_predict; scored when it has tags
    input_format: str = "conll"  # or "slash": word/TAG tokens, a sentence per line
    label_column: int = -1  # conll: the tag's column, negative from the end
    given_labels: list | None = None  # the tag set (default: the tags of the training data)
    doc_stride: int = 64  # pieces between the starts of a long sentence's windows
    mode: str = "fine_tune"  # or "feature_based": a BiLSTM on the frozen encoder's top layers
    feature_layers: int = 4  # feature_based: top encoder layers concatenated
    lstm_layers: int = 2  # feature_based: BiLSTM depth
    lstm_units: int = 0  # feature_based: units per direction (0: hidden_size)

    def __post_init__(self):
        self.train_file = _data_file(self.train_file, self.data_dir, ("train.txt",))
        self.eval_file = _data_file(self.eval_file, self.data_dir, ("valid.txt", "dev.txt"))
        self.predict_file = _data_file(self.predict_file, self.data_dir, ("test.txt",))
        self.given_labels = list(self.given_labels) if self.given_labels else None
        self.labels = []
        self.scheme = "no"
        self.train_sentences = None
        self.training = False

    @property
    def title(self) -> str:
        return f"NER ({self.mode}, {len(self.labels)} tags, {self.scheme} tagging)"

    # ------------------------------------------------------------------ driver interface
    def check(self, settings) -> None:
        if settings.do_train and not self.train_file:
            raise SettingsError("--do_train needs --train_file or --data_dir")
        if settings.do_eval and not self.eval_file:
            raise SettingsError("--do_eval needs --eval_file or --data_dir")
        if settings.do_predict and not self.predict_file:
            raise SettingsError("--do_predict needs --predict_file or --data_dir")
        self.training = settings.do_train

    def prepare(self, setup) -> None:
        from bert_tf2.tasks.ner.reader import detect_scheme, label_list

        self.setup = setup
        if self.mode == "feature_based" and not (
                1 <= self.feature_layers <= setup.config.num_hidden_layers):
            raise SettingsError(f"--feature_layers={self.feature_layers}: the model has "
                                f"{setup.config.num_hidden_layers} layers")
        if self.train_file and (self.training or not self.given_labels):
            self.train_sentences = self.read_sentences(self.train_file)
        if self.train_sentences is None and not self.given_labels:
            raise SettingsError("the tag set comes from --train_file (or --data_dir) or --labels")
        self.labels = (label_list(self.train_sentences, self.given_labels)
                       if self.train_sentences else list(self.given_labels))
        try:
            self.scheme = detect_scheme([s.labels for s in self.train_sentences or ()]) or "no"
        except ValueError:  # tags other than O, B-, I-: scored by conlleval's rules all the same
            self.scheme = "other"

    def identity(self) -> dict:
        identity = {"task": "ner", "mode": self.mode, "labels": self.labels,
                    "doc_stride": self.doc_stride, "input_format": self.input_format,
                    "label_column": self.label_column}
        if self.mode == "feature_based":
            identity.update({"feature_layers": self.feature_layers,
                             "lstm_layers": self.lstm_layers, "lstm_units": self.lstm_units})
        return identity

    def metric_names(self) -> list:
        """conlleval's scores, and each entity type's (`PER_f1`: the types come from the
        data, so as patterns)."""
        return ["accuracy", "f1", "precision", "recall", "*_f1", "*_precision", "*_recall"]

    def train_split(self) -> Split:
        return Split("train", [self.train_file], cache_settings={"has_labels": True})

    def eval_splits(self) -> list:
        return [Split("eval", [self.eval_file], cache_settings={"has_labels": True})]

    def predict_splits(self) -> list:
        labelled = self.has_tags(self.predict_file)
        return [Split("predict", [self.predict_file], labelled,
                      cache_settings={"has_labels": labelled})]

    def read(self, split: Split) -> list:
        from bert_tf2.tasks.ner.reader import check_labels

        has_labels = split.cache_settings["has_labels"]
        if split.name == "train" and self.train_sentences is not None:
            sentences = self.train_sentences
        else:
            sentences = self.read_sentences(split.files[0], has_labels)
        if has_labels:
            check_labels(sentences, self.labels)
        return sentences

    def read_sentences(self, path: str, has_labels: bool = True) -> list:
        from bert_tf2.tasks.ner import reader

        if self.input_format == "slash":
            return reader.read_slash_tagged(path)
        return reader.read_conll(path, self.label_column, has_labels=has_labels)

    def has_tags(self, path: str) -> bool:
        """Whether a prediction file carries tags: slash format always; conll with >1 column."""
        if self.input_format == "slash":
            return True
        from bert_tf2.data_gen.errors import DataError, decode_line

        if not os.path.isfile(path):
            raise DataError(f"{path}: missing file")
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                line = decode_line(path, number, raw)  # a DataError naming a non-UTF-8 line
                columns = line.lstrip("\ufeff").split()
                if columns and columns[0] != "-DOCSTART-":
                    return len(columns) > 1
        return False

    def records(self, split: Split):
        from bert_tf2.tasks.ner.features import example_records

        return example_records(split.examples,
                               self.labels if split.cache_settings["has_labels"] else None,
                               self.setup.max_seq_length, self.setup.tokenizer, self.doc_stride)

    def load_features(self, path: str) -> dict:
        from bert_tf2.tasks.ner.features import load_features

        return load_features(path, self.setup.max_seq_length)

    def dataset(self, features, batch_size, is_training, seed, input_context, batching):
        from bert_tf2.tasks.ner.features import ner_dataset

        return ner_dataset(features, batch_size, is_training, seed=seed,
                           input_context=input_context, batching=batching)

    def build_model(self, config):
        from bert_tf2.modeling.encoder import BertEncoder
        from bert_tf2.modeling.models import BertFeatureTagger, BertTokenClassifier

        if self.mode == "fine_tune":
            return BertTokenClassifier(BertEncoder(config), num_tags=len(self.labels))
        # Frozen features: the encoder runs without dropout, as extracted features would be.
        frozen = dataclasses.replace(config, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
        return BertFeatureTagger(BertEncoder(frozen), num_tags=len(self.labels),
                                 lstm_units=self.lstm_units, num_layers=self.lstm_layers,
                                 feature_layers=self.feature_layers)

    # ------------------------------------------------------------------ tensors
    def loss_and_metrics(self, model, batch, training: bool):
        logits = model(model_inputs(batch), training=training)["logits"]
        weights = ops.cast(batch["label_weights"], "float32")
        labels = ops.maximum(ops.cast(batch["label_ids"], "int32"), 0)
        count = ops.sum(weights)
        loss = ops.sum(weights * losses.token_nll(logits, labels)) / ops.maximum(count, 1.0)
        hits = ops.cast(ops.equal(ops.cast(ops.argmax(logits, -1), "int32"), labels), "float32")
        return loss, {"token_accuracy": (ops.sum(hits * weights), count)}

    def predict_step(self, model, batch) -> dict:
        logits = model(model_inputs(batch), training=False)["logits"]
        predicted = ops.cast(ops.argmax(logits, -1), "int32")
        return {"predicted_ids": pad_positions(predicted, self.setup.max_seq_length, -1),
                "example_index": batch["example_index"]}

    # ------------------------------------------------------------------ results
    def predictions(self, split: Split, outputs: dict) -> list:
        """Every sentence's predicted tags, one per word."""
        from bert_tf2.tasks.ner.features import reassemble

        ids = reassemble(split.features, outputs["predicted_ids"], len(split.examples))
        return [[self.labels[i] for i in sentence] for sentence in ids]

    def conlleval(self, split: Split, predicted: list):
        from bert_tf2.tasks.ner import metrics

        return metrics.evaluate([s.labels for s in split.examples], predicted)

    def score(self, split: Split, predicted: list) -> dict:
        result = self.conlleval(split, predicted)
        values = {"precision": result.precision, "recall": result.recall, "f1": result.f1,
                  "accuracy": result.accuracy}
        for name, typed in result.per_type.items():
            values.update({f"{name}_precision": typed.precision, f"{name}_recall": typed.recall,
                           f"{name}_f1": typed.f1})
        return values

    def write_eval_outputs(self, split: Split, predicted: list, output_dir: str) -> None:
        from bert_tf2.process.atomic_files import write_text
        from bert_tf2.tasks.ner import metrics

        write_tagged(os.path.join(output_dir, "eval_predictions.txt"), split.examples, predicted)
        write_text(os.path.join(output_dir, "eval_report.txt"),
                   metrics.report(self.conlleval(split, predicted)))

    def write_predictions(self, split: Split, predicted: list, output_dir: str) -> str:
        from bert_tf2.process.atomic_files import write_text
        from bert_tf2.tasks.ner import metrics

        path = os.path.join(output_dir, "test_predictions.txt")
        write_tagged(path, split.examples, predicted)
        if split.labelled:
            report = metrics.report(self.conlleval(split, predicted))
            write_text(os.path.join(output_dir, "test_report.txt"), report)
            logger.info("conlleval of the predictions:\n%s", report)
        return path

    def serving_module(self, model, vocab_file: str):
        from bert_tf2.tasks.ner.serving import NerServing

        return NerServing(model, vocab_file, self.setup.do_lower_case,
                          self.setup.max_seq_length, self.labels, self.doc_stride)


def _data_file(given: str | None, data_dir: str | None, names: tuple) -> str | None:
    """`given`, else the first of `names` in `data_dir` that exists (else the first name)."""
    if given:
        return given
    if data_dir:
        for name in names:
            path = os.path.join(data_dir, name)
            if os.path.isfile(path):
                return path
        return os.path.join(data_dir, names[0])
    return None


def write_tagged(path: str, sentences: list, predicted: list) -> None:
    """CoNLL lines `word [gold] predicted`, a blank line after each sentence."""
    from bert_tf2.process.atomic_files import write_text

    lines = []
    for sentence, tags in zip(sentences, predicted):
        golds = sentence.labels or [None] * len(tags)
        for word, gold, tag in zip(sentence.words, golds, tags):
            lines.append(" ".join([word, tag] if gold is None else [word, gold, tag]))
        lines.append("")
    write_text(path, "\n".join(lines) + "\n")
