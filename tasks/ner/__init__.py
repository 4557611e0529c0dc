"""Named-entity recognition: CoNLL-2003 and any CoNLL-style tagging data (run_ner.py)."""
