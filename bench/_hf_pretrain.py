"""The transformers side of bench/pretraining_budget.py, run in the peer's own environment.

`BertForMaskedLM` trained by transformers' `Trainer` with `DataCollatorForLanguageModeling` (15%
of tokens masked afresh per batch, 80/10/10) on the rows the budget recipe trains on (the same
packed token ids, saved by the bench as NumPy arrays), for a wall-time budget. A user's Trainer
counts steps, not time, so the budget is turned into steps as a careful user would: a probe of
`--probe_steps` updates on a throwaway model measures the speed (its steps after the first three,
which warm up; the probe's whole time counts against the budget, as the project's first loop and
its compile count against its own), then `max_steps` fills what is left, with a callback that
stops the run when the budget is spent. The clock starts, as the project's does, once the data
and the tokenizer are loaded. Schedule: linear warm-up over `--warmup_ratio`, then linear decay (transformers' default
shape), peak `--learning_rate`. CPU settings: all cores for PyTorch's threads, no dataloader
workers (the rows are in memory), and bfloat16 autocast (`--bf16`, which the bench passes where
the CPU has AMX, as the budget recipe computes in bfloat16 there: 42.4 against 30.4 sequences/s
in float32 on 2 cores of an Intel Xeon with AMX, 2026-11-30), float32 elsewhere.

The model is saved as `BertForPreTraining` (the MLM weights, a fresh pooler and NSP head), so that
the project's loaders take it as they take any BERT: evaluation and fine-tuning then run the same
code for every side. Prints one JSON line: steps, seconds, sequences/s.
"""
import argparse
import json
import os
import shutil
import time

import numpy as np
import torch
import transformers


class Rows(torch.utils.data.Dataset):
    def __init__(self, ids, mask):
        self.ids, self.mask = ids, mask

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        n = int(self.mask[i].sum())
        return {"input_ids": self.ids[i, :n].tolist()}


class StepTimes(transformers.TrainerCallback):
    def __init__(self):
        self.times = []

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.monotonic())
        return control


class StopOnTime(transformers.TrainerCallback):
    def __init__(self, deadline):
        self.deadline = deadline

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() >= self.deadline:
            control.should_training_stop = True
        return control


def trainer(args, config, tokenizer, rows, max_steps, output_dir, callbacks=()):
    torch.manual_seed(args.seed)
    model = transformers.BertForMaskedLM(config)
    training = transformers.TrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=args.train_batch_size,
        learning_rate=args.learning_rate, weight_decay=0.01, warmup_steps=args.warmup_ratio,
        lr_scheduler_type="linear", max_steps=max_steps, logging_steps=50, save_strategy="no",
        report_to=[], seed=args.seed, dataloader_num_workers=0, use_cpu=True,
        disable_tqdm=True, bf16=args.bf16)
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15,
                                                            pad_to_multiple_of=None)
    return transformers.Trainer(model=model, args=training, train_dataset=rows,
                                data_collator=collator, callbacks=list(callbacks))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", required=True, help=".npz with ids and mask")
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--bert_config_file", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--budget_seconds", type=float, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--learning_rate", type=float, default=3e-4)
    parser.add_argument("--warmup_ratio", type=float, default=0.1)
    parser.add_argument("--train_batch_size", type=int, default=32)
    parser.add_argument("--probe_steps", type=int, default=13)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast on the CPU")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count())
    with open(args.bert_config_file) as f:
        ours = json.load(f)
    config = transformers.BertConfig(**{k: v for k, v in ours.items()
                                        if k in transformers.BertConfig().to_dict()})
    tokenizer = transformers.BertTokenizerFast(args.vocab_file, do_lower_case=True)
    data = np.load(args.rows)
    rows = Rows(data["ids"], data["mask"])

    start = time.monotonic()
    deadline = start + args.budget_seconds
    probe_dir = args.output_dir + ".probe"
    times = StepTimes()
    probe = trainer(args, config, tokenizer, rows, args.probe_steps, probe_dir, [times])
    probe.train()
    per_step = (times.times[-1] - times.times[2]) / (len(times.times) - 3)
    shutil.rmtree(probe_dir, ignore_errors=True)
    max_steps = max(1, int((deadline - time.monotonic()) / per_step))
    run = trainer(args, config, tokenizer, rows, max_steps, args.output_dir,
                  [StopOnTime(deadline)])
    train_start = time.monotonic()
    run.train()
    train_seconds = time.monotonic() - train_start
    steps = run.state.global_step

    full = transformers.BertForPreTraining(config)
    missing, _ = full.load_state_dict(run.model.state_dict(), strict=False)
    assert all(k.startswith(("bert.pooler", "cls.seq_relationship")) for k in missing), missing
    full.save_pretrained(args.output_dir)
    shutil.copy(args.vocab_file, os.path.join(args.output_dir, "vocab.txt"))
    print(json.dumps({"steps": steps, "planned_steps": max_steps, "probe_seconds_per_step":
                      per_step, "train_seconds": train_seconds,
                      "seconds": time.monotonic() - start,
                      "sequences_per_second": steps * args.train_batch_size / train_seconds}))


if __name__ == "__main__":
    main()
