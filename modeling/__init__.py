"""BERT's math as Keras 3 layers and models, checkpoint I/O, optimisers. No task data, no flags."""
from modeling import environment  # noqa: F401  (quiet TensorFlow before anything imports it)
