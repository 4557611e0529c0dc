"""Flags of the local and the Beam front doors: the original's, with its defaults, and ours."""
from absl import flags

from bert_tf2.data_gen.pretraining import documents, nsp_pools
from bert_tf2.data_gen.pretraining.documents import InputOptions
from bert_tf2.data_gen.pretraining.instances import InstanceSettings

FLAGS = flags.FLAGS

def define_flags() -> None:
    """Define the flags, once the CLI runs (a module that defines flags on import collides with
    any other in the same process)."""
    if "max_predictions_per_seq" in FLAGS:
        return
    # The original create_pretraining_data.py's flags.
    flags.DEFINE_string("input_file", None,
                        "Input raw text file (or comma-separated list of files; globs allowed).")
    flags.DEFINE_string("output_file", None,
                        "Output TF example file (or comma-separated list of files).")
    flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
    flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True "
                      "for uncased models and False for cased models.")
    flags.DEFINE_bool("do_whole_word_mask", False,
                      "Whether to use whole word masking rather than per-WordPiece masking.")
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
    flags.DEFINE_integer("max_predictions_per_seq", 20,
                         "Maximum number of masked LM predictions per sequence.")
    flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
    flags.DEFINE_integer("dupe_factor", 10,
                         "Number of times to duplicate the input data (with different masks).")
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
    flags.DEFINE_float("short_seq_prob", 0.1, "Probability of creating sequences which are shorter "
                       "than the maximum length.")

    # New here.
    flags.DEFINE_bool("no_nsp", False, "The paper's 'No NSP' ablation: one segment [CLS] A [SEP] "
                      "filling the length; next_sentence_labels is always 0.")
    flags.DEFINE_bool("pack_sentences", False, "MLM-only rows with no padding (implies --no_nsp): "
                      "the documents' sentences one after another, [SEP] between two documents, "
                      "cut into rows of exactly --max_seq_length; --short_seq_prob is not used.")
    flags.DEFINE_enum("input_format", "sentence_lines", list(documents.READERS),
                      "sentence_lines: the original's one sentence per line, blank line between "
                      "documents; wikitext: ' = Title = ' starts an article, paragraphs split into "
                      "sentences; prose: one document per file, paragraphs split into sentences; "
                      "jsonl: one document per line, its \"text\" field's lines split into "
                      "sentences.")
    flags.DEFINE_bool("skip_invalid_utf8", False, "Drop bytes that are not UTF-8 (logged per file) "
                      "instead of stopping with an error naming the file and line.")
    flags.DEFINE_integer("pool_bytes", nsp_pools.DEFAULT_POOL_BYTES,
                         "Input text per pool of documents that random next sentences are drawn "
                         "from; bounds memory (see data_gen/nsp_pools.py).")
    flags.DEFINE_string("stats_file", None, "Where to write the statistics JSON (default: the first "
                        "output file + '.stats.json').")


REQUIRED = ("input_file", "output_file", "vocab_file")


def instance_settings() -> InstanceSettings:
    return InstanceSettings(
        max_seq_length=FLAGS.max_seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob,
        dupe_factor=FLAGS.dupe_factor, do_whole_word_mask=FLAGS.do_whole_word_mask,
        no_nsp=FLAGS.no_nsp or FLAGS.pack_sentences, pack_sentences=FLAGS.pack_sentences)


def input_options() -> InputOptions:
    return InputOptions(FLAGS.input_format, FLAGS.skip_invalid_utf8)
