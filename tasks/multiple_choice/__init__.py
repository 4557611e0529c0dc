"""Multiple choice: SWAG and any data of a context with N candidate answers (run_multiple_choice.py)."""
