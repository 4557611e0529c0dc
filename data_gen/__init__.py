"""Text to tensors, shared by every task: both tokenisers, input packing, windows, records and
their cache, the fine-tuning input pipeline, and pretraining-data generation (`pretraining/`).
Knows nothing of tasks; of `modeling` it uses only the encoder's input names and file helpers."""
from modeling import environment  # noqa: F401  (silences TensorFlow before it is imported)
