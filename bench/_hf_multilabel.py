"""The peer of bench/reuters.py: multi-label fine-tuning with Hugging Face transformers on PyTorch,
as its users run it (`problem_type="multi_label_classification"`: a sigmoid per label and
`BCEWithLogitsLoss`; Trainer, the fast tokenizer, dynamic padding, texts truncated).

Runs in the bench's own environment (torch, transformers, accelerate), never the project's, and
imports nothing of the project. The recipe is the one `bench/reuters.py` gives `run_classifier.py`:
AdamW with weight decay 0.01, epsilon 1e-6, linear warmup over 10% of the steps then linear decay,
gradient norm clipped to 1.0, dropout 0.1, batch 32, texts cut to `max_seq_length` WordPieces.
Writes the test documents' probabilities (float32, `[documents, labels]`, labels.txt order) to
`--output_dir/test_probabilities.npy` and prints one JSON line of timings.

    python bench/_hf_multilabel.py --data_dir ../shared/data/reuters21578 --model_dir MINILM \
        --output_dir /tmp/peer --epochs 3 --learning_rate 1e-4
"""
import argparse
import json
import os
import sys
import time

STARTED = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _hf_finetune import Rows  # noqa: E402  (the peer's dataset of encodings and labels)
from transformers import (  # noqa: E402
    BertForSequenceClassification,
    BertTokenizerFast,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--limit_train", type=int, default=0)
    parser.add_argument("--init_label_bias", action="store_true",
                        help="the classifier's biases at the log-odds of each label's training "
                             "share, as run_classifier.py --init_label_bias")
    parser.add_argument("--gpu", action="store_true",
                        help="train on the GPU (a lent machine), not the CPU")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    labels = [x.strip() for x in open(f"{args.data_dir}/labels.txt") if x.strip()]
    index = {label: i for i, label in enumerate(labels)}
    tokenizer = BertTokenizerFast(f"{args.model_dir}/vocab.txt", do_lower_case=True)

    def dataset(split, limit=0):
        records = [json.loads(line) for line in open(f"{args.data_dir}/{split}.jsonl")]
        records = records[:limit or None]
        encodings = tokenizer([r["text"] for r in records], truncation=True,
                              max_length=args.max_seq_length)
        targets = np.zeros((len(records), len(labels)), np.float32)
        for row, record in enumerate(records):
            for label in record.get("labels", []):
                targets[row, index[label]] = 1.0
        return Rows(encodings, list(targets))

    train = dataset("train", args.limit_train)
    model = BertForSequenceClassification.from_pretrained(
        args.model_dir, num_labels=len(labels), problem_type="multi_label_classification",
        dtype=torch.float32)
    if args.init_label_bias:
        share = np.clip(np.mean(np.stack(train.labels), axis=0), 1e-4, 1 - 1e-4)
        with torch.no_grad():
            model.classifier.bias.copy_(torch.tensor(np.log(share / (1 - share)),
                                                     dtype=torch.float32))
    training_args = TrainingArguments(
        output_dir=args.output_dir, per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=32, learning_rate=args.learning_rate,
        num_train_epochs=args.epochs, warmup_steps=0.1, lr_scheduler_type="linear",
        weight_decay=0.01, adam_epsilon=1e-6, max_grad_norm=1.0, seed=args.seed,
        data_seed=args.seed, save_strategy="no", eval_strategy="no", logging_steps=50,
        report_to=[], dataloader_drop_last=False, use_cpu=not args.gpu, disable_tqdm=True)
    trainer = Trainer(model=model, args=training_args, train_dataset=train,
                      data_collator=DataCollatorWithPadding(tokenizer))
    start = time.perf_counter()
    result = trainer.train()
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    test = dataset("test")
    logits = trainer.predict(test).predictions
    predict_seconds = time.perf_counter() - start
    probabilities = (1 / (1 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
    os.makedirs(args.output_dir, exist_ok=True)
    np.save(f"{args.output_dir}/test_probabilities.npy", probabilities)
    print(json.dumps({"train_seconds": train_seconds, "steps": result.global_step,
                      "predict_seconds": predict_seconds, "test_documents": len(test),
                      "wall_in_process": time.perf_counter() - STARTED,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    sys.exit(main())
