"""`make demo`: pretrain a small BERT from raw text on this CPU, end to end, in a few minutes.

The text is the English prose every Python installation carries: the 79 reference topics of
`pydoc_data.topics` (0.46 MB). The demo runs the project's own command lines, as a user would:
1. write the topics as documents (one file each; 8 held out for evaluation);
2. learn a WordPiece vocabulary from them (`data_gen.learn_vocab`);
3. make masked-LM + next-sentence records (`data_gen.pretraining.create_pretraining_data`);
4. pretrain a BERT-Tiny-sized model (`run_pretraining.py`), then evaluate on the held-out topics;
5. fill in the blanks of a few sentences with the trained model (read back from its TF1 export).
Everything goes to --output_dir (default out/demo); running again starts over.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

HELD_OUT = 8
SENTENCES = [
    "The ___ statement is used to iterate over the elements of a sequence.",
    "An exception is ___ when an error occurs.",
    "The return value of the function is ___ if no return statement is executed.",
    "A class definition creates a new ___ object.",
    "The ___ of the list is 3.",
]
MODEL = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 512, "max_position_embeddings": 512, "type_vocab_size": 2}


def run(step: str, *command: str) -> None:
    print(f"\n== {step}\n$ {' '.join(command)}", flush=True)
    start = time.time()
    subprocess.run([sys.executable, *command], check=True)
    print(f"({time.time() - start:.0f}s)", flush=True)


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


def print_baseline(records: str, vocab: str, max_seq_length: int, predictions: int) -> None:
    """What always guessing the most frequent masked token would score, for comparison."""
    import numpy as np

    from data_gen.pretraining.dataset import load_records
    from data_gen.tokenization import load_vocab

    features = load_records([records], max_seq_length, predictions)
    ids = features["masked_lm_ids"][features["masked_lm_weights"] > 0]
    counts = np.bincount(ids)
    tokens = list(load_vocab(vocab))
    random_share = float(np.mean(features["next_sentence_labels"]))
    print(f"baselines: always the most frequent masked token ({tokens[counts.argmax()]!r}): "
          f"masked_lm_accuracy {counts.max() / counts.sum():.4f}; always the majority "
          f"next-sentence label: next_sentence_accuracy {max(random_share, 1 - random_share):.4f}")


def fill_in_the_blanks(export: str) -> None:
    import numpy as np

    from data_gen.tokenization import FullTokenizer
    from modeling import checkpoints
    from modeling.encoder import BertEncoder
    from modeling.models import BertPretrainer

    tokenizer = FullTokenizer(os.path.join(export, "vocab.txt"), do_lower_case=True)
    model = BertPretrainer(BertEncoder(checkpoints.read_config(export)))
    checkpoints.load_checkpoint(model, export)
    print("\n== fill in the blanks (top 5 guesses of the trained model)")
    for sentence in SENTENCES:
        before, after = sentence.split("___")
        tokens = (["[CLS]"] + tokenizer.tokenize(before) + ["[MASK]"] + tokenizer.tokenize(after)
                  + ["[SEP]"])
        ids = np.array([tokenizer.convert_tokens_to_ids(tokens)], np.int32)
        position = tokens.index("[MASK]")
        logits = model({"input_word_ids": ids, "input_mask": np.ones_like(ids),
                        "input_type_ids": np.zeros_like(ids),
                        "masked_lm_positions": np.array([[position]], np.int32)})["mlm_logits"]
        probs = np.exp(logits[0, 0] - np.max(logits[0, 0]))
        probs /= probs.sum()
        best = np.argsort(-probs)[:5]
        guesses = ", ".join(f"{tok} ({p:.2f})" for tok, p in
                            zip(tokenizer.convert_ids_to_tokens(best.tolist()), probs[best]))
        print(f"  {sentence}\n      -> {guesses}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="out/demo")
    parser.add_argument("--num_train_steps", type=int, default=2000)
    parser.add_argument("--vocab_size", type=int, default=6000)
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--learning_rate", default="1e-3")
    args = parser.parse_args()
    out = args.output_dir
    predictions = math.ceil(args.max_seq_length * 0.15)  # 20 at 128, as the original
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    train, held_out = write_documents(os.path.join(out, "text"))
    vocab = os.path.join(out, "vocab.txt")
    run("learn a WordPiece vocabulary", "-m", "data_gen.learn_vocab", f"--input_file={train}/*.txt",
        f"--vocab_size={args.vocab_size}", f"--output_file={vocab}", "--num_unused_tokens=99")
    for name, folder, dupe in (("train", train, 10), ("eval", held_out, 1)):
        run(f"make {name} records", "-m", "data_gen.pretraining.create_pretraining_data",
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
    run("pretrain", "run_pretraining.py", *common, "--do_train",
        f"--input_file={out}/records/train.tfrecord", "--train_batch_size=32",
        f"--learning_rate={args.learning_rate}", f"--num_train_steps={args.num_train_steps}",
        f"--num_warmup_steps={args.num_train_steps // 10}", "--steps_per_loop=100",
        f"--save_checkpoints_steps={args.num_train_steps // 2}")
    run("evaluate on the held-out topics", "run_pretraining.py", *common, "--do_eval",
        f"--input_file={out}/records/eval.tfrecord", "--eval_batch_size=32",
        "--max_eval_steps=1000")
    with open(os.path.join(out, "model", "eval_results.txt")) as f:
        print(f.read(), end="")
    print_baseline(f"{out}/records/eval.tfrecord", vocab, args.max_seq_length, predictions)
    fill_in_the_blanks(os.path.join(out, "model", "tf1"))


if __name__ == "__main__":
    main()
