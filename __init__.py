"""bert_tf2: Google's BERT, faithful to the original release, on TensorFlow 2 and Keras 3.

The repository's root is this package, as the original's root carries an `__init__.py`: setup.py
maps the folder to `bert_tf2` (`package_dir`), so `modeling/` is `bert_tf2.modeling`,
`run_classifier.py` is `bert_tf2.run_classifier`, and so on for every library folder and runner.
Importing it, or any module of it other than a runner, changes nothing in the process: the runners'
entry points set up the environment (`bert_tf2.process.environment.configure`).
"""
