"""Everything that turns text into tensors: tokenisers, input packing, TFRecord schemas, readers."""
from modeling import environment  # noqa: F401  (silences TensorFlow before it is imported)
