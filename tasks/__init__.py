"""One folder per task, each holding everything that task owns: file readers, feature conversion,
loss and metrics, scoring, post-processing and serving. `base` says what a task gives the driver."""
from modeling import environment  # noqa: F401  (silences TensorFlow before it is imported)
