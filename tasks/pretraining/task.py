"""The pretraining task: masked LM + next sentence on the records of `create_pretraining_data`.

Batches are the pretraining records' features (`input_ids`, `input_mask`, `segment_ids`,
`masked_lm_positions`, `masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels`), read as the
original's input function reads them (`data_gen.pretraining.dataset`), optionally masked afresh
at input time (`--dynamic_masking`, `data_gen.pretraining.dynamic_masking`). The loss is the
original's MLM + NSP sum, or with `nsp=False` (`--no_nsp`) the masked LM's alone: the pooler and
the NSP head stay in the model, so that its checkpoints load wherever BERT's do, but are not
trained (not trainable, so neither updated nor decayed: they keep their initial weights).
Metrics are (sum, count) pairs as `engine.training.Trainer` wants them: `masked_lm_accuracy` and
`masked_lm_loss` weighted by `masked_lm_weights`, as the original's `metric_fn` computes them
(and the next-sentence pair where it is trained). `engine.pretraining.pretrain` drives it.
"""
from __future__ import annotations

import dataclasses
import glob

from keras import ops

from bert_tf2.modeling import losses
from bert_tf2.process.errors import SettingsError
from bert_tf2.tasks.tensors import model_inputs


def pretrainer_inputs(batch) -> dict:
    """Record feature names -> the pretrainer's inputs: the encoder's and the masked positions."""
    return {**model_inputs(batch), "masked_lm_positions": batch["masked_lm_positions"]}


def input_files(pattern: str) -> list:
    """`--input_file`: comma-separated globs, each matching at least one file."""
    files = []
    for part in pattern.split(","):
        matched = sorted(glob.glob(part.strip()))
        if not matched:
            raise SettingsError(f"--input_file: no file matches {part.strip()!r}")
        files.extend(matched)
    return files


@dataclasses.dataclass
class PretrainingTask:
    input_file: str = ""  # comma-separated globs of record files
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    dynamic_masking: bool = False
    masked_lm_prob: float = 0.15
    nsp: bool = True  # False: --no_nsp, the masked LM's loss alone
    files: list = dataclasses.field(default_factory=list, init=False)
    masking: dict | None = dataclasses.field(default=None, init=False)

    def prepare(self, config, vocab_file: str | None) -> None:
        """The input files, and for dynamic masking the special tokens' ids; the sequence length
        is checked against the model before any graph is built."""
        if self.max_seq_length > config.max_position_embeddings:
            raise SettingsError(f"--max_seq_length={self.max_seq_length} exceeds the model's "
                                f"max_position_embeddings={config.max_position_embeddings} "
                                f"(bert_config.json): make the records with a shorter "
                                f"--max_seq_length, or use a model with more positions")
        if self.max_predictions_per_seq > self.max_seq_length:
            raise SettingsError(f"--max_predictions_per_seq={self.max_predictions_per_seq} "
                                f"exceeds --max_seq_length={self.max_seq_length}")
        self.files = input_files(self.input_file)
        from bert_tf2.data_gen.pretraining.record_files import check_record_files

        check_record_files(self.files, self.max_seq_length, self.max_predictions_per_seq)
        if not self.dynamic_masking:
            return
        wanted = round(self.max_seq_length * self.masked_lm_prob)
        if wanted > self.max_predictions_per_seq:
            raise SettingsError(
                f"--masked_lm_prob={self.masked_lm_prob} masks up to {wanted} of "
                f"{self.max_seq_length} tokens, but the records hold "
                f"--max_predictions_per_seq={self.max_predictions_per_seq}: make the records "
                f"with --max_predictions_per_seq={wanted} or more")
        if not vocab_file:
            raise SettingsError("--dynamic_masking needs --vocab_file (for the [MASK], [CLS], "
                                "[SEP] ids)")
        from bert_tf2.data_gen.tokenization import load_vocab, special_token_ids

        mask_id, cls_id, sep_id = special_token_ids(
            load_vocab(vocab_file), ("[MASK]", "[CLS]", "[SEP]"), source=vocab_file)
        self.masking = {"vocab_size": config.vocab_size, "mask_id": mask_id, "cls_id": cls_id,
                        "sep_id": sep_id, "masked_lm_prob": self.masked_lm_prob}

    def identity(self) -> dict:
        """What an output folder's run is trained on (`engine.run_config`)."""
        return {"task": "pretraining", "max_seq_length": self.max_seq_length,
                "max_predictions_per_seq": self.max_predictions_per_seq,
                "dynamic_masking": self.dynamic_masking,
                "masked_lm_prob": self.masked_lm_prob if self.dynamic_masking else None,
                "nsp": self.nsp}

    def input_error(self, error) -> Exception:
        """A `DataError` naming the input file and the byte or record where reading broke
        (`error`: what TensorFlow raised mid-training: a DataLossError, or the InvalidArgumentError
        of a record of other lengths)."""
        from bert_tf2.data_gen.errors import DataError
        from bert_tf2.data_gen.pretraining.record_files import (
            find_damaged_frame,
            find_unparsable_record,
        )

        where = find_damaged_frame(self.files) or find_unparsable_record(
            self.files, self.max_seq_length, self.max_predictions_per_seq)
        if where is None:  # the records hold: TensorFlow's own words say what broke
            detail = getattr(error, "message", str(error)).strip().splitlines()
            where = f"{', '.join(self.files)}: cannot read the records ({detail[0][:200]})"
        return DataError(f"{where}; make the file again with create_pretraining_data and rerun "
                         f"(training resumes from the last checkpoint)")

    def describe(self) -> str:
        return f"{len(self.files)} input files"

    def dataset(self, batch_size: int, is_training: bool, seed: int, input_context):
        from bert_tf2.process import environment

        if not environment.uses_tensorflow():  # JAX: the same rules in NumPy
            from bert_tf2.data_gen.pretraining.numpy_dataset import pretraining_batches

            return pretraining_batches(self.files, batch_size, self.max_seq_length,
                                       self.max_predictions_per_seq, is_training, seed=seed,
                                       input_context=input_context, masking=self.masking)
        from bert_tf2.data_gen.pretraining.dataset import pretraining_dataset
        from bert_tf2.data_gen.pretraining.dynamic_masking import with_dynamic_masking

        dataset = pretraining_dataset(self.files, batch_size, self.max_seq_length,
                                      self.max_predictions_per_seq, is_training, seed=seed,
                                      input_context=input_context)
        if self.masking:
            dataset = with_dynamic_masking(dataset, seed, **self.masking)
        return dataset

    def build_model(self, config):
        from bert_tf2.modeling.encoder import BertEncoder
        from bert_tf2.modeling.models import BertPretrainer

        model = BertPretrainer(BertEncoder(config),
                               max_predictions_per_seq=self.max_predictions_per_seq)
        if not self.nsp:  # nothing trains them: not trainable, so weight decay leaves them too
            model.encoder.pooler.trainable = False
            model.next_sentence.trainable = False
        return model

    def loss_and_metrics(self, model, batch, training: bool):
        outputs = model(pretrainer_inputs(batch), training=training)
        mlm_logits, nsp_logits = outputs["mlm_logits"], outputs["nsp_logits"]
        ids = ops.cast(batch["masked_lm_ids"], "int32")
        weights = ops.cast(batch["masked_lm_weights"], "float32")
        labels = ops.reshape(ops.cast(batch["next_sentence_labels"], "int32"), (-1,))
        mlm_loss = losses.masked_lm_loss(mlm_logits, ids, weights)
        mlm_nll = losses.token_nll(mlm_logits, ids)
        mlm_hits = ops.cast(ops.equal(ops.argmax(mlm_logits, -1), ids), "float32")
        metrics = {
            "masked_lm_accuracy": (ops.sum(mlm_hits * weights), ops.sum(weights)),
            "masked_lm_loss": (ops.sum(mlm_nll * weights), ops.sum(weights)),
        }
        if not self.nsp:
            return mlm_loss, metrics
        nsp_loss = losses.next_sentence_loss(nsp_logits, labels)
        nsp_nll = losses.token_nll(nsp_logits, labels)
        nsp_hits = ops.cast(ops.equal(ops.argmax(nsp_logits, -1), labels), "float32")
        examples = ops.cast(ops.shape(labels)[0], "float32")
        metrics["next_sentence_accuracy"] = (ops.sum(nsp_hits), examples)
        metrics["next_sentence_loss"] = (ops.sum(nsp_nll), examples)
        return mlm_loss + nsp_loss, metrics
