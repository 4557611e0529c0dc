"""Extract BERT's hidden layers per token, or one sentence vector per line: the original's tool.

The original's flags and output: one example per line of `--input_file` (a pair written
`A ||| B`), and per line of `--output_file` the JSON object `{"linex_index": n, "features":
[{"token": t, "layers": [{"index": i, "values": [...]}]}]}` for the `--layers` (default the last
four), values rounded to 6 decimals. Beyond the original: the input is streamed (memory does not
grow with the number of lines), lines of similar length share a batch while the output keeps the
input order, progress shows lines/s and the time left, a killed run resumes after its last
finished shard, and the output appears only when complete. `--pooling=mean|cls` writes one
sentence vector per line instead (JSON lines, or one float32 array with a `.npy` output),
`--normalize` scales it to unit length, and `--export_dir` writes a SavedModel that embeds raw
strings. The code lives in `tasks/feature_extraction/`.

    python extract_features.py --input_file=/tmp/input.txt --output_file=/tmp/output.jsonl \
        --vocab_file=$BERT_BASE_DIR/vocab.txt --bert_config_file=$BERT_BASE_DIR/bert_config.json \
        --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --layers=-1,-2,-3,-4 \
        --max_seq_length=128 --batch_size=8
"""
from __future__ import annotations

from bert_tf2 import runner_flags
from bert_tf2.tasks.feature_extraction import flags as extraction_flags

extraction_flags.define_flags()


def main(argv):
    del argv
    from bert_tf2.tasks.feature_extraction.extract import extract

    runner_flags.setup_logging()
    extract(extraction_flags.settings())


def console_main():
    runner_flags.main(main)


if __name__ == "__main__":
    console_main()
