"""Masked-LM + next-sentence pretraining (run_pretraining.py)."""
