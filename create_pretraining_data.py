"""Make masked-LM + next-sentence pretraining records from raw text: the original's command.

`python create_pretraining_data.py --input_file=... --output_file=... --vocab_file=...` runs
unchanged from the original README; the tool itself lives in
`data_gen/pretraining/create_pretraining_data.py` (also `python -m
data_gen.pretraining.create_pretraining_data` and the `bert-create-pretraining-data` command).
See docs/pretraining-data.md.
"""
from bert_tf2.data_gen.pretraining.create_pretraining_data import console_main

if __name__ == "__main__":
    console_main()
