"""Sentence (pair) classification: GLUE, XNLI and any TSV/CSV (run_classifier.py)."""
