"""serve.py under pressure, through real HTTP on loopback: ready only after warm-up, Prometheus
metrics counting what was served, 503 with Retry-After at once under overload (RESOURCE_EXHAUSTED
over TF Serving's gRPC, from the same queue), a failing model answered 500 in one line while the
server goes on, and a SIGTERM that answers everything in flight, on every port, refuses new
connections and calls and exits 0, under load and with a second signal. (The API itself:
test_model_server.py, test_model_server_grpc.py.)"""
import concurrent.futures
import contextlib
import signal
import socket
import time

import pytest
from conftest import free_port
from http_server import call, grpc_predict, pairs, server

pytestmark = pytest.mark.integration

pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install "
                    "'bert-tf2[serve]'")
pytest.importorskip("tensorflow_serving", reason="tensorflow-serving-api is not installed (make "
                    "test installs it with --no-deps)")


@pytest.mark.integration
def test_ready_only_after_warm_up_and_metrics_count_what_was_served(pair_export, tmp_path):
    export, data = pair_export
    gate = tmp_path / "warm"
    with server(export, "--runtime=float32", f"--gate={gate}", harness=True,
                wait=False) as (base, proc):
        deadline = time.time() + 60
        while True:  # live (the process answers) but not ready
            with contextlib.suppress(OSError):
                if call(base + "/")[0] == 200:
                    break
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.05)
        assert call(base + "/v1/models/m")[2]["model_version_status"][0]["state"] == "LOADING"
        status, headers, answer = call(base + "/v1/models/m:predict",
                                       {"instances": [{"text_a": "x", "text_b": "y"}]})
        assert status == 503 and headers["Retry-After"] == "1"
        assert answer == {"error": "model m is not ready (warming up or stopping)"}
        assert call(base + "/v2/models/m/ready")[0] == 503
        gate.touch()
        while call(base + "/v1/models/m")[2]["model_version_status"][0]["state"] != "AVAILABLE":
            assert time.time() < deadline
            time.sleep(0.05)
        assert call(base + "/v2/models/m/ready")[0] == 200
        text_a, text_b = pairs(data, 6)
        for i in range(6):
            status, _, _ = call(base + "/v1/models/m:predict", {"instances": [
                {"text_a": text_a[i], "text_b": text_b[i]}] * (i + 1)})
            assert status == 200
        status, _, metrics = call(base + "/metrics")
        lines = dict(line.rsplit(" ", 1) for line in metrics.splitlines()
                     if line and not line.startswith("#"))
        assert float(lines['bert_requests_total{code="200",endpoint="predict",protocol="rest"}']) == 6
        assert float(lines['bert_requests_total{code="503",endpoint="predict",protocol="rest"}']) == 1
        assert float(lines['bert_request_seconds_count{endpoint="predict",protocol="rest"}']) == 7
        assert float(lines["bert_batch_rows_count"]) == 6  # one at a time: one batch each
        assert float(lines["bert_batch_rows_sum"]) == 21
        assert float(lines["bert_queue_rows"]) == 0
        assert "bert_requests_in_flight" in lines


@pytest.mark.integration
def test_overload_is_503_with_retry_after_at_once_never_a_timeout(pair_export):
    export, data = pair_export
    text_a, text_b = pairs(data, 16)
    body = {"instances": [{"text_a": a, "text_b": b} for a, b in zip(text_a, text_b)]}
    grpc_port = free_port()
    with server(export, "--runtime=float32", "--delay_s=0.2", "--max_batch_size=16",
                "--max_enqueued_batches=2", f"--tf_serving_grpc_port={grpc_port}",
                harness=True) as (base, proc):
        def client(_):
            start = time.perf_counter()
            status, headers, answer = call(base + "/v1/models/m:predict", body, timeout=30)
            return status, headers.get("Retry-After"), answer, time.perf_counter() - start

        def grpc_client(_):
            import grpc

            start = time.perf_counter()
            try:
                answer = grpc_predict(grpc_port, timeout=30, text_a=text_a, text_b=text_b)
                return "OK", answer, time.perf_counter() - start
            except grpc.RpcError as e:
                return e.code().name, e.details(), time.perf_counter() - start

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            answers = pool.map(client, range(24))
            over_grpc = list(pool.map(grpc_client, range(8)))  # TF Serving's, the same queue
            answers = list(answers)
        import grpc

        with pytest.raises(grpc.RpcError) as gone:  # a client that stops waiting
            grpc_predict(grpc_port, timeout=0.05, text_a=text_a, text_b=text_b)
        assert gone.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert grpc_predict(grpc_port, text_a=text_a[:1], text_b=text_b[:1])["label"].shape == (1,)
        assert "Traceback" not in proc.log()
    statuses = sorted(status for status, *_ in answers)
    assert set(statuses) == {200, 503} and statuses.count(200) >= 3, statuses
    for status, retry_after, answer, seconds in answers:
        if status == 503:
            assert retry_after == "1" and "try again shortly" in answer["error"]
            assert seconds < 1.0, f"a refusal took {seconds:.2f} s"
        else:
            assert len(answer["predictions"]) == 16
    codes = sorted(code for code, *_ in over_grpc)
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"} and "RESOURCE_EXHAUSTED" in codes, codes
    for code, answer, seconds in over_grpc:
        if code == "OK":
            assert answer["probabilities"].shape == (16, 2)
        else:
            assert "try again shortly" in answer and seconds < 1.0, (answer, seconds)


@pytest.mark.integration
def test_a_failing_model_is_a_500_of_one_line_and_the_server_goes_on(pair_export):
    export, data = pair_export
    text_a, text_b = pairs(data, 2)
    with server(export, "--runtime=float32", "--fail_on=boom", harness=True) as (base, _):
        status, _, answer = call(base + "/v1/models/m:predict",
                                 {"instances": [{"text_a": "boom", "text_b": text_b[0]}]})
        assert status == 500 and answer == {"error": "RuntimeError : the model failed on 'boom'"}
        status, _, answer = call(base + "/v1/models/m:predict",
                                 {"instances": [{"text_a": text_a[1], "text_b": text_b[1]}]})
        assert status == 200 and answer["predictions"][0]["label"] in ("0", "1")


@pytest.mark.integration
def test_sigterm_answers_everything_in_flight_refuses_new_connections_and_exits_0(pair_export):
    import grpc

    export, data = pair_export
    text_a, text_b = pairs(data, 4)
    body = {"instances": [{"text_a": a, "text_b": b} for a, b in zip(text_a, text_b)]}
    grpc_port = free_port()
    with server(export, "--runtime=float32", "--delay_s=0.25", "--max_batch_size=4",
                "--drain_grace_s=0", f"--tf_serving_grpc_port={grpc_port}",
                harness=True) as (base, proc):
        port = int(base.rsplit(":", 1)[1])
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            futures = [pool.submit(call, base + "/v1/models/m:predict", body) for _ in range(8)]
            over_grpc = [pool.submit(grpc_predict, grpc_port, text_a=text_a, text_b=text_b)
                         for _ in range(4)]
            time.sleep(0.4)  # every request sent; one or two batches done
            proc.send_signal(signal.SIGTERM)
            sent = time.perf_counter()
            deadline = time.time() + 5
            while True:  # no grace: the port closes once its backlog is empty
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        pass
                except ConnectionRefusedError:
                    break
                except TimeoutError:  # its SYN dropped: the door is closing
                    pass
                assert time.time() < deadline
                time.sleep(0.05)
            answers = [future.result() for future in futures]
            answered = [future.result() for future in over_grpc]  # every call in flight, too
            answered_after = time.perf_counter() - sent
            with pytest.raises(grpc.RpcError) as late:  # a new call once the doors closed
                grpc_predict(grpc_port, timeout=10, text_a=text_a, text_b=text_b)
        assert late.value.code() == grpc.StatusCode.UNAVAILABLE
        assert proc.wait(30) == 0
        assert [status for status, *_ in answers] == [200] * 8
        assert all(len(answer["predictions"]) == 4 for *_, answer in answers)
        assert all(answer["probabilities"].shape == (4, 2) for answer in answered)
        assert answered_after > 0.5  # batches of 0.25 s each were still running at SIGTERM
        assert "SIGTERM: draining" in proc.log()


def drain_under_load(export, base, proc, clients: int, keep_alive: int, signals: list) -> dict:
    """Clients on new connections and on keep-alive connections, each sending until the server
    refuses it, while `signals` ((seconds in, signal)) are sent; every outcome counted."""
    import http.client
    import json
    import threading

    host, port = "127.0.0.1", int(base.rsplit(":", 1)[1])
    body = json.dumps({"instances": [{"text_a": "The cat sat.", "text_b": "A cat sat."}]})
    outcomes, lock = {}, threading.Lock()

    def count(kind):
        with lock:
            outcomes[kind] = outcomes.get(kind, 0) + 1

    def client(reuse: bool):
        connection = None
        for _ in range(5000):
            try:
                if connection is None:
                    connection = http.client.HTTPConnection(host, port, timeout=30)
                connection.request("POST", "/v1/models/m:predict", body,
                                   {"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                count(response.status)
                if not reuse or response.getheader("Connection") == "close":
                    connection.close()
                    connection = None
            except ConnectionRefusedError:
                count("refused")
                return
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected,
                    http.client.BadStatusLine, TimeoutError, OSError) as e:
                count(f"lost: {type(e).__name__}")
                return
        count("never refused")

    threads = [threading.Thread(target=client, args=(i < keep_alive,))
               for i in range(clients + keep_alive)]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    for i, (at, sig) in enumerate(signals):
        time.sleep(max(0.0, at - (time.perf_counter() - start)))
        proc.send_signal(sig)
        if i == 0:  # in the grace: not ready, still live, still answering
            time.sleep(0.1)
            for path in ("/v2/health/ready", "/"):
                probe = http.client.HTTPConnection(host, port, timeout=10)
                probe.request("GET", path)
                outcomes[path] = probe.getresponse().status
                probe.close()
    for thread in threads:
        thread.join(120)
    outcomes["exit"] = proc.wait(60)
    return outcomes


@pytest.mark.parametrize("grace, signals", [
    ("0.5", [(0.3, signal.SIGTERM)]),
    ("30", [(0.3, signal.SIGTERM), (0.6, signal.SIGTERM)]),  # the second cuts the grace short
], ids=["grace", "second_signal"])
@pytest.mark.integration
def test_a_drain_under_load_loses_no_request(pair_export, grace, signals):
    """Every request is answered (200) or its connection refused at connect: none is reset,
    cut off or left unanswered, on new and keep-alive connections, over three runs."""
    export, _ = pair_export
    for run in range(3):
        with server(export, "--runtime=float32", f"--drain_grace_s={grace}") as (base, proc):
            outcomes = drain_under_load(export, base, proc, clients=24, keep_alive=8,
                                        signals=signals)
            log = proc.log()
        assert outcomes.pop("exit") == 0, log[-3000:]
        assert (outcomes.pop("/v2/health/ready"), outcomes.pop("/")) == (503, 200)
        assert outcomes.pop("refused") == 32, (run, outcomes)  # each client ends refused
        assert set(outcomes) == {200} and outcomes[200] > 100, (run, outcomes)
        assert "its backlog is empty" in log
