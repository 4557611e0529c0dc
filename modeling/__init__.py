"""BERT's math as Keras 3 layers and models, checkpoint I/O, optimisers. No task data, no flags,
no process machinery (that is `process/`, the floor below)."""
