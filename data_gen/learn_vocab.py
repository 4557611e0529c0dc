"""Learns a WordPiece vocab.txt from raw text, laid out like the original BERT vocabularies.

    python -m bert_tf2.data_gen.learn_vocab --input_file='corpus/*.txt' --vocab_size=30522 \
        --output_file=vocab.txt [--do_lower_case (default) | --nodo_lower_case]

Words are counted exactly as the tokenizer will see them (`BasicTokenizer`, same casing), so every
learned entry is reachable. Layout, as in the released uncased vocabulary: `[PAD]` = 0,
`[unused0]`..`[unused98]` = 1..99, `[UNK]` = 100, `[CLS]` = 101, `[SEP]` = 102, `[MASK]` = 103,
`[unused99]`.. up to `--num_unused_tokens`, then every character seen (sorted by code point), the
learned entries (in merge order: most frequent first), and `##` + every character seen, so no text that was in the
corpus can become `[UNK]` for want of a character (only a word over 200 characters can).

Learning merges the most frequent adjacent pair of pieces, counted over word frequencies, until the
vocabulary is full (ties broken by the pieces' text, so the output is deterministic); a word's
first piece has no prefix and the others carry `##`. The file is written under a temporary name and
renamed, so a reader never sees half a vocabulary.
"""
import collections
import glob
import heapq
import os

from absl import flags, logging

from bert_tf2.data_gen import tokenization
from bert_tf2.process import output_lock
from bert_tf2.process.atomic_files import write_text
from bert_tf2.process.errors import SettingsError, as_user_error, run_main

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
UNUSED_BEFORE_SPECIALS = 99  # [unused0]..[unused98] sit between [PAD] and [UNK] = 100
NUM_UNUSED_TOKENS = 994  # as bert-base-uncased: [unused0]..[unused993]
MAX_TOKEN_CHARS = 50  # FastWordpieceTokenizer takes entries up to 256 bytes


def reserved_tokens(num_unused: int = NUM_UNUSED_TOKENS) -> list:
    """`[PAD]`, the unused slots and the special tokens at the original vocabularies' ids."""
    if num_unused < UNUSED_BEFORE_SPECIALS:
        raise SettingsError(f"--num_unused_tokens={num_unused}: [UNK] is id 100 only with at least "
                         f"{UNUSED_BEFORE_SPECIALS} unused tokens before it")
    unused = [f"[unused{i}]" for i in range(num_unused)]
    return (["[PAD]"] + unused[:UNUSED_BEFORE_SPECIALS] + list(SPECIAL_TOKENS)
            + unused[UNUSED_BEFORE_SPECIALS:])


INPUT_FORMATS = ("text", "jsonl")  # every line is text; or each line's JSON "text" field


def count_words(paths, do_lower_case: bool, skip_invalid_utf8: bool = False,
                input_format: str = "text") -> collections.Counter:
    """How often each basic-tokenizer word occurs in the files (`jsonl`: in each line's `"text"`
    field, a bad line named as `create_pretraining_data --input_format=jsonl` names it). Bytes that
    are not UTF-8 stop the count with an error naming the file and line, as
    `create_pretraining_data` does (a Latin-1 corpus would otherwise lose every accented letter
    without a word), unless `skip_invalid_utf8` drops them."""
    from bert_tf2.data_gen.pretraining.documents import file_lines, jsonl_documents

    basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    counts = collections.Counter()
    for path in paths:
        lines = file_lines(path, skip_invalid_utf8)
        if input_format == "jsonl":
            texts = (sentence for document in jsonl_documents(lines) for sentence in document)
        else:
            texts = (line.text for line in lines)
        for text in texts:
            counts.update(basic.tokenize(text))
        logging.info("counted %s: %d distinct words so far", path, len(counts))
    return counts


def learn_merges(word_counts, max_tokens: int, min_frequency: int = 2,
                 max_token_chars: int = MAX_TOKEN_CHARS) -> list:
    """Up to `max_tokens` multi-character entries, in the order the pair merges made them.

    Stops early when no pair of pieces occurs `min_frequency` times any more.
    """
    words = [[w[0]] + ["##" + c for c in w[1:]] for w in word_counts]
    freqs = list(word_counts.values())
    pair_counts = collections.Counter()
    pair_words = collections.defaultdict(set)
    for index, (pieces, freq) in enumerate(zip(words, freqs)):
        for pair in zip(pieces, pieces[1:]):
            pair_counts[pair] += freq
            pair_words[pair].add(index)
    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)
    learned, seen = [], set()
    while heap and len(learned) < max_tokens:
        count, pair = heapq.heappop(heap)
        if -count != pair_counts.get(pair):
            continue  # stale entry: the pair's count changed and was pushed again
        if -count < min_frequency:
            break
        merged = pair[0] + pair[1][2:]
        if len(merged) - 2 * merged.startswith("##") > max_token_chars:
            del pair_counts[pair]
            continue
        changed = set()
        for index in pair_words.pop(pair):
            changed.update(_merge_in_word(words, freqs[index], index, pair, merged,
                                          pair_counts, pair_words))
        del pair_counts[pair]
        for other in changed - {pair}:
            if pair_counts.get(other, 0) > 0:
                heapq.heappush(heap, (-pair_counts[other], other))
        if merged not in seen:
            seen.add(merged)
            learned.append(merged)
    return learned


def _merge_in_word(words, freq, index, pair, merged, pair_counts, pair_words) -> set:
    """Merges every occurrence of `pair` in word `index`; returns the pairs whose count changed."""
    old = words[index]
    new, i = [], 0
    while i < len(old):
        if i + 1 < len(old) and (old[i], old[i + 1]) == pair:
            new.append(merged)
            i += 2
        else:
            new.append(old[i])
            i += 1
    words[index] = new
    old_pairs, new_pairs = list(zip(old, old[1:])), list(zip(new, new[1:]))
    for p in old_pairs:
        pair_counts[p] -= freq
    for p in new_pairs:
        pair_counts[p] += freq
        pair_words[p].add(index)
    for p in set(old_pairs) - set(new_pairs):
        pair_words[p].discard(index)
    return set(old_pairs) | set(new_pairs)


def build_vocab(word_counts, vocab_size: int, num_unused: int = NUM_UNUSED_TOKENS,
                min_frequency: int = 2) -> list:
    """The whole vocabulary in id order: reserved, characters, learned entries, `##` characters."""
    reserved = reserved_tokens(num_unused)
    chars = sorted({char for word in word_counts for char in word})
    needed = len(reserved) + 2 * len(chars)
    if vocab_size < needed:
        raise SettingsError(
            f"--vocab_size={vocab_size} is too small: {len(reserved)} reserved entries "
            f"(--num_unused_tokens={num_unused}) and {len(chars)} characters seen, each alone "
            f"and with '##', need {needed} before anything is learned")
    learned = learn_merges(word_counts, vocab_size - needed, min_frequency)
    vocab = reserved + chars + learned + ["##" + char for char in chars]
    if len(vocab) < vocab_size:
        logging.warning("the text supports only %d entries (no pair of pieces occurs %d times any "
                        "more): wrote %d, not --vocab_size=%d", len(vocab), min_frequency,
                        len(vocab), vocab_size)
    return vocab


def input_paths(input_file: str) -> list:
    """The files of a comma-separated list of paths and glob patterns, as the original accepts."""
    paths = []
    for pattern in filter(None, (p.strip() for p in input_file.split(","))):
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"--input_file: no file matches {pattern!r}")
        paths.extend(m for m in matches if os.path.isfile(m))
    if not paths:
        raise FileNotFoundError(f"--input_file={input_file!r} names no file")
    return paths


FLAGS = flags.FLAGS


def main(argv) -> None:
    del argv
    try:
        paths = input_paths(FLAGS.input_file)
        reserved_tokens(FLAGS.num_unused_tokens)  # a wrong layout fails before the long count
        output_lock.check_file_output(FLAGS.output_file, "--output_file")
        with output_lock.holding({FLAGS.output_file: "--output_file"}):
            counts = count_words(paths, FLAGS.do_lower_case, FLAGS.skip_invalid_utf8,
                                 FLAGS.input_format)
            if not counts:
                raise ValueError(f"--input_file={FLAGS.input_file!r}: no words in {len(paths)} "
                                 f"files")
            vocab = build_vocab(counts, FLAGS.vocab_size, FLAGS.num_unused_tokens,
                                FLAGS.min_frequency)
            write_text(FLAGS.output_file, "".join(token + "\n" for token in vocab))
    except (OSError, ValueError) as error:  # bad flags or input, named in the message
        raise as_user_error(error) from None
    logging.info("wrote %d entries to %s", len(vocab), FLAGS.output_file)


def define_flags() -> None:
    """Defined when the CLI runs, not on import (flags defined on import collide)."""
    if "vocab_size" in FLAGS:
        return
    flags.DEFINE_string("input_file", None,
                        "Raw text files: comma-separated paths or glob patterns.")
    flags.DEFINE_string("output_file", None, "Where to write vocab.txt (one token per line).")
    flags.DEFINE_integer("vocab_size", None, "Number of entries, reserved ones included.",
                         lower_bound=1)
    flags.DEFINE_bool("do_lower_case", True, "Lowercase and strip accents, as the model will.")
    flags.DEFINE_integer("num_unused_tokens", NUM_UNUSED_TOKENS,
                         "[unusedN] slots (at least 99; 994 in the released uncased vocabulary).")
    flags.DEFINE_integer("min_frequency", 2, "Stop when no pair of pieces occurs this often.",
                         lower_bound=1)
    flags.DEFINE_enum("input_format", "text", INPUT_FORMATS, "text: every line is text; "
                      "jsonl: JSON lines, the text in each line's \"text\" field.")
    flags.DEFINE_bool("skip_invalid_utf8", False, "Drop bytes that are not UTF-8 instead of "
                      "stopping at the first (as create_pretraining_data).")


def console_main():
    define_flags()
    flags.mark_flags_as_required(["input_file", "output_file", "vocab_size"])
    run_main(main)


if __name__ == "__main__":
    console_main()
