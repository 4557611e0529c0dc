"""Puts a domain's worst-split words into a vocabulary's `[unused]` slots, every other id unchanged.

    python -m bert_tf2.data_gen.extend_vocab --input_file='domain/*.txt' --vocab_file=base/vocab.txt \
        --output_file=adapted/vocab.txt --num_words=500 [--do_lower_case (default)]
        [--input_format=jsonl: the text in each JSON line's "text" field]

Why: a released BERT splits a domain's own words into many pieces ("bundesbank" -> "bun ##des
##bank"), and the answer its authors gave (google-research/bert #9, #396) is to write new words
into the `[unusedN]` entries, so that the vocabulary keeps its size and every existing id its
meaning, then continue pretraining. Done by hand, users shift ids or miss the casing rule.

Words are counted as the tokenizer will see them (`BasicTokenizer`, the model's casing), each
split with the base vocabulary's WordPiece. A word's score is its count times the pieces a
whole-word entry saves (pieces - 1); the `--num_words` best (ties: the more frequent, then the
word's text), at least `--min_frequency` times in the corpus, take the `[unused]` slots in id
order (`[unused0]` first). `--words_file` gives the words instead (one per line, in that order).
The log reports pieces per word on the corpus before and after, and the words added.

With `--init_checkpoint` (a Google TF1 checkpoint or a Hugging Face folder/`model.safetensors`),
the model is written beside `--output_file` in the same format (TF1: `bert_config.json` and
`bert_model.ckpt.*`; Hugging Face: `config.json` and `model.safetensors`), each new entry's
word-embedding row the mean of its old pieces' rows, and where the checkpoint has a masked-LM head
its output bias the mean of theirs too; every other variable bit-identical.

Refused in one line, before anything is written: a vocabulary without `[unused]` entries left (or
fewer than the words given), a given word the basic tokenizer would split (punctuation, spaces,
CJK) or one already in the vocabulary, and a casing mismatch (`--do_lower_case` with a vocabulary
that holds upper-case entries, or `--nodo_lower_case` with one that holds none).
"""
from __future__ import annotations

import collections
import dataclasses
import os
import re

from absl import flags, logging

from bert_tf2.data_gen import tokenization
from bert_tf2.process import output_lock
from bert_tf2.process.atomic_files import write_text
from bert_tf2.process.errors import SettingsError, as_user_error, run_main

UNUSED = re.compile(r"^\[unused\d+\]$")


@dataclasses.dataclass
class Extension:
    """What `extend` chose: the new vocabulary and, per added word, its id and old pieces."""
    tokens: list  # the new vocab.txt's lines, as many as before
    added: list  # (id, word, [old pieces])
    pieces_before: float  # WordPieces per word on the corpus, base vocabulary
    pieces_after: float  # and with the new entries


def unused_ids(tokens: list) -> list:
    """Ids of the `[unusedN]` entries, in id order."""
    return [i for i, token in enumerate(tokens) if UNUSED.match(token)]


def check_casing(tokens: list, do_lower_case: bool, source: str) -> None:
    """A cased vocabulary holds entries that lower-casing changes; an uncased one none (the
    bracketed specials aside)."""
    cased = any(token.lower() != token for token in tokens  # ("ℝ" is upper but has no lower)
                if not (token.startswith("[") and token.endswith("]")))
    if do_lower_case and cased:
        raise SettingsError(f"{source} holds upper-case entries (a cased model) but "
                            "--do_lower_case is set: add --nodo_lower_case")
    if not do_lower_case and not cased:
        raise SettingsError(f"{source} holds no upper-case entry (an uncased model) but "
                            "--nodo_lower_case is set: use --do_lower_case")


def pieces_per_word(counts: collections.Counter, wordpiece) -> float:
    words = sum(counts.values())
    pieces = sum(count * len(wordpiece.tokenize_word(word)) for word, count in counts.items())
    return pieces / words if words else 0.0


def choose_words(counts: collections.Counter, wordpiece, num_words: int,
                 min_frequency: int = 2) -> list:
    """The `num_words` words with the most pieces saved (count x (pieces - 1)), best first."""
    scored = []
    for word, count in counts.items():
        if count < min_frequency or len(word) > wordpiece.max_input_chars_per_word:
            continue
        pieces = wordpiece.tokenize_word(word)
        if len(pieces) > 1:
            scored.append((-count * (len(pieces) - 1), -count, word))
    return [word for _, _, word in sorted(scored)[:num_words]]


def check_words(words: list, tokens: list, do_lower_case: bool, source: str) -> None:
    """Each given word must be one basic-tokenizer word, new to the vocabulary."""
    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    known = set(tokens)
    for number, word in enumerate(words, 1):
        if basic.tokenize(word) != [word]:
            raise SettingsError(f"{source}:{number}: {word!r} is not one word to the basic "
                                f"tokenizer (it gives {basic.tokenize(word)}); the model could "
                                "never see it whole")
        if word in known:
            raise SettingsError(f"{source}:{number}: {word!r} is already in the vocabulary")
    repeated = sorted({w for w in words if words.count(w) > 1})
    if repeated:
        raise SettingsError(f"{source}: {repeated[0]!r} is listed more than once")


def extend(tokens: list, counts: collections.Counter, words: list) -> Extension:
    """`tokens` with `words` written into its first `[unused]` slots."""
    slots = unused_ids(tokens)
    if len(words) > len(slots):
        raise SettingsError(f"{len(words)} words but the vocabulary has {len(slots)} [unused] "
                            "entries left")
    vocab = {token: i for i, token in enumerate(tokens)}
    before = tokenization.WordpieceTokenizer(vocab)
    new_tokens = list(tokens)
    added = []
    for slot, word in zip(slots, words):
        new_tokens[slot] = word
        added.append((slot, word, [piece for piece, _, _ in before.tokenize_word(word)]))
    after = tokenization.WordpieceTokenizer({token: i for i, token in enumerate(new_tokens)})
    return Extension(new_tokens, added, pieces_per_word(counts, before),
                     pieces_per_word(counts, after))


def extend_checkpoint(path: str, added: list, old_tokens: list, output_dir: str) -> list:
    """The model at `path`, its rows for `added` (id, word, old pieces) set to the mean of the
    pieces' rows (embeddings and masked-LM bias), written to `output_dir` in its own format."""
    import numpy as np

    from bert_tf2.modeling import checkpoints, convert
    from bert_tf2.modeling.encoder import BertEncoder

    fmt = checkpoints.detect_format(path)
    if fmt == "keras":
        raise SettingsError(f"--init_checkpoint={path}: a .keras model; give its TF1 or Hugging "
                            "Face form (python -m bert_tf2.modeling.convert)")
    model = convert.load_any(path, fmt)
    encoder = model if isinstance(model, BertEncoder) else model.encoder
    if encoder.config.vocab_size != len(old_tokens):
        raise SettingsError(f"--init_checkpoint={path}: vocab_size {encoder.config.vocab_size}, "
                            f"but --vocab_file has {len(old_tokens)} entries")
    ids = {token: i for i, token in enumerate(old_tokens)}
    rows = [[ids[piece] for piece in pieces] for _, _, pieces in added]
    variables = [encoder.embedding_table]
    masked_lm = getattr(model, "masked_lm", None)
    if masked_lm is not None:
        variables.append(masked_lm.output_bias)
    for variable in variables:
        values = np.array(variable.numpy())
        for (slot, _, _), pieces in zip(added, rows):
            values[slot] = values[pieces].mean(axis=0)
        variable.assign(values)
    return convert.save_any(model, output_dir, fmt)


# ------------------------------------------------------------------------------------ command line
FLAGS = flags.FLAGS


def main(argv) -> None:
    del argv
    from bert_tf2.data_gen.learn_vocab import count_words, input_paths

    try:
        paths = input_paths(FLAGS.input_file)
        tokens = tokenization.load_vocab_tokens(FLAGS.vocab_file)
        check_casing(tokens, FLAGS.do_lower_case, FLAGS.vocab_file)
        slots = unused_ids(tokens)
        if not slots:
            raise SettingsError(f"{FLAGS.vocab_file} has no [unused] entries left to write "
                                "words into")
        words = None
        if FLAGS.words_file:
            with open(FLAGS.words_file, encoding="utf-8") as f:
                words = [line.strip() for line in f if line.strip()]
            check_words(words, tokens, FLAGS.do_lower_case, FLAGS.words_file)
        output_lock.check_file_output(FLAGS.output_file, "--output_file")
        with output_lock.holding({FLAGS.output_file: "--output_file"}):
            counts = count_words(paths, FLAGS.do_lower_case, input_format=FLAGS.input_format)
            if not counts:
                raise ValueError(f"--input_file={FLAGS.input_file!r}: no words in "
                                 f"{len(paths)} files")
            if words is None:
                wordpiece = tokenization.WordpieceTokenizer(
                    {token: i for i, token in enumerate(tokens)})
                words = choose_words(counts, wordpiece, min(FLAGS.num_words or len(slots),
                                                            len(slots)), FLAGS.min_frequency)
            extension = extend(tokens, counts, words)
            if FLAGS.init_checkpoint:
                written = extend_checkpoint(FLAGS.init_checkpoint, extension.added, tokens,
                                            os.path.dirname(os.path.abspath(FLAGS.output_file)))
                logging.info("wrote the model with %d new rows: %s", len(extension.added),
                             ", ".join(written))
            write_text(FLAGS.output_file, "".join(token + "\n" for token in extension.tokens))
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise as_user_error(error) from None
    logging.info("wrote %s: %d words in [unused] slots (%d left); WordPieces per word on the "
                 "corpus %.4f -> %.4f", FLAGS.output_file, len(extension.added),
                 len(slots) - len(extension.added), extension.pieces_before,
                 extension.pieces_after)
    shown = ", ".join(f"{word} ({' '.join(pieces)})" for _, word, pieces in extension.added[:20])
    logging.info("first words added: %s", shown)


def define_flags() -> None:
    """Defined when the CLI runs, not on import (flags defined on import collide)."""
    if "words_file" in FLAGS:
        return
    flags.DEFINE_string("input_file", None, "Domain text: comma-separated paths or glob patterns.")
    flags.DEFINE_enum("input_format", "text", ("text", "jsonl"), "text: every line is text; "
                      "jsonl: JSON lines, the text in each line's \"text\" field.")
    flags.DEFINE_string("vocab_file", None, "The model's vocab.txt.")
    flags.DEFINE_string("output_file", None, "Where to write the extended vocab.txt.")
    flags.DEFINE_integer("num_words", 0, "Words to add (0: as many as there are [unused] "
                         "slots).", lower_bound=0)
    flags.DEFINE_integer("min_frequency", 2, "Only words seen at least this often.",
                         lower_bound=1)
    flags.DEFINE_string("words_file", None, "Add these words (one per line) instead of choosing.")
    flags.DEFINE_bool("do_lower_case", True, "The model's casing (uncased: True).")
    flags.DEFINE_string("init_checkpoint", None, "Also write this model (TF1 or Hugging Face) "
                        "beside --output_file, in its format, the new rows the mean of their "
                        "old pieces' rows.")


def console_main():
    define_flags()
    flags.mark_flags_as_required(["input_file", "vocab_file", "output_file"])
    run_main(main)


if __name__ == "__main__":
    console_main()
