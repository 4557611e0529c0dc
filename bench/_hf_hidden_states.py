"""The peer half of bench/domain_adaptation.py's export check: Hugging Face transformers loads a
folder the project wrote (`config.json`, `model.safetensors`, `vocab.txt`) as any user would, and
writes the last hidden states of some texts for the project to compare with its own.

Runs in the bench's own environment (torch, transformers), never the project's, and imports
nothing of the project. Writes `--output` (.npz): input_ids, attention_mask and hidden (float32,
`[texts, max_seq_length, hidden]`), texts padded to `--max_seq_length` and cut there.

    python bench/_hf_hidden_states.py --model_dir adapted-hf --texts_file texts.txt --output h.npz
"""
import argparse

import numpy as np
import torch
from transformers import BertModel, BertTokenizerFast


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--texts_file", required=True, help="one text per line")
    parser.add_argument("--output", required=True)
    parser.add_argument("--max_seq_length", type=int, default=128)
    args = parser.parse_args()
    texts = [line.rstrip("\n") for line in open(args.texts_file, encoding="utf-8")]
    tokenizer = BertTokenizerFast(f"{args.model_dir}/vocab.txt", do_lower_case=True)
    encoded = tokenizer(texts, truncation=True, max_length=args.max_seq_length,
                        padding="max_length", return_tensors="pt")
    model = BertModel.from_pretrained(args.model_dir, add_pooling_layer=False).eval()
    with torch.no_grad():
        hidden = model(input_ids=encoded["input_ids"],
                       attention_mask=encoded["attention_mask"],
                       token_type_ids=encoded["token_type_ids"]).last_hidden_state
    np.savez(args.output, input_ids=encoded["input_ids"].numpy(),
             attention_mask=encoded["attention_mask"].numpy(), hidden=hidden.numpy())
    print(f"{len(texts)} texts, hidden states {tuple(hidden.shape)} -> {args.output}")


if __name__ == "__main__":
    main()
