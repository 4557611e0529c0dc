"""Feature extraction and sentence embeddings: extract_features.py (the original's JSON lines of
hidden layers per token, and pooled vectors per line)."""
