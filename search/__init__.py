"""Searches over fine-tuning runs: a grid or sampled settings, random restarts, chosen on dev.

Each trial is an ordinary run of a fine-tuning runner (its own `output_dir`, resume, locks and
one-line errors); Optuna keeps the study (which trials ran, their scores, pruning), so that a search
resumes after a kill and several workers share one. Layer: above `engine` (it reads the results the
runs write), beside `tasks` (it knows no task: the runner does).
"""
