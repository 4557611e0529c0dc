"""The model server: one export behind TF Serving's REST API, on KServe's ModelServer.

KServe's REST server (FastAPI on uvicorn) gives the Open Inference Protocol (V2:
`/v2/models/NAME/infer`, `/v2/health/ready`, and on `--grpc_port` its gRPC twin), liveness at `/`,
Prometheus' `/metrics`, its exception handling and the model repository. This module adds what
TF Serving's clients and a production deployment need on top (docs/serving.md, "The model
server"):
- TF Serving's predict (`POST /v1/models/NAME:predict`) as a bare ASGI endpoint (`Predict`),
  ahead of FastAPI and of KServe's V1 route of the same path: the body parsed and the answer
  encoded once, straight to the batcher (KServe's V1 layers cost 21% of the requests per second
  at 16 clients, FastAPI's router and middleware 30 microseconds of CPU a request);
- `GET /v1/models/NAME` and `/metadata` in TF Serving's shapes (`protocol`); readiness only once
  the model is warm (before: `LOADING`, and 503 with Retry-After on predict);
- dynamic batching with a bounded queue (`batching`): overload is 503 with Retry-After at once;
- a request-size limit (413) and one-line 400s for every malformed request;
- metrics of its own beside KServe's: requests by endpoint and status, latency, batch sizes,
  queue depth;
- SIGTERM (or Ctrl-C): readiness drops, no new connection is accepted, every request in flight
  is answered, and the process exits 0, within `--drain_seconds`;
- its port bound before anything loads, so a second server on a port is refused in one line.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import logging
import signal
import socket
import threading
import time
import warnings

import numpy as np
import uvicorn
from kserve import Model
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferResponse

from bert_tf2.inference.runtime import WARM_BATCHES, jsonable, list_inputs, predict_rows
from bert_tf2.model_server import protocol
from bert_tf2.model_server.batching import DynamicBatcher, NotServing, Overloaded
from bert_tf2.model_server.settings import ServerSettings
from bert_tf2.process.errors import SettingsError

logger = logging.getLogger(__name__)

RETRY_AFTER_S = "1"
# A body over the limit is read and dropped up to this size before the 413, so that a client
# still sending it reads the answer instead of a broken pipe; a larger one is cut off.
DISCARD_BYTES = 256 << 20
# KServe answers with FastAPI's ORJSONResponse, which FastAPI now calls deprecated at each use.
warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound now: a port in use is one line, before the model loads."""
    # IPPROTO_TCP by name: asyncio sets TCP_NODELAY on the accepted connections only then;
    # without it, Nagle's algorithm held each answer on a keep-alive connection 40 ms.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        why = ("another process is listening there; stop it or pick another --port"
               if e.errno == errno.EADDRINUSE else e.strerror)
        raise SettingsError(f"--port={port}: cannot listen on {host}:{port} ({why})") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class Metrics:
    """The server's Prometheus metrics (in the default registry, which `/metrics` exposes)."""

    def __init__(self):
        from prometheus_client import Counter, Gauge, Histogram

        self.requests = Counter("bert_requests", "HTTP requests answered, by endpoint and "
                                "status code", ["endpoint", "code"])
        self.latency = Histogram("bert_request_seconds", "Time from a request's arrival to its "
                                 "answer", ["endpoint"], buckets=(
                                     .001, .002, .004, .006, .008, .01, .015, .02, .03, .05,
                                     .075, .1, .15, .25, .5, 1, 2.5, 5, 10))
        self.batch_rows = Histogram("bert_batch_rows", "Rows in each batch the model ran",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
        self.queue_rows = Gauge("bert_queue_rows", "Rows waiting for the model")
        self.in_flight = Gauge("bert_requests_in_flight", "Requests received, not yet answered")

    def observe_batch(self, rows: int, queued: int) -> None:
        self.batch_rows.observe(rows)
        self.queue_rows.set(queued)


def endpoint_of(path: str) -> str:
    if path.endswith(":predict"):
        return "predict"
    if path.endswith("/infer"):
        return "infer"
    if path.endswith("/metadata"):
        return "metadata"
    if path.startswith("/v1/models/") or path.startswith("/v2/health") or path == "/":
        return "status"
    return "other"


class Guard:
    """The outermost ASGI layer: the request-size limit (413, by Content-Length or while the
    body arrives) and the request metrics."""

    def __init__(self, app, max_request_bytes: int, metrics: Metrics, predict=None):
        self.app, self.limit, self.metrics = app, max_request_bytes, metrics
        self.predict = predict

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        endpoint = endpoint_of(scope["path"])
        app = self.app
        if (endpoint == "predict" and scope["method"] == "POST" and self.predict is not None
                and "/" not in scope["path"][len(PREDICT_PREFIX):]
                and scope["path"].startswith(PREDICT_PREFIX)):
            app = self.predict
        start = time.perf_counter()
        status = [500]
        started = [False]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                started[0] = True
            await send(message)

        self.metrics.in_flight.inc()
        try:
            length = dict(scope["headers"]).get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.limit:
                if int(length) <= DISCARD_BYTES:  # read and drop it, so the client hears 413
                    while (await receive()).get("more_body"):
                        pass
                return await self.too_large(send_status, int(length))
            received = [0]

            async def counted():
                message = await receive()
                if message["type"] == "http.request":
                    received[0] += len(message.get("body", b""))
                    if received[0] > self.limit:
                        raise _TooLarge(received[0])
                return message

            try:
                await app(scope, counted, send_status)
            except _TooLarge as e:
                if not started[0]:
                    await self.too_large(send_status, e.args[0])
        finally:
            self.metrics.in_flight.dec()
            self.metrics.requests.labels(endpoint, str(status[0])).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - start)

    async def too_large(self, send, size: int):
        await send_error(send, 413, f"the request has {size} bytes; this server takes at most "
                                    f"{self.limit} (--max_request_bytes)",
                         [(b"connection", b"close")])


class _TooLarge(Exception):
    pass


PREDICT_PREFIX = "/v1/models/"
JSON_HEADERS = [(b"content-type", b"application/json")]


class Predict:
    """TF Serving's predict (`POST /v1/models/NAME:predict`) as a bare ASGI endpoint, which
    `Guard` calls before FastAPI: the body read and parsed once, straight to the batcher, the
    answer encoded once. At 16 clients the event loop's CPU a request fell from about 150
    microseconds through FastAPI's router and exception middleware to 120; the model waits for
    that time at the end of each batch, while the next batch's requests are read
    (docs/serving.md, "Under load")."""

    def __init__(self, model):
        import orjson

        self.model, self.orjson = model, orjson

    async def __call__(self, scope, receive, send):
        model = self.model
        name = scope["path"][len(PREDICT_PREFIX):-len(":predict")]
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        if name != model.name:
            return await send_error(send, 404, no_model(name, model.name))
        if not model.ready:
            return await send_error(send, 503, not_ready(model.name))
        try:
            body = b"".join(chunks)
            try:
                payload = self.orjson.loads(body)
            except self.orjson.JSONDecodeError:
                payload = protocol.parse_json(body)  # raises, saying what is wrong
            rows, columnar = protocol.parse_predict(payload, model.inputs, model.takes_list)
            outputs = await model.batcher.predict(rows) if rows else {}
        except protocol.RequestError as e:
            logger.info("400: %s", e)
            return await send_error(send, 400, str(e))
        except (Overloaded, NotServing) as e:
            return await send_error(send, 503, str(e))
        except Exception as e:  # noqa: BLE001 - the model failed: 500, logged
            logger.exception("predict failed")
            return await send_error(send, 500, f"{type(e).__name__} : {e}")
        body = self.orjson.dumps(protocol.predict_response(outputs, columnar))
        await send({"type": "http.response.start", "status": 200, "headers": [
            *JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})



async def send_error(send, status: int, message: str, headers: list = ()) -> None:
    """An ASGI answer in TF Serving's error shape, `{"error": message}` (503s with
    Retry-After)."""
    body = json.dumps({"error": message}).encode("utf-8")
    headers = [*JSON_HEADERS, (b"content-length", str(len(body)).encode()), *headers]
    if status == 503:
        headers.append((b"retry-after", RETRY_AFTER_S.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def no_model(name: str, served: str) -> str:
    return f"no model {name} (this server serves {served})"


def not_ready(name: str) -> str:
    return f"model {name} is not ready (warming up or stopping)"


class BertModel(Model):
    """The export's runtime behind the dynamic batcher, as KServe's model (V2 requests, status)."""

    def __init__(self, name: str, runtime, batcher: DynamicBatcher):
        super().__init__(name)
        self.batcher = batcher
        # The runtime's inputs as requests name them (sorted), and which take a list per row.
        self.inputs = sorted(runtime.input_names)
        self.takes_list = {name: name in list_inputs(runtime) for name in self.inputs}
        self.example_outputs = None
        self.ready = False

    def load(self) -> bool:  # KServe calls it at registration; warm-up runs in a thread
        return self.ready

    async def predict(self, payload, headers=None):
        """KServe's V2 requests (REST and gRPC); TF Serving's predict is answered by `Predict`
        before FastAPI, so no V1 request reaches here."""
        if not self.ready:
            raise NotServing(f"model {self.name} is warming up")
        return await self.infer_v2(payload)

    async def infer_v2(self, request):
        tensors = {}
        for tensor in request.inputs:
            if tensor.name not in self.inputs:
                raise InvalidInput(f"unknown input {tensor.name} (the model takes "
                                   f"{', '.join(self.inputs)})")
            if tensor.datatype != "BYTES":
                raise InvalidInput(f"input {tensor.name}: datatype {tensor.datatype}; "
                                   f"texts are BYTES")
            tensors[tensor.name] = tensor.as_numpy()
        missing = [name for name in self.inputs if name not in tensors]
        if missing:
            raise InvalidInput(f"no input {', '.join(missing)} (the model takes "
                               f"{', '.join(self.inputs)})")
        try:
            rows = [dict(zip(tensors, values)) for values in zip(*[
                [_decoded(value) for value in array]
                for name, array in tensors.items()])]
        except UnicodeDecodeError as e:
            raise InvalidInput(f"an input is not UTF-8 text ({e.reason})") from None
        outputs = await self.batcher.predict(rows) if rows else {}
        infer_outputs = []
        for name in sorted(outputs):
            value = np.asarray(jsonable(outputs[name]), dtype=object)
            kind = np.asarray(outputs[name]).dtype.kind
            datatype = {"f": "FP32", "i": "INT32", "u": "INT32", "b": "BOOL"}.get(
                kind, "BYTES")
            data = value.ravel().tolist()
            infer_outputs.append(InferOutput(name, list(value.shape), datatype, data))
        return InferResponse(response_id=request.id or "", model_name=self.name,
                             infer_outputs=infer_outputs)



def _decoded(value):
    if isinstance(value, np.ndarray):  # a list per row (choices)
        return [_decoded(v) for v in value]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def serve(settings: ServerSettings, runtime=None) -> None:
    """Listen, load, warm up, serve until SIGTERM or Ctrl-C, drain, return. `runtime`: what
    answers (default: the export's, as `tasks.runtimes.load_runtime` loads it), anything with
    the interface of `inference.runtime`."""
    from bert_tf2.tasks.runtimes import default_runtime, load_runtime

    chosen = settings.runtime or default_runtime(settings.export_dir)
    if settings.num_batch_threads > 1 and chosen != "savedmodel":
        raise SettingsError(f"--num_batch_threads={settings.num_batch_threads}: a LiteRT runtime "
                            f"runs one batch at a time (its interpreters are not shared between "
                            f"threads; each call uses every core); more threads are for "
                            f"--runtime=savedmodel")
    sock = bind(settings.host, settings.port)
    if runtime is None:
        runtime = load_runtime(settings.export_dir, chosen)
    logger.info("serving %s as %s: %s (%s), inputs %s", settings.export_dir,
                settings.model_name, chosen, "LiteRT" if chosen != "savedmodel"
                else "SavedModel serve_text", ", ".join(runtime.input_names))
    metrics = Metrics()
    batcher = DynamicBatcher(functools.partial(predict_rows, runtime), settings.max_batch_size,
                             settings.batch_timeout_micros, settings.max_enqueued_batches,
                             settings.num_batch_threads, observe=metrics.observe_batch)
    model = BertModel(settings.model_name, runtime, batcher)
    app, grpc_server, server_of = _kserve_app(model, settings, metrics)

    def warm_up():
        start = time.perf_counter()
        try:
            runtime.warm_up(WARM_BATCHES)
            row = {name: ["warm up"] * 2 if model.takes_list[name] else "warm up"
                   for name in model.inputs}
            model.example_outputs = {name: value[0] for name, value in
                                     predict_rows(runtime, [row]).items()}
        except Exception:  # noqa: BLE001 - logged; the server stays unready
            logger.exception("warm-up failed; the model stays unready")
            return
        batcher.start_accepting()
        model.ready = True
        logger.info("warm in %.1f s: ready on http://%s:%d/v1/models/%s", time.perf_counter()
                    - start, settings.host, sock.getsockname()[1], settings.model_name)

    server = server_of(app, sock, on_exit=lambda: setattr(model, "ready", False))
    threading.Thread(target=warm_up, name="warm-up", daemon=True).start()

    async def main():
        logger.info("event loop: %s", type(asyncio.get_running_loop()).__module__)
        grpc = asyncio.ensure_future(grpc_server.start(4)) if grpc_server else None
        if grpc is not None:  # a gRPC server that cannot start says so, and the server stops
            grpc.add_done_callback(lambda task: task.cancelled() or task.exception() is None
                                   or _grpc_failed(task.exception(), server))
        await server.serve(sockets=[sock])
        if grpc is not None:
            await grpc_server.stop(signal.SIGTERM)
            await asyncio.gather(grpc, return_exceptions=True)

    run_on(server.config.get_loop_factory(), main())
    drained = batcher.stop(settings.drain_seconds)
    logger.info("stopped%s", "" if drained else " (rows still running at the drain timeout)")


def run_on(loop_factory, coroutine):
    """`coroutine` run to its end on the event loop uvicorn picks (uvloop where it is installed,
    as `uvicorn.run` would; `asyncio.run` alone gave the standard loop, whose Python selector
    and transports took the event loop's CPU a request at 16 clients from 77 microseconds to
    120)."""
    if loop_factory is None or not hasattr(asyncio, "Runner"):  # Python 3.10: the standard loop
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coroutine)


def _grpc_failed(error: BaseException, server) -> None:
    logger.error("the gRPC server stopped: %s", error)
    server.should_exit = True


def _kserve_app(model, settings: ServerSettings, metrics: Metrics):
    import kserve.model_server
    from fastapi.responses import JSONResponse
    from kserve.errors import ModelNotReady
    from kserve.model_repository import ModelRepository
    from kserve.protocol.dataplane import DataPlane
    from kserve.protocol.model_repository_extension import ModelRepositoryExtension
    from kserve.protocol.rest.server import RESTServer

    repository = ModelRepository()
    repository.update(model, model.name)
    dataplane = DataPlane(model_registry=repository)
    extension = ModelRepositoryExtension(model_registry=repository)
    app = kserve.model_server.app

    def unknown(model_name: str):
        return JSONResponse({"error": no_model(model_name, model.name)}, status_code=404)

    # TF Serving's status and metadata, registered before KServe's routes of the same paths.
    async def status(model_name: str):
        if model_name != model.name:
            return unknown(model_name)
        return protocol.status_response("AVAILABLE" if model.ready else "LOADING")

    async def metadata(model_name: str):
        if model_name != model.name:
            return unknown(model_name)
        if model.example_outputs is None:
            return JSONResponse({"error": f"model {model.name} is warming up"},
                                status_code=503, headers={"Retry-After": RETRY_AFTER_S})
        return protocol.metadata_response(model.name, model.inputs, model.takes_list,
                                          model.example_outputs)

    app.add_api_route("/v1/models/{model_name}", status, methods=["GET"])
    app.add_api_route("/v1/models/{model_name}/metadata", metadata, methods=["GET"])
    class Rest(RESTServer):
        def _add_middlewares(self, app):
            """None of KServe's: its timing middleware logs two lines per request; `Guard`
            counts and times requests for /metrics."""

    rest = Rest("kserve.model_server:app", dataplane, extension, settings.port,
                grace_period=int(settings.drain_seconds))
    rest.create_application()

    async def bad_request(_, exc):
        message = str(exc).replace("Unrecognized request format: ", "the body is not JSON: ")
        logger.info("400: %s", message)
        return JSONResponse({"error": message}, status_code=400)

    async def unavailable(_, exc):
        message = not_ready(exc.model_name) if isinstance(exc, ModelNotReady) else str(exc)
        return JSONResponse({"error": message}, status_code=503,
                            headers={"Retry-After": RETRY_AFTER_S})

    app.add_exception_handler(InvalidInput, bad_request)
    for kind in (Overloaded, NotServing, ModelNotReady):
        app.add_exception_handler(kind, unavailable)
    guarded = Guard(app, settings.max_request_bytes, metrics, Predict(model))

    grpc_server = None
    if settings.grpc_port:
        from kserve.protocol.grpc.server import GRPCServer

        grpc_server = GRPCServer(settings.grpc_port, dataplane, extension, kwargs={
            "grpc_max_receive_message_length": settings.max_request_bytes,
            "grpc_max_send_message_length": max(settings.max_request_bytes, 64 << 20)},
            grace_period=int(settings.drain_seconds))

    def server_of(app, sock, on_exit):
        config = uvicorn.Config(app, log_config=None, timeout_graceful_shutdown=max(
            1, int(settings.drain_seconds)), timeout_keep_alive=65, access_log=False)
        return _DrainingServer(config, on_exit)

    return guarded, grpc_server, server_of


class _DrainingServer(uvicorn.Server):
    """uvicorn's server, with SIGTERM and SIGINT marking the model unready first, and without
    re-raising the signal after the graceful shutdown (so that a drained server exits 0)."""

    def __init__(self, config, on_exit):
        super().__init__(config)
        self.on_exit = on_exit

    def handle_exit(self, sig, frame) -> None:
        if not self.should_exit:
            logger.info("%s: draining (no new connections; answering what is in flight)",
                        signal.Signals(sig).name)
        self.on_exit()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)
