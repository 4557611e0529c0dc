"""The peer of bench/finetune_vs_pytorch.py: one GLUE fine-tuning run with Hugging Face
transformers on PyTorch, as its users run it (Trainer, the fast tokenizer, dynamic padding).

Runs in the bench's own environment (torch, transformers, accelerate), never the project's, and
imports nothing of the project. The recipe is the original BERT's, as `run_classifier.py` runs it:
AdamW with weight decay 0.01 (not on biases and LayerNorm), epsilon 1e-6, linear warmup over 10%
of the steps then linear decay, gradient norm clipped to 1.0, dropout 0.1, batch 32, sequences cut
to 128 WordPieces (the longer text first), evaluation batch 8. Prints one JSON line.

    python bench/_hf_finetune.py --task MRPC --data_dir DIR --model_dir MINILM --seed 1
"""
import argparse
import csv
import json
import sys
import time

STARTED = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import (  # noqa: E402
    BertForSequenceClassification,
    BertTokenizerFast,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)


def read_glue(task: str, path: str):
    """(text_a, text_b, label) rows of a GLUE TSV, as the original's processors read them."""
    with open(path, encoding="utf-8-sig") as f:
        rows = list(csv.reader(f, delimiter="\t", quotechar=None))
    if task == "MRPC":
        return [(r[3], r[4], int(r[0])) for r in rows[1:]]
    if task == "CoLA":
        return [(r[3], None, int(r[1])) for r in rows]
    if task == "SST-2":
        return [(r[0], None, int(r[1])) for r in rows[1:]]
    raise SystemExit(f"unknown task {task}")


class Rows(torch.utils.data.Dataset):
    def __init__(self, encodings, labels):
        self.encodings, self.labels = encodings, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {**{k: v[i] for k, v in self.encodings.items()}, "labels": self.labels[i]}


def metrics(task: str, predictions: np.ndarray, labels: np.ndarray) -> dict:
    accuracy = float(np.mean(predictions == labels))
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    fp = float(np.sum((predictions == 1) & (labels == 0)))
    fn = float(np.sum((predictions == 0) & (labels == 1)))
    tn = float(np.sum((predictions == 0) & (labels == 0)))
    if task == "MRPC":
        return {"accuracy": accuracy, "f1": 2 * tp / (2 * tp + fp + fn) if tp else 0.0}
    if task == "CoLA":
        denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
        return {"matthews_corrcoef": float((tp * tn - fp * fn) / denominator)
                if denominator else 0.0}
    return {"accuracy": accuracy}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", required=True)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--learning_rate", type=float, default=2e-5)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max_steps", type=int, default=-1)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    tokenizer = BertTokenizerFast(f"{args.model_dir}/vocab.txt", do_lower_case=True)

    def dataset(split):
        rows = read_glue(args.task, f"{args.data_dir}/{split}.tsv")
        a = [r[0] for r in rows]
        b = [r[1] for r in rows] if rows[0][1] is not None else None
        encodings = tokenizer(a, b, truncation="longest_first", max_length=args.max_seq_length)
        return Rows(encodings, [r[2] for r in rows])

    train, dev = dataset("train"), dataset("dev")
    model = BertForSequenceClassification.from_pretrained(args.model_dir, num_labels=2)
    training_args = TrainingArguments(
        output_dir=args.output_dir, per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=8, learning_rate=args.learning_rate,
        num_train_epochs=args.epochs, max_steps=args.max_steps, warmup_steps=0.1,
        lr_scheduler_type="linear", weight_decay=0.01, adam_epsilon=1e-6, max_grad_norm=1.0,
        seed=args.seed, data_seed=args.seed, save_strategy="no", eval_strategy="no",
        logging_steps=50, report_to=[], dataloader_drop_last=True, use_cpu=True,
        disable_tqdm=True)
    trainer = Trainer(model=model, args=training_args, train_dataset=train,
                      data_collator=DataCollatorWithPadding(tokenizer))
    start = time.perf_counter()
    result = trainer.train()
    train_seconds = time.perf_counter() - start
    output = trainer.predict(dev)
    scores = metrics(args.task, output.predictions.argmax(-1), output.label_ids)
    print(json.dumps({"train_seconds": train_seconds, "steps": result.global_step,
                      "train_sequences": result.global_step * args.batch_size,
                      "metrics": scores, "wall_in_process": time.perf_counter() - STARTED,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    sys.exit(main())
