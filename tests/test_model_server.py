"""serve.py through real HTTP on loopback: TF Serving's REST API answering as the export's
serve_text (rows, columns, V2), its status and metadata, one-line 400s and 413, a busy port and a
cut LiteRT file refused in one line, b64 texts, and any export served (over TF Serving's gRPC
too). (Readiness, overload, failures, metrics and draining: test_model_server_load.py; the gRPC
ports: test_model_server_grpc.py.)"""
import base64
import contextlib
import socket
import sys

import numpy as np
import pytest
import warm_python
from conftest import REPO, served
from http_server import call, free_port, grpc_predict, pairs, server

pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install "
                    "'bert-tf2[serve]'")
pytest.importorskip("tensorflow_serving", reason="tensorflow-serving-api is not installed (make "
                    "test installs it with --no-deps)")


@pytest.fixture(scope="module")
def float32_server(pair_export):
    """serve.py on the pair export's float32 LiteRT file, with its defaults: the tests that only
    send it requests share it."""
    with server(pair_export[0], "--runtime=float32") as (base, proc):
        yield base, proc


@contextlib.contextmanager
def server_of(runtime, export, float32_server):
    if runtime == "float32":
        yield float32_server
    else:
        with server(export, f"--runtime={runtime}") as started:
            yield started


@pytest.mark.integration
@pytest.mark.parametrize("runtime, atol", [("float32", 2e-5), ("savedmodel", 1e-6)])
def test_predict_answers_as_serve_text_in_rows_columns_and_v2(pair_export, runtime, atol,
                                                                float32_server):
    export, data = pair_export
    text_a, text_b = pairs(data, 24)
    text_b[3] = ""  # a pair with an empty second text is a single-text example
    expected = served(export, text_a=text_a, text_b=text_b)
    with server_of(runtime, export, float32_server) as (base, _):
        status, _, rows = call(base + "/v1/models/m:predict", {"instances": [
            {"text_a": a, "text_b": b} for a, b in zip(text_a, text_b)]})
        assert status == 200 and len(rows["predictions"]) == 24
        status, _, columns = call(base + "/v1/models/m:predict", {
            "signature_name": "serve_text", "inputs": {"text_a": text_a, "text_b": text_b}})
        assert status == 200
        for name in ("logits", "probabilities", "label_id", "label"):
            by_rows = [p[name] for p in rows["predictions"]]
            assert by_rows == columns["outputs"][name]
            if name in ("label", "label_id"):
                assert by_rows == [v.decode() if isinstance(v, bytes) else v
                                   for v in expected[name].tolist()]
            else:
                np.testing.assert_allclose(by_rows, expected[name], atol=atol)
        status, _, v2 = call(base + "/v2/models/m/infer", {"inputs": [
            {"name": "text_a", "shape": [2], "datatype": "BYTES", "data": text_a[:2]},
            {"name": "text_b", "shape": [2], "datatype": "BYTES", "data": text_b[:2]}]},
            headers={"Content-Type": "application/json"})
        assert status == 200
        outputs = {o["name"]: o for o in v2["outputs"]}
        assert outputs["label"]["data"] == columns["outputs"]["label"][:2]
        assert outputs["probabilities"]["shape"] == [2, 2]
        status, _, meta = call(base + "/v1/models/m/metadata")
        signature = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
        assert status == 200 and sorted(signature["inputs"]) == ["text_a", "text_b"]
        assert sorted(signature["outputs"]) == ["label", "label_id", "logits", "probabilities"]
        assert signature["outputs"]["label"]["dtype"] == "DT_STRING"
        assert call(base + "/v1/models/m")[2] == {"model_version_status": [{
            "version": "1", "state": "AVAILABLE",
            "status": {"error_code": "OK", "error_message": ""}}]}


@pytest.mark.integration
def test_every_bad_request_is_one_line_and_a_2mb_text_costs_no_more_memory(pair_export):
    export, _ = pair_export
    with server(export, "--runtime=float32", "--max_request_bytes=3000000") as (base, proc):
        predict = base + "/v1/models/m:predict"
        too_large = b'{"instances": [{"text_a": "' + b"x" * 3_000_000 + b'"}]}'
        cases = [  # (body, status, the error's words)
            (b'{"instances": [', 400, "the body is not JSON ("),
            (b'{"instances": ["\xff"]}', 400, "the body is not UTF-8 (byte 16: invalid start "
             "byte)"),
            ({"instances": [{"text_a": "x"}]}, 400, "instances[0]: no text_b (the signature "
             "takes text_a, text_b)"),
            ({"instances": [{"text_a": "x", "text_b": 7}]}, 400,
             "instances[0].text_b must be text (a JSON string), not 7"),
            ({"inputs": {"text_a": ["x"], "text_b": "y", "text_c": []}}, 400,
             "\"inputs\": unknown input text_c"),
            ({"instances": [], "inputs": {}}, 400, "the body needs one of"),
            (b"[" * 5000 + b"]" * 5000, 400, "nested deeper than 1,000 levels"),
            (b'{"instances": [{"text_a": ' + b"[" * 990 + b"]" * 990 + b', "text_b": "y"}]}',
             400, "instances[0].text_a must be text (a JSON string), not a nested list"),
            (too_large, 413, f"the request has {len(too_large)} bytes; this server takes at "
             f"most 3000000 (--max_request_bytes)"),
        ]
        for body, code, message in cases:
            for headers in ({}, {"Content-Type": "application/json"}):  # the same answer
                status, _, answer = call(predict, body, headers=headers)
                assert status == code and list(answer) == ["error"], (body[:40], answer)
                assert message in answer["error"] and "\n" not in answer["error"], answer
        assert call(base + "/v1/models/other:predict", {"instances": []})[0] == 404
        assert call(base + "/v1/models/other")[0] == 404

        def peak_mb():
            with open(f"/proc/{proc.pid}/status") as f:
                return int(next(line for line in f if line.startswith("VmHWM")).split()[1]) / 1024

        short = {"instances": [{"text_a": "A short text.", "text_b": "Another one."}] * 8}
        for _ in range(20):
            assert call(predict, short)[0] == 200
        before = peak_mb()
        words = "The quick brown fox jumps over the lazy dog. " * 44_000  # about 2 MB
        status, _, answer = call(predict, {"instances": [{"text_a": words, "text_b": "x"}]})
        assert status == 200 and len(answer["predictions"]) == 1
        grown = peak_mb() - before
        assert grown < 64, f"a 2 MB text raised the peak memory by {grown:.0f} MB"
        assert call(predict, short)[0] == 200  # still serving


@pytest.mark.integration
def test_a_second_server_on_the_port_and_a_cut_litert_file_are_one_line(pair_export, tmp_path,
                                                                         float32_server):
    import shutil

    export, _ = pair_export
    with contextlib.nullcontext(float32_server) as (base, _):
        port = base.rsplit(":", 1)[1]
        second = warm_python.run([sys.executable, str(REPO / "serve.py"),
                                  f"--export_dir={export}", "--host=127.0.0.1",
                                  f"--port={port}"], cwd=REPO, timeout=120)
        assert second.returncode != 0 and "Traceback" not in second.stderr
        assert second.stderr.strip().splitlines()[-1] == (
            f"serve.py: error: --port={port}: cannot listen on 127.0.0.1:{port} (another "
            f"process is listening there; stop it or pick another --port)")
        assert call(base + "/v1/models/m")[0] == 200  # the first one is untouched
    threads = warm_python.run([sys.executable, str(REPO / "serve.py"), f"--export_dir={export}",
                               "--num_batch_threads=2", f"--port={free_port()}"], cwd=REPO,
                              timeout=120)
    assert threads.returncode != 0 and threads.stderr.strip().splitlines()[-1].startswith(
        "serve.py: error: --num_batch_threads=2: a LiteRT runtime runs one batch at a time")
    cut = tmp_path / "serving"
    shutil.copytree(export, cut)
    flat = (cut / "litert" / "float32.tflite").read_bytes()
    (cut / "litert" / "float32.tflite").write_bytes(flat[:len(flat) // 2])
    result = warm_python.run([sys.executable, str(REPO / "serve.py"), f"--export_dir={cut}",
                              "--host=127.0.0.1", f"--port={free_port()}"], cwd=REPO,
                             timeout=120)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "float32.tflite: not a readable LiteRT file" in last and "export_litert.py" in last
    # b64 texts, as TF Serving's clients send binary strings
    with contextlib.nullcontext(float32_server) as (base, _):
        encoded = {k: {"b64": base64.b64encode(v.encode()).decode()}
                   for k, v in (("text_a", "Ünïcode text."), ("text_b", "Plain."))}
        plain = {"text_a": "Ünïcode text.", "text_b": "Plain."}
        assert call(base + "/v1/models/m:predict", {"instances": [encoded]})[2] == \
            call(base + "/v1/models/m:predict", {"instances": [plain]})[2]


@pytest.mark.integration
def test_a_multiple_choice_export_answers_as_serve_text(shared_data, minilm_dir, tmp_path):
    """Any export is served: multiple choice (a list of choices per row, ragged; over TF
    Serving's gRPC a [batch, 4] tensor padded with ""), float32 against serve_text."""
    from test_litert import random_export

    from bert_tf2.modeling.models import BertMultipleChoice
    from bert_tf2.tasks.multiple_choice.reader import read_examples
    from bert_tf2.tasks.multiple_choice.serving import MultipleChoiceServing

    choosing = random_export(lambda encoder, vocab: MultipleChoiceServing(
        BertMultipleChoice(encoder, 4), vocab, True, 48, 4), minilm_dir, tmp_path / "choose")
    examples = read_examples(str(shared_data / "swag_sample" / "val_first91.csv"), "swag")[:12]
    instances = [{"context": e.context, "question": e.question,
                  "choices": list(e.choices)[:2 + i % 3]} for i, e in enumerate(examples)]
    expected = served(choosing, context=[i["context"] for i in instances],
                      question=[i["question"] for i in instances],
                      choices=[i["choices"] + [""] * (4 - len(i["choices"]))
                               for i in instances])
    grpc_port = free_port()
    with server(choosing, "--runtime=float32", f"--tf_serving_grpc_port={grpc_port}") as (
            base, _):
        status, _, answer = call(base + "/v1/models/m:predict", {"instances": instances})
        tensors = grpc_predict(grpc_port, context=[i["context"] for i in instances],
                               question=[i["question"] for i in instances],
                               choices=[i["choices"] + [""] * (4 - len(i["choices"]))
                                        for i in instances])
    assert status == 200
    np.testing.assert_allclose([p["probabilities"] for p in answer["predictions"]],
                               expected["probabilities"], atol=2e-5)
    assert [p["choice"] for p in answer["predictions"]] == expected["choice"].tolist()
    # TF Serving's gRPC: the choices as a [batch, 4] string tensor, padded with ""
    np.testing.assert_allclose(tensors["probabilities"], expected["probabilities"], atol=2e-5)
    assert tensors["choice"].tolist() == expected["choice"].tolist()



@pytest.mark.integration
def test_an_embedding_export_answers_as_serve_text(embedding_export):
    """Any export is served: an embedder (one input: bare texts in rows and columns, and over
    TF Serving's gRPC), float32 against serve_text."""
    embedding = embedding_export
    texts = ["Return the square root of x.", "", "Ünïcödé 中文 🙂", "x " * 100]
    expected = served(embedding, text_a=texts)["embedding"]
    grpc_port = free_port()
    with server(embedding, "--runtime=float32", f"--tf_serving_grpc_port={grpc_port}") as (
            base, _):
        rows = call(base + "/v1/models/m:predict", {"instances": texts})[2]
        columns = call(base + "/v1/models/m:predict", {"inputs": texts})[2]
        tensors = grpc_predict(grpc_port, text_a=texts)
    np.testing.assert_allclose([p["embedding"] for p in rows["predictions"]], expected,
                               atol=2e-5)
    assert columns["outputs"]["embedding"] == [p["embedding"] for p in rows["predictions"]]
    assert tensors["embedding"].dtype == np.float32  # TF Serving's gRPC: the same numbers
    np.testing.assert_allclose(tensors["embedding"], columns["outputs"]["embedding"], atol=1e-6)


def test_the_listening_socket_is_tcp_by_name():
    """asyncio sets TCP_NODELAY on accepted connections only for a socket made with
    IPPROTO_TCP; without it, Nagle's algorithm held every answer on a keep-alive connection
    40 ms (measured: 44 ms against 3.5 ms per request with requests.Session)."""
    from bert_tf2.model_server.app import bind

    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP and sock.type == socket.SOCK_STREAM
    finally:
        sock.close()
