"""The LitServe side of `bench/serving_frameworks.py`: the MRPC fast path (LiteRT int8) behind
LitServe's own server and dynamic batching, on TF Serving's predict route.

    python bench/_litserve_side.py EXPORT_DIR PORT

LitServe is not a project dependency: `bench/serving_frameworks.py` installs it into
`bench/.venv-litserve` beside the project's runtime packages.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import litserve as ls  # noqa: E402


class FastPath(ls.LitAPI):
    """One request, one pair in; LitServe batches the pairs of requests that arrive together."""

    def setup(self, device):
        from bert_tf2.tasks.classification.litert_serving import LiteRTClassifier

        self.fast = LiteRTClassifier.load(sys.argv[1], "int8")
        self.fast.warm_up((1, 2, 4, 8))

    def decode_request(self, request):
        return request["instances"][0]

    def batch(self, inputs):
        return inputs

    def predict(self, rows):
        out = self.fast([r["text_a"] for r in rows], [r["text_b"] for r in rows])
        return [{"label": out["label"][i], "label_id": int(out["label_id"][i]),
                 "probabilities": out["probabilities"][i].tolist(),
                 "logits": out["logits"][i].tolist()} for i in range(len(rows))]

    def unbatch(self, outputs):
        return outputs

    def encode_response(self, output):
        return {"predictions": [output]}


if __name__ == "__main__":
    api = FastPath(max_batch_size=32, batch_timeout=0.001, api_path="/v1/models/m:predict")
    ls.LitServer(api, accelerator="cpu", workers_per_device=1, timeout=60).run(
        host="127.0.0.1", port=int(sys.argv[2]), generate_client_file=False)
