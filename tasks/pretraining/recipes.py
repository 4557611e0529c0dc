"""Named sets of run_pretraining's flags (`--recipe`): a recipe sets each flag the command line
leaves unset; a flag given on the command line wins.

`original` is Google's recipe, the default: masked LM + next sentence on the records' static
masks, dropout from bert_config.json, warm-up and linear decay over `--num_train_steps`.

`budget` is the best model a fixed time buys (docs/pretraining.md, "Pretraining on a budget"),
after Cramming (Geiping and Goldstein, 2022) and MosaicBERT (2023); it needs
`--train_budget_minutes` and records with room for its masks (`--max_predictions_per_seq` of
0.3 x `--max_seq_length`; `create_pretraining_data --pack_sentences` makes rows with no padding):
- the masked LM alone (`--no_nsp`), masked afresh for every batch at 30% (MosaicBERT's rate;
  `--dynamic_masking --masked_lm_prob=0.3`);
- no dropout while pretraining (Cramming; the TF1 export keeps bert_config.json's dropout);
- the learning rate on the budget's clock: from a quarter of its peak up to the peak at 75% of
  the budget, then down to 0 at its end (Cramming's "budget-triangle2"), peak 3e-4. Cramming's
  1e-3 goes with its batch of thousands: a BERT-Mini at batch 32 stayed on the
  most-frequent-token plateau with it for a whole 5-minute budget (docs/pretraining.md).
- bfloat16 (`--dtype=mixed_bfloat16`) where the device computes in it (`ON_BFLOAT16_HARDWARE`:
  a TPU, a GPU from the A100 on, or on TensorFlow a CPU with AMX; not other CPUs).
The encoder stays BERT's, so its checkpoints load wherever BERT's load: Cramming's architecture
changes are `bert_config.json` options (`BertConfig.layer_norm_position`, ...), measured on their
own and gaining nothing beyond the noise on the bench (docs/pretraining.md).
"""
ORIGINAL = {}
BUDGET = {
    "no_nsp": True,
    "dynamic_masking": True,
    "masked_lm_prob": 0.3,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "warmup_proportion": 0.75,
    "warmup_start_fraction": 0.25,
    "learning_rate": 3e-4,
}
RECIPES = {"original": ORIGINAL, "budget": BUDGET}
ON_BFLOAT16_HARDWARE = {"budget": {"dtype": "mixed_bfloat16"}}  # where the device has it
NEEDS = {"budget": ("train_budget_minutes",)}  # flags a recipe cannot set for the user
