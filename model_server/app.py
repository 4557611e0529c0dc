"""The model server: one export behind TF Serving's REST API and the Open Inference Protocol, as a
plain ASGI application on uvicorn.

Why plain ASGI: every route is a few lines over `protocol`, and TF Serving's predict is the hot
path, read and answered once with no framework between the socket and the batcher (through
FastAPI's router and exception middleware the event loop's CPU a request at 16 clients was 150
microseconds against 120). Only uvicorn's public API is used: its `Config` and `Server`, with
`should_exit` set by this module's own signal handlers (uvicorn installs none off the main thread,
where it runs here). The gRPC ports, TF Serving's API on `--tf_serving_grpc_port`
(`model_server.tf_serving_grpc`) and the Open Inference Protocol on `--grpc_port`
(`model_server.oip_grpc`), run on the same event loop and answer from the same batcher
(`model_server.grpc_ports`).

The routes (docs/serving.md, "The model server"):
- TF Serving's `POST /v1/models/NAME:predict` (rows or columns), `GET /v1/models/NAME` (status:
  `LOADING` until warm, then `AVAILABLE`) and `/metadata` (`protocol`);
- the Open Inference Protocol's `POST /v2/models/NAME/infer`, `GET /v2/models/NAME` (metadata),
  `/v2/models/NAME/ready`, `/v2/health/live` and `/v2/health/ready`;
- liveness at `/` as soon as the port listens, and Prometheus' `/metrics`.
Around them (`Guard`): a request-size limit (413) and the request metrics. Every malformed
request is a one-line 400 `{"error": ...}`; overload and a model not ready are 503 with
Retry-After at once (the bounded queue of `batching`); a model that fails on a batch is a one-line
500 and the server goes on. SIGTERM (or Ctrl-C) drains without losing a request
(`model_server.drain`) and exits 0; the gRPC ports answer what is in flight and refuse new calls
(UNAVAILABLE). Every port is checked before anything loads, so a second server on it is refused
in one line.
"""
from __future__ import annotations

import asyncio
import errno
import functools
import json
import logging
import os
import re
import signal
import socket
import threading
import time

import uvicorn

from bert_tf2.inference.runtime import WARM_BATCHES, list_inputs, predict_rows
from bert_tf2.model_server import protocol, signature_defs
from bert_tf2.model_server.batching import DynamicBatcher, NotServing, Overloaded
from bert_tf2.model_server.drain import Drain
from bert_tf2.model_server.settings import ServerSettings
from bert_tf2.process.errors import SettingsError, UserError, message_of
from bert_tf2.process.thread_names import name_os_threads

logger = logging.getLogger(__name__)

RETRY_AFTER_S = "1"
# A body over the limit is read and dropped up to this size before the 413, so that a client
# still sending it reads the answer instead of a broken pipe; a larger one is cut off.
DISCARD_BYTES = 256 << 20
JSON_HEADERS = [(b"content-type", b"application/json")]
WARM_UP = "warm-up"  # the thread that warms the model up (it starts the runtime's own threads)
# TF Serving's REST paths: /v1/models/NAME, optionally /versions/N or /labels/L, then /metadata,
# :predict, :classify or :regress (or nothing: the status).
V1_PATH = re.compile(r"/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)"
                     r"|/labels/(?P<label>[^/:]+))?(?P<action>/metadata|:predict|:classify"
                     r"|:regress)?")


def bind(host: str, port: int, flag: str = "--port") -> socket.socket:
    """The listening socket, bound now: a port in use is one line naming `flag`, before the
    model loads; the gRPC ports' too (`grpc_ports.open_port` listens on them)."""
    # IPPROTO_TCP by name: asyncio sets TCP_NODELAY on the accepted connections only then;
    # without it, Nagle's algorithm held each answer on a keep-alive connection 40 ms.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        why = (f"another process is listening there; stop it or pick another {flag}"
               if e.errno == errno.EADDRINUSE else e.strerror)
        raise SettingsError(f"{flag}={port}: cannot listen on {host}:{port} ({why})") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class Metrics:
    """The server's Prometheus metrics (in the default registry, which `/metrics` exposes)."""

    def __init__(self):
        from prometheus_client import Counter, Gauge, Histogram

        self.requests = Counter("bert_requests", "Requests answered, by protocol (rest, "
                                "tf_serving_grpc, v2_grpc), endpoint and status code (HTTP's, "
                                "or gRPC's by name)", ["protocol", "endpoint", "code"])
        self.latency = Histogram("bert_request_seconds", "Time from a request's arrival to its "
                                 "answer", ["protocol", "endpoint"], buckets=(
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
    if path.endswith((":predict", ":classify", ":regress")):
        return path.rsplit(":", 1)[1]
    if path.endswith("/infer"):
        return "infer"
    if path.endswith("/metadata"):
        return "metadata"
    if path.startswith("/v1/models/") or path.startswith("/v2/") or path == "/":
        return "status"
    return "other"


class ServedModel:
    """The export's runtime behind the dynamic batcher: what the routes answer with."""

    def __init__(self, name: str, runtime, batcher: DynamicBatcher):
        self.name, self.batcher = name, batcher
        # The runtime's inputs as requests name them (sorted), and which take a list per row.
        self.inputs = sorted(runtime.input_names)
        self.takes_list = {name: name in list_inputs(runtime) for name in self.inputs}
        self.example_outputs = None  # one row's outputs, once warm (the metadata's dtypes)
        # The export's saved_model.pb signatures (`signature_defs.read`), which both metadata
        # answers give as TF Serving does; None for LiteRT files alone.
        self.saved_signatures = None
        self.ready = False  # warm: predictions are answered (until the server exits)
        self.draining = False  # SIGTERM came: readiness says no (model_server.drain)
        # What :classify and :regress answer with: a classifier's classes, or a regression.
        self.classes, self.regression = [], False
        # What answers serve_token_ids over TF Serving's gRPC (tasks.runtimes.token_ids_runtime),
        # on the batcher's thread; None: texts only.
        self.token_ids = None

    @property
    def takes_traffic(self) -> bool:
        """What readiness answers: warm, and not draining."""
        return self.ready and not self.draining

    def describe(self, description: dict) -> None:
        """The export's description (`serving.json`): a classifier's classes or a regression
        make :classify or :regress available."""
        if description.get("task") == "classification":
            self.classes = list(description.get("labels") or [])
            self.regression = not self.classes


async def read_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def send_json(send, status: int, body: bytes, headers: list = ()) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        *JSON_HEADERS, (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


async def send_error(send, status: int, message: str, headers: list = ()) -> None:
    """An answer in TF Serving's error shape, `{"error": message}` (503s with Retry-After)."""
    headers = list(headers)
    if status == 503:
        headers.append((b"retry-after", RETRY_AFTER_S.encode()))
    await send_json(send, status, json.dumps({"error": message}).encode("utf-8"), headers)


def no_model(name: str, served: str) -> str:
    return f"no model {name} (this server serves {served})"


def not_ready(name: str) -> str:
    return f"model {name} is not ready (warming up or stopping)"


class App:
    """The routes, as one ASGI application: the path picks the answer, in a few lines each."""

    def __init__(self, model: ServedModel):
        import orjson

        self.model, self.orjson = model, orjson

    def dumps(self, value) -> bytes:
        return self.orjson.dumps(value)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # no lifespan (uvicorn's lifespan="off")
            return
        path, method = scope["path"], scope["method"]
        model = self.model
        v1 = V1_PATH.fullmatch(path)
        if v1 is not None:
            return await self.v1(v1, method, receive, send)
        if method == "POST" and path.startswith("/v2/models/") and path.endswith("/infer"):
            return await self.infer(path[len("/v2/models/"):-len("/infer")], receive, send)
        if method != "GET":
            return await send_error(send, 405 if self.known(path) else 404,
                                    f"{method} {path}: not served here")
        if path == "/":
            return await send_json(send, 200, b'{"status":"alive"}')
        if path == "/metrics":
            return await self.metrics(send)
        if path == "/v2/health/live":
            return await send_json(send, 200, b'{"live":true}')
        if path == "/v2/health/ready":
            ready = model.takes_traffic
            return await send_json(send, 200 if ready else 503, self.dumps({"ready": ready}))
        for prefix, suffix, answer in (("/v2/models/", "/ready", self.v2_ready),
                                       ("/v2/models/", "", self.v2_metadata)):
            if path.startswith(prefix) and path.endswith(suffix):
                name = path[len(prefix):len(path) - len(suffix)]
                if "/" in name:
                    continue
                if name != model.name:
                    return await send_error(send, 404, no_model(name, model.name))
                return await answer(send)
        return await send_error(send, 404, f"{path}: not served here")

    @staticmethod
    def known(path: str) -> bool:
        return path in ("/", "/metrics") or path.startswith(("/v1/models/", "/v2/"))

    async def v1(self, match, method: str, receive, send):
        """TF Serving's routes: `/v1/models/NAME[/versions/N | /labels/L]`, then nothing
        (status), `/metadata`, `:predict`, `:classify` or `:regress`."""
        model, name = self.model, match["name"]
        action = match["action"] or ""
        posted = action.startswith(":")
        if method != ("POST" if posted else "GET"):
            await read_body(receive)
            return await send_error(send, 405, f"{method} {match[0]}: TF Serving's "
                                               f"{action or 'status'} is a "
                                               f"{'POST' if posted else 'GET'}")
        body = await read_body(receive) if posted else b""
        if name != model.name:
            return await send_error(send, 404, no_model(name, model.name))
        if match["label"] is not None:
            return await send_error(send, 404, f"Unrecognized servable version label: "
                                               f"{match['label']}")
        if match["version"] not in (None, protocol.VERSION):
            return await send_error(send, 404, f"Servable not found for request: "
                                               f"Specific({name}, {match['version']})")
        if not posted:
            return await (self.v1_metadata(send) if action == "/metadata"
                          else self.v1_status(send))
        if not model.ready:
            return await send_error(send, 503, not_ready(model.name))
        if action == ":classify" and not model.classes:
            return await send_error(send, 400, f"model {name} is not a classifier: ask it "
                                               f"with :predict" + (" or :regress" if
                                                                   model.regression else ""))
        if action == ":regress" and not model.regression:
            return await send_error(send, 400, f"model {name} is not a regression model: ask "
                                               f"it with :predict" + (" or :classify" if
                                                                      model.classes else ""))
        def parse():
            payload = self.loads(body)
            if action == ":predict":
                return protocol.parse_predict(payload, model.inputs, model.takes_list)
            return protocol.parse_examples(payload, model.inputs, model.takes_list), False

        parsed = await self.parsed(parse, send)
        if parsed is None:
            return
        rows, columnar = parsed
        outputs = await self.run(rows, send)
        if outputs is None:
            return
        if action == ":predict":
            answer = protocol.predict_response(outputs, columnar)
        elif action == ":classify":
            answer = protocol.classify_response(outputs, model.classes) if rows else {
                "result": []}
        else:
            answer = protocol.regress_response(outputs) if rows else {"result": []}
        await send_json(send, 200, self.dumps(answer))

    async def infer(self, name: str, receive, send):
        """The Open Inference Protocol's infer, its texts as BYTES tensors."""
        model = self.model
        body = await read_body(receive)
        if name != model.name:
            return await send_error(send, 404, no_model(name, model.name))
        if not model.ready:
            return await send_error(send, 503, not_ready(model.name))
        def parse():
            request = self.loads(body)
            return request, protocol.v2_rows(protocol.v2_tensors(request, model.inputs),
                                             model.inputs, model.takes_list)

        parsed = await self.parsed(parse, send)
        if parsed is None:
            return
        request, rows = parsed
        outputs = await self.run(rows, send)
        if outputs is not None:
            await send_json(send, 200, self.dumps(protocol.v2_infer_response(
                model.name, outputs, str(request.get("id") or ""))))

    @staticmethod
    async def parsed(parse, send):
        """`parse()`'s result, or None once a one-line 400 is sent for what it refused."""
        try:
            return parse()
        except protocol.RequestError as e:
            logger.info("400: %s", e)
            await send_error(send, 400, str(e))
        except RecursionError:  # a value nested past Python's stack, anywhere in the body
            await send_error(send, 400, protocol.TOO_DEEP)
        return None

    def loads(self, body: bytes):
        try:
            return self.orjson.loads(body)
        except self.orjson.JSONDecodeError:
            return protocol.parse_json(body)  # raises, saying what is wrong

    async def run(self, rows: list, send) -> dict | None:
        """The rows through the batcher; None when the answer was an error, already sent."""
        try:
            return await self.model.batcher.predict(rows) if rows else {}
        except (Overloaded, NotServing) as e:
            await send_error(send, 503, str(e))
        except Exception as e:  # noqa: BLE001 - the model failed: 500, logged
            logger.exception("predict failed")
            await send_error(send, 500, f"{type(e).__name__} : {e}")
        return None

    async def metrics(self, send):
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = generate_latest()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", CONTENT_TYPE_LATEST.encode()),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def v1_status(self, send):
        model = self.model
        state = ("UNLOADING" if model.draining else "AVAILABLE") if model.ready else "LOADING"
        await send_json(send, 200, self.dumps(protocol.status_response(state, protocol.VERSION)))

    async def v1_metadata(self, send):
        model = self.model
        if model.saved_signatures is not None:
            return await send_json(send, 200, self.dumps({
                "model_spec": {"name": model.name, "signature_name": "",
                               "version": protocol.VERSION},
                "metadata": {"signature_def": signature_defs.as_json(model.saved_signatures)}}))
        if model.example_outputs is None:
            return await send_error(send, 503, f"model {model.name} is warming up")
        await send_json(send, 200, self.dumps(protocol.metadata_response(
            model.name, model.inputs, model.takes_list, model.example_outputs,
            protocol.VERSION)))

    async def v2_ready(self, send):
        ready = self.model.takes_traffic
        await send_json(send, 200 if ready else 503, self.dumps(
            {"name": self.model.name, "ready": ready}))

    async def v2_metadata(self, send):
        model = self.model
        if model.example_outputs is None:
            return await send_error(send, 503, f"model {model.name} is warming up")
        await send_json(send, 200, self.dumps(protocol.v2_metadata(
            model.name, model.inputs, model.takes_list, model.example_outputs)))


class Guard:
    """The outermost ASGI layer: the request-size limit (413, by Content-Length or while the
    body arrives) and the request metrics."""

    def __init__(self, app, max_request_bytes: int, metrics: Metrics, draining=lambda: False):
        self.app, self.limit, self.metrics = app, max_request_bytes, metrics
        self.draining = draining  # then every answer closes its connection
        self.received = 0  # requests so far (the drain waits until none come)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.received += 1
        endpoint = endpoint_of(scope["path"])
        start = time.perf_counter()
        status = [500]
        started = [False]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                started[0] = True
                if self.draining() and not any(k == b"connection" for k, _ in
                                               message.get("headers", ())):
                    message = {**message, "headers": [*message.get("headers", ()),
                                                      (b"connection", b"close")]}
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
                await self.app(scope, counted, send_status)
            except _TooLarge as e:
                if not started[0]:
                    await self.too_large(send_status, e.args[0])
        finally:
            self.metrics.in_flight.dec()
            self.metrics.requests.labels("rest", endpoint, str(status[0])).inc()
            self.metrics.latency.labels("rest", endpoint).observe(time.perf_counter() - start)

    async def too_large(self, send, size: int):
        await send_error(send, 413, f"the request has {size} bytes; this server takes at most "
                                    f"{self.limit} (--max_request_bytes)",
                         [(b"connection", b"close")])


class _TooLarge(Exception):
    pass


class WarmUpError(UserError):
    """The model answered no warm-up request: a server that would never be ready exits."""


def serve(settings: ServerSettings, runtime=None) -> None:
    """Listen, load, warm up, serve until SIGTERM or Ctrl-C, drain, return. `runtime`: what
    answers (default: the export's, as `tasks.runtimes.load_runtime` loads it), anything with
    the interface of `inference.runtime`."""
    from bert_tf2.tasks.runtimes import default_runtime, load_runtime, token_ids_runtime

    chosen = settings.runtime or getattr(runtime, "name", None) or default_runtime(
        settings.export_dir)
    if settings.num_batch_threads > 1 and chosen != "savedmodel":
        raise SettingsError(f"--num_batch_threads={settings.num_batch_threads}: a LiteRT runtime "
                            f"runs one batch at a time (its interpreters are not shared between "
                            f"threads; each call uses every core); more threads are for "
                            f"--runtime=savedmodel")
    grpc_ports = _grpc_ports(settings)
    if grpc_ports:
        from bert_tf2.model_server.grpc_ports import address, open_port
    sock = bind(settings.host, settings.port)
    grpc_sockets = {flag: bind(settings.host, port, flag) for flag, port in grpc_ports}
    if runtime is None:
        runtime = load_runtime(settings.export_dir, chosen)
    logger.info("serving %s as %s: %s (%s), inputs %s", settings.export_dir,
                settings.model_name, chosen, "LiteRT" if chosen != "savedmodel"
                else "SavedModel serve_text", ", ".join(runtime.input_names))
    metrics = Metrics()
    batcher = DynamicBatcher(functools.partial(predict_rows, runtime), settings.max_batch_size,
                             settings.batch_timeout_micros, settings.max_enqueued_batches,
                             settings.num_batch_threads, observe=metrics.observe_batch)
    model = ServedModel(settings.model_name, runtime, batcher)
    model.saved_signatures = signature_defs.read(settings.export_dir)
    model.describe(export_description(settings.export_dir))
    model.token_ids = token_ids_runtime(runtime)
    doors = {}  # flag -> its gRPC method handlers
    if settings.tf_serving_grpc_port:
        from bert_tf2.model_server import tf_serving_grpc

        doors["--tf_serving_grpc_port"] = tf_serving_grpc.handlers(model, metrics)
    if settings.grpc_port:
        from bert_tf2.model_server import oip_grpc

        doors["--grpc_port"] = oip_grpc.handlers(model, metrics)
    warm_up_failed = []

    def warm_up():
        start = time.perf_counter()
        try:
            runtime.warm_up(WARM_BATCHES)
            row = {name: ["warm up"] * 2 if model.takes_list[name] else "warm up"
                   for name in model.inputs}
            model.example_outputs = {name: value[0] for name, value in
                                     predict_rows(runtime, [row]).items()}
        except Exception as error:  # noqa: BLE001 - the server stops and says why, in one line
            warm_up_failed.append(error)
            server.should_exit = True
            return
        batcher.start_accepting()
        model.ready = True
        # Named once the runtime's worker threads exist: started by this thread unnamed, they
        # keep the program's name rather than take "warm-up".
        name_os_threads(but=(WARM_UP,))
        logger.info("warm in %.1f s: ready on http://%s:%d/v1/models/%s", time.perf_counter()
                    - start, settings.host, sock.getsockname()[1], settings.model_name)

    guard = Guard(App(model), settings.max_request_bytes, metrics, lambda: model.draining)
    config = uvicorn.Config(guard,
                            log_config=None, access_log=False, lifespan="off",
                            timeout_keep_alive=65,
                            timeout_graceful_shutdown=max(1, int(settings.drain_seconds)))
    server = uvicorn.Server(config)

    async def main():
        logger.info("event loop: %s", type(asyncio.get_running_loop()).__module__)
        opened = []
        for flag, port in grpc_ports:
            opened.append(open_port(grpc_sockets[flag], settings.grpc_max_message_bytes
                                    or settings.max_request_bytes, doors[flag]))
            await opened[-1].start()
            logger.info("%s: listening on %s", flag, address(settings.host, port))
        name_os_threads(but=(WARM_UP,))  # top -H, py-spy: the batch thread, this loop
        closing = asyncio.ensure_future(close_with_rest(opened))
        await server.serve(sockets=[sock])
        await closing

    async def close_with_rest(opened):
        """The gRPC ports close when the REST port does (the drain sets `should_exit`): calls
        in flight are answered (up to --drain_seconds), new ones are UNAVAILABLE."""
        while not server.should_exit:
            await asyncio.sleep(0.05)
        await asyncio.gather(*(door.stop(settings.drain_seconds) for door in opened))

    drain = Drain(server, sock, model, settings.drain_grace_s, lambda: guard.received)
    threading.Thread(target=warm_up, name=WARM_UP, daemon=True).start()
    # uvicorn runs on a thread of its own, where it leaves signals alone; this (main) thread
    # takes SIGTERM and SIGINT and tells it to stop.
    serving = threading.Thread(target=run_on, args=(config.get_loop_factory(), main()),
                               name="server")
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, drain.on_signal) for sig in handled}
    try:
        serving.start()
        while serving.is_alive():
            serving.join(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    drained = batcher.stop(settings.drain_seconds)
    logger.info("stopped%s", "" if drained else " (rows still running at the drain timeout)")
    if warm_up_failed:
        raise WarmUpError(f"{settings.export_dir}: the model failed its warm-up, so the server "
                          f"never got ready ({message_of(warm_up_failed[0])}); BERT_TRACEBACK=1 "
                          f"shows where it failed") from warm_up_failed[0]


def export_description(export_dir: str) -> dict:
    """The export's `serving.json` (its task, a classifier's labels), or {} without one."""
    from bert_tf2.inference.litert_layout import DESCRIPTION

    try:
        with open(os.path.join(export_dir, "assets.extra", DESCRIPTION), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def run_on(loop_factory, coroutine):
    """`coroutine` run to its end on the event loop uvicorn picks (uvloop where it is installed,
    as `uvicorn.run` would; `asyncio.run` alone gave the standard loop, whose Python selector
    and transports took the event loop's CPU a request at 16 clients from 77 microseconds to
    120)."""
    if loop_factory is None or not hasattr(asyncio, "Runner"):  # Python 3.10: the standard loop
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coroutine)


def _grpc_ports(settings: ServerSettings) -> list:
    """`(flag, port)` of each gRPC port served; one line if two flags name the same port."""
    ports = [(flag, port) for flag, port in (("--tf_serving_grpc_port",
                                              settings.tf_serving_grpc_port),
                                             ("--grpc_port", settings.grpc_port)) if port]
    taken = {"--port": settings.port}
    for flag, port in ports:
        other = next((name for name, value in taken.items() if value == port), None)
        if other is not None:
            raise SettingsError(f"{flag}={port}: {other} is {port} too; each protocol needs a "
                                f"port of its own")
        taken[flag] = port
    return ports
