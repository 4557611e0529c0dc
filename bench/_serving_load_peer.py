"""The peer server of `bench/serving_load.py`: ONNX Runtime int8 (optimum) behind this project's
model server (the same ASGI application, dynamic batcher and settings as `serve.py`), run in
`bench/.venv-serving-load` (optimum, ONNX Runtime, transformers, KServe), never in the project's
environment.

    python bench/_serving_load_peer.py --hf_dir DIR --work_dir W --port P [serve.py's batching]

It answers TF Serving's predict requests with the same outputs as our classifier's export
(`logits`, `probabilities`, `label_id`, `label`), tokenising with transformers' Rust tokenizer;
the ONNX file is `bench/_serving_peer.py`'s (optimum's export, dynamic int8 quantisation).
"""
import argparse
import logging
import os
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _checkout  # noqa: E402
from _serving_peer import onnx_session  # noqa: E402

_checkout.importable()  # this environment has the peer's packages, not ours

from bert_tf2.model_server.app import ServerSettings, serve  # noqa: E402


class OnnxClassifier:
    """The runtime interface (`inference.runtime`) over an ONNX Runtime session."""

    name = "onnxruntime-int8"
    input_names = ("text_a", "text_b")
    list_inputs = ()

    def __init__(self, hf_dir: str, work_dir: str, max_seq_length: int):
        from transformers import BertTokenizerFast

        self.tokenizer = BertTokenizerFast(os.path.join(hf_dir, "vocab.txt"),
                                           do_lower_case=True)
        self.logits, _ = onnx_session(hf_dir, work_dir, quantize=True)
        self.max_seq_length = max_seq_length
        self.labels = np.array(["0", "1"], dtype=object)

    def __call__(self, text_a: list, text_b: list) -> dict:
        encoded = self.tokenizer(text_a, text_b if any(text_b) else None, padding=True,
                                 truncation="longest_first", max_length=self.max_seq_length,
                                 return_tensors="np")
        logits = self.logits(dict(encoded))
        shifted = np.exp(logits - logits.max(-1, keepdims=True))
        label_id = logits.argmax(-1).astype(np.int32)
        return {"logits": logits, "probabilities": shifted / shifted.sum(-1, keepdims=True),
                "label_id": label_id, "label": self.labels[label_id].tolist()}

    def warm_up(self, batches) -> None:
        for batch in (*batches, 32):
            self(["warm up"] * batch, ["warm up"] * batch)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hf_dir", required=True)
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--batch_timeout_micros", type=int, default=0)
    parser.add_argument("--max_enqueued_batches", type=int, default=16)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    settings = ServerSettings(args.hf_dir, "m", host="127.0.0.1", port=args.port,
                              max_batch_size=args.max_batch_size,
                              batch_timeout_micros=args.batch_timeout_micros,
                              max_enqueued_batches=args.max_enqueued_batches,
                              drain_grace_s=0)
    serve(settings, OnnxClassifier(args.hf_dir, args.work_dir, args.max_seq_length))


if __name__ == "__main__":
    main()
