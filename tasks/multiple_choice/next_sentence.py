"""A learnable multiple-choice set from any corpus: which sentence comes next?

Only 91 rows of SWAG are at hand, so the accuracy check of the multiple-choice task needs a real
task built from shared text. Each example's context is one or two consecutive sentences of a
document; the choices are the sentence that follows them and three distractors drawn, with a fixed
seed, from the same document where it has enough other sentences (the context and the true next
sentence excluded), otherwise from other documents. The right choice's position is drawn too. The
output is SWAG's CSV layout (an index column, `video-id` = the document, `fold-ind` = the position
of the true sentence, `startphrase` = `sent1` = the context, `sent2` empty, `gold-source`,
`ending0..ending3`, `label`), so `run_multiple_choice.py --task_name=swag` reads it.

    python -m bert_tf2.tasks.multiple_choice.next_sentence --input_file=wikitext-2/valid.txt \
        --input_format=wikitext --output_file=out/next_sentence/train.csv --max_examples=4000
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import random

HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
          "ending0", "ending1", "ending2", "ending3", "label"]
DISTRACTORS = 3


def make_examples(documents: list, seed: int, max_examples: int = 0) -> list:
    """SWAG-layout rows (without the index column) from documents (lists of sentences)."""
    rng = random.Random(seed)
    rows = []
    for d, sentences in enumerate(documents):
        for i in range(1, len(sentences)):
            k = rng.choice((1, 2)) if i >= 2 else 1
            context, true = " ".join(sentences[i - k:i]), sentences[i]
            used = set(range(i - k, i + 1))
            candidates = [j for j in range(len(sentences))
                          if j not in used and sentences[j] != true]
            endings = [sentences[j] for j in rng.sample(candidates,
                                                        min(DISTRACTORS, len(candidates)))]
            while len(endings) < DISTRACTORS:  # a short document: draw from the others
                other = rng.randrange(len(documents))
                if other == d or not documents[other]:
                    continue
                sentence = rng.choice(documents[other])
                if sentence != true and sentence not in endings:
                    endings.append(sentence)
            label = rng.randrange(DISTRACTORS + 1)
            endings.insert(label, true)
            rows.append([f"doc{d}", str(i), context, context, "", "gold", *endings, str(label)])
    if max_examples and len(rows) > max_examples:
        keep = sorted(rng.sample(range(len(rows)), max_examples))
        rows = [rows[i] for i in keep]
    return rows


def to_csv(rows: list) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    for index, row in enumerate(rows):
        writer.writerow([str(index), *row])
    return out.getvalue()


def main(argv=None) -> None:
    from bert_tf2.data_gen.pretraining.documents import (
        InputOptions,
        expand_input_files,
        stream_documents,
    )
    from bert_tf2.process.atomic_files import write_text

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input_file", required=True, help="Comma-separated paths or globs.")
    parser.add_argument("--input_format", default="sentence_lines",
                        choices=["sentence_lines", "wikitext", "prose"])
    parser.add_argument("--output_file", required=True)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--max_examples", type=int, default=0,
                        help="Keep this many examples, drawn with the seed (0: all).")
    args = parser.parse_args(argv)
    documents = [document.sentences for document in stream_documents(
        expand_input_files(args.input_file), InputOptions(args.input_format))]
    rows = make_examples(documents, args.seed, args.max_examples)
    os.makedirs(os.path.dirname(os.path.abspath(args.output_file)), exist_ok=True)
    write_text(args.output_file, to_csv(rows))
    print(f"{len(rows)} examples from {len(documents)} documents: {args.output_file}")


if __name__ == "__main__":
    main()
