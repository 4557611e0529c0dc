"""`make demo`, first half: pretrain a small BERT from raw text on this CPU, end to end.

The text is the English prose every Python installation carries: the 79 reference topics of
`pydoc_data.topics` (0.46 MB). The demo runs the project's own command lines, as a user would:
1. write the topics as documents (one file each; 8 held out for evaluation);
2. learn a WordPiece vocabulary from them (`data_gen.learn_vocab`);
3. make masked-LM + next-sentence records (`data_gen.pretraining.create_pretraining_data`);
4. pretrain a BERT-Tiny-sized model (`run_pretraining.py`), then evaluate it on the held-out
   topics against what always guessing the most frequent answer scores.
A model this small, after a minute or two on 0.46 MB, guesses mostly function words for a blank,
so the demo shows its held-out scores, not its guesses. The second half, `finetune_demo.py`,
fine-tunes real pretrained weights. Everything goes to --output_dir; running again starts over.
"""
import argparse
import json
import math
import os
import shutil
import time

from demo_steps import run

HELD_OUT = 8
MODEL = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 512, "max_position_embeddings": 512, "type_vocab_size": 2}


def write_documents(folder: str) -> tuple:
    import pydoc_data.topics

    topics = sorted(pydoc_data.topics.topics.items())
    train, held_out = os.path.join(folder, "train"), os.path.join(folder, "eval")
    for path in (train, held_out):
        os.makedirs(path)
    for i, (name, text) in enumerate(topics):
        target = held_out if i % (len(topics) // HELD_OUT) == 0 and i else train
        with open(os.path.join(target, f"{name}.txt"), "w", encoding="utf-8") as f:
            f.write(text)
    print(f"{len(topics)} topics of pydoc_data.topics, {sum(len(t) for _, t in topics):,} "
          f"characters; held out for evaluation: {', '.join(sorted(os.listdir(held_out)))}")
    return train, held_out


def baselines(records: str, vocab: str, max_seq_length: int, predictions: int) -> dict:
    """What always giving the most frequent answer scores on these records: the honest floor
    for the trained model's held-out scores."""
    import numpy as np

    from bert_tf2.data_gen.pretraining.dataset import load_records
    from bert_tf2.data_gen.tokenization import load_vocab

    features = load_records([records], max_seq_length, predictions)
    ids = features["masked_lm_ids"][features["masked_lm_weights"] > 0]
    counts = np.bincount(ids)
    token = list(load_vocab(vocab))[counts.argmax()]
    random_share = float(np.mean(features["next_sentence_labels"]))
    return {"masked_lm_accuracy": (counts.max() / counts.sum(),
                                   f"always {token!r}, the most frequent masked token"),
            "next_sentence_accuracy": (max(random_share, 1 - random_share),
                                       "always the majority label")}


def print_scores(results_file: str, floors: dict) -> None:
    with open(results_file) as f:
        results = {k: float(v) for k, _, v in (line.partition(" = ") for line in f)}
    print(f"\n{'held-out topics':<24}{'trained model':>14}   baseline")
    for key, (floor, how) in floors.items():
        print(f"{key:<24}{results[key]:>14.3f}   {floor:.3f} ({how})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="out/demo/pretrain")
    parser.add_argument("--num_train_steps", type=int, default=1000)
    parser.add_argument("--vocab_size", type=int, default=6000)
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--learning_rate", default="1e-3")
    args = parser.parse_args()
    start = time.time()
    out = args.output_dir
    predictions = math.ceil(args.max_seq_length * 0.15)  # 20 at 128, as the original
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    train, held_out = write_documents(os.path.join(out, "text"))
    vocab = os.path.join(out, "vocab.txt")
    run("learn a WordPiece vocabulary", "-m", "bert_tf2.data_gen.learn_vocab", f"--input_file={train}/*.txt",
        f"--vocab_size={args.vocab_size}", f"--output_file={vocab}", "--num_unused_tokens=99")
    for name, folder, dupe in (("train", train, 10), ("eval", held_out, 1)):
        run(f"make {name} records", "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
            f"--input_file={folder}/*.txt", f"--output_file={out}/records/{name}.tfrecord",
            f"--vocab_file={vocab}", "--input_format=prose", f"--dupe_factor={dupe}",
            f"--max_seq_length={args.max_seq_length}", f"--max_predictions_per_seq={predictions}",
            "--num_workers=2")
    with open(vocab, encoding="utf-8") as f:
        config = {"vocab_size": sum(1 for _ in f), **MODEL}
    with open(os.path.join(out, "bert_config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    common = [f"--bert_config_file={out}/bert_config.json", f"--output_dir={out}/model",
              f"--vocab_file={vocab}", f"--max_seq_length={args.max_seq_length}",
              f"--max_predictions_per_seq={predictions}"]
    # Warmup over a fifth of the steps: with a tenth (100 of 1,000), the model stayed on the
    # always-the-most-frequent-token plateau; with 200 it left it by step 200.
    run("pretrain", "run_pretraining.py", *common, "--do_train",
        f"--input_file={out}/records/train.tfrecord", "--train_batch_size=32",
        f"--learning_rate={args.learning_rate}", f"--num_train_steps={args.num_train_steps}",
        f"--num_warmup_steps={args.num_train_steps // 5}", "--steps_per_loop=100",
        f"--save_checkpoints_steps={args.num_train_steps // 2}")
    run("evaluate on the held-out topics", "run_pretraining.py", *common, "--do_eval",
        f"--input_file={out}/records/eval.tfrecord", "--eval_batch_size=32",
        "--max_eval_steps=1000")
    print_scores(os.path.join(out, "model", "eval_results.txt"), baselines(
        f"{out}/records/eval.tfrecord", vocab, args.max_seq_length, predictions))
    print(f"\npretraining half done in {time.time() - start:.0f}s; the model's TF1 export: "
          f"{out}/model/tf1")


if __name__ == "__main__":
    main()
