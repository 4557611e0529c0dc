"""Fine-tune BERT for named-entity recognition (CoNLL-2003 and any CoNLL-style tagging data).

The original never shipped an NER runner; this one follows its conventions and the paper's recipe:
each word's first WordPiece carries the word's tag and the other pieces are ignored; sentences too
long for `max_seq_length` are cut into overlapping windows and every word is read back from the
window where it has the most context. Scores are entity-level precision, recall and F1, overall
and per type, exactly as the `conlleval` script computes them (IOB1 or IOB2), written to
`eval_results.txt` and TensorBoard at every epoch's end, with the conlleval report in
`eval_report.txt` and the predictions in CoNLL format (`word gold predicted`) in
`eval_predictions.txt`. `--mode=feature_based` is the paper's ablation: the encoder is frozen,
its top four layers are concatenated per token, and a two-layer BiLSTM tags them. The task lives in
`tasks/ner/`; `engine.finetuning.finetune` runs it.

    python run_ner.py --data_dir=conll2003 --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
        --output_dir=out/ner --do_train --do_eval --learning_rate=5e-5 --num_train_epochs=3
"""
from __future__ import annotations

from absl import flags

from bert_tf2 import runner_flags
from bert_tf2.process import flag_ranges

FLAGS = flags.FLAGS

runner_flags.define_finetuning_flags(max_seq_length=128, learning_rate=5e-5,
                                     num_train_epochs=3.0, predict_batch_size=32)
runner_flags.define_data_file_flags("train.txt", "valid.txt (else dev.txt)", "test.txt")
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
flag_ranges.at_least_one("doc_stride", "feature_layers", "lstm_layers")
flag_ranges.check("lstm_units", 0, why="0: the encoder's hidden_size")


def build_task():
    """The task the flags describe (also what run_search checks a --metric against, before
    a trial runs)."""
    from bert_tf2.tasks.ner.task import NerTask

    return NerTask(FLAGS.data_dir, FLAGS.train_file, FLAGS.eval_file, FLAGS.predict_file,
                   FLAGS.input_format, FLAGS.label_column, FLAGS.labels, FLAGS.doc_stride,
                   FLAGS.mode, FLAGS.feature_layers, FLAGS.lstm_layers, FLAGS.lstm_units)


def main(argv):
    del argv
    runner_flags.finetune(build_task(), FLAGS.best_metric)


def console_main():
    runner_flags.main(main)


if __name__ == "__main__":
    console_main()
