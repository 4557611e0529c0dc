"""A `serve.py` (or `tests/serving_harness.py`) process on a free loopback port, and plain HTTP
calls to it: the tests of the model server and of each task's export behind it."""
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import warm_python
from conftest import REPO, free_port


def call(url, body=None, method=None, headers=None, timeout=60):
    """`(status, headers, JSON or text)`; `body`: an object (sent as JSON) or bytes."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    request = urllib.request.Request(url, data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, answer_headers, text = response.status, response.headers, response.read()
    except urllib.error.HTTPError as e:
        status, answer_headers, text = e.code, e.headers, e.read()
    try:
        return status, answer_headers, json.loads(text)
    except ValueError:
        return status, answer_headers, text.decode()


@contextlib.contextmanager
def server(export, *flags, harness=False, wait=True, env=None):
    """serve.py (or the harness around the same server) on a free loopback port. It stops at
    the end without the drain's grace (`--drain_grace_s=0`, unless `flags` set it): nothing
    balances load here, and the 5 s default held every test's teardown."""
    port = free_port()
    if not any(flag.startswith("--drain_grace_s") for flag in flags):
        flags = (*flags, "--drain_grace_s=0")
    if harness:
        command = [sys.executable, str(REPO / "tests" / "serving_harness.py"), str(export),
                   str(port), *flags]
    else:
        command = [sys.executable, str(REPO / "serve.py"), f"--export_dir={export}",
                   "--model_name=m", "--host=127.0.0.1", f"--port={port}", *flags]
    log = tempfile.TemporaryFile("w+")  # not a pipe: a full pipe would stop the server
    proc = warm_python.start(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                             warm=True if harness else None)
    proc.log = lambda: (log.seek(0), log.read())[1]
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while wait:
            assert proc.poll() is None, proc.log()[-3000:]
            with contextlib.suppress(OSError):
                if call(base + "/v1/models/m")[2]["model_version_status"][0]["state"] == \
                        "AVAILABLE":
                    break
            assert time.time() < deadline, "the server did not become ready in 120 s"
            time.sleep(0.05)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


def pairs(data, count):
    """The first `count` MRPC pairs of `data/dev.tsv`: (texts a, texts b)."""
    import csv

    with open(data / "dev.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:count + 1]
    return [row[3] for row in rows], [row[4] for row in rows]


def grpc_predict(port, timeout=60, **inputs) -> dict:
    """TF Serving's gRPC Predict on `127.0.0.1:port` for model `m`, as a TF Serving user calls
    it (`tensorflow-serving-api`'s stub, `tf.make_tensor_proto`): `{output: array}`."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "m"
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
            request, timeout=timeout)
    return {name: tf.make_ndarray(value) for name, value in answer.outputs.items()}
