"""An export's SavedModel text signature as a runtime (`inference.runtime`): raw strings in, the
signature's outputs out, on TensorFlow.

Every task's `--export_dir` SavedModel has raw-string signatures (`serving_default` and
`serve_text`: the classifier's `text_a`/`text_b`, SQuAD's `question`/`context`, NER's `text`,
multiple choice's `context`/`question`/`choices`, the embedder's `text_a`). A `[batch]` input
takes one text per row, a `[batch, n]` input (`choices`) a list of them, padded here with "" to
the call's longest.
"""
from __future__ import annotations

import os

from bert_tf2.data_gen.errors import DataError
from bert_tf2.process.errors import SettingsError


class SavedModelText:
    """`SavedModelText.load(export_dir, signature)`: the signature, loaded, as a runtime."""

    def __init__(self, model, signature, export_dir: str):
        self.model = model  # keeps the variables alive
        self.signature, self.export_dir = signature, export_dir
        specs = signature.structured_input_signature[1]
        self.input_names = tuple(sorted(specs))
        self.list_inputs = frozenset(name for name in specs if specs[name].shape.rank == 2)

    @classmethod
    def load(cls, export_dir: str, signature: str = "serve_text") -> "SavedModelText":
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (the ops of the in-graph tokenizer)

        if "://" not in export_dir and not os.path.isfile(
                os.path.join(export_dir, "saved_model.pb")):
            raise SettingsError(f"--saved_model={export_dir}: no saved_model.pb there (a "
                                f"runner's --export_dir folder)")
        try:
            model = tf.saved_model.load(export_dir)
        except Exception as e:  # noqa: BLE001 - TensorFlow, protobuf and OS errors alike
            first = (getattr(e, "message", None) or str(e) or type(e).__name__).strip()
            raise DataError(f"{export_dir}: not a readable SavedModel "
                            f"({first.splitlines()[0][:200]}); export it again with the runner's "
                            f"--export_dir") from None
        if signature not in model.signatures:
            raise SettingsError(f"--signature={signature}: {export_dir} has "
                                f"{', '.join(sorted(model.signatures))}")
        return cls(model, model.signatures[signature], export_dir)

    def warm_up(self, batches=(1,)) -> None:
        """Trace the signature at these batch sizes now, so that no request pays for it."""
        for batch in batches:
            self(*[[["warm up"] * 2 if name in self.list_inputs else "warm up"] * batch
                   for name in self.input_names])

    def __call__(self, *texts) -> dict:
        import tensorflow as tf

        feed = {}
        for name, values in zip(self.input_names, texts, strict=True):
            if name in self.list_inputs:
                width = max((len(v) for v in values), default=0)
                values = [list(v) + [""] * (width - len(v)) for v in values]
            feed[name] = tf.constant(values, tf.string)
        return {name: value.numpy() for name, value in self.signature(**feed).items()}
