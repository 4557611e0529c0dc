"""The server's gRPC ports (TF Serving's API on `--tf_serving_grpc_port`, the Open Inference
Protocol on `--grpc_port`), each a `grpc.aio` server held to what the REST port holds to.

- It listens on `--host` only, and a taken port is refused in one line before the model loads
  (`app.bind`): SO_REUSEPORT is off (gRPC's default is on, which let a second server share the
  port and take half of its connections).
- A message over the size limit is RESOURCE_EXHAUSTED (gRPC's own check).
- A client's mistake is its status code and one line, logged at INFO as the REST port logs a 400:
  `Refused` (a code of its choice), `protocol.RequestError` (INVALID_ARGUMENT); a full queue is
  RESOURCE_EXHAUSTED (TF Serving's answer to overload), a model warming up or draining
  UNAVAILABLE. Only the model failing on a batch logs a traceback, as over REST (INTERNAL).
- Every call is counted in `/metrics` under its protocol, endpoint and status code.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time

import grpc

from bert_tf2.model_server.batching import NotServing, Overloaded
from bert_tf2.model_server.protocol import RequestError
from bert_tf2.process.errors import SettingsError

logger = logging.getLogger(__name__)

SEND_LIMIT = 64 << 20  # answers may be larger than requests (a SQuAD window's logits)


class Refused(Exception):
    """A call answered with `code` and the one-line `message`."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def open_port(host: str, port: int, flag: str, max_message_bytes: int, handlers: list):
    """A `grpc.aio` server of `handlers` bound to `host:port` (call on the event loop that will
    run it; `await server.start()`)."""
    server = grpc.aio.server(handlers=handlers, options=[
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max(max_message_bytes, SEND_LIMIT))])
    try:
        bound = server.add_insecure_port(address(host, port))
    except RuntimeError:
        bound = 0
    if not bound:
        raise SettingsError(f"{flag}={port}: cannot listen on {host}:{port} (another process "
                            f"took it while the model loaded; stop it or pick another {flag})")
    return server


def unary(function, request_type, response_type, metrics, protocol: str, endpoint: str):
    """`async function(request, context) -> response` as a gRPC method handler that answers
    every refusal in one line and counts the call."""

    @functools.wraps(function)
    async def answer(request, context):
        start = time.perf_counter()
        code = grpc.StatusCode.OK
        metrics.in_flight.inc()
        try:
            try:
                return await function(request, context)
            except asyncio.CancelledError:  # the client went away: nothing to answer
                code = grpc.StatusCode.CANCELLED
                raise
            except Refused as e:
                code, message = e.code, str(e)
            except RequestError as e:
                code, message = grpc.StatusCode.INVALID_ARGUMENT, str(e)
            except Overloaded as e:
                code, message = grpc.StatusCode.RESOURCE_EXHAUSTED, str(e)
            except NotServing as e:
                code, message = grpc.StatusCode.UNAVAILABLE, str(e)
            except RecursionError:
                code, message = grpc.StatusCode.INVALID_ARGUMENT, "the request nests too deep"
            except Exception as e:  # noqa: BLE001 - the model failed: INTERNAL, logged
                logger.exception("%s failed", endpoint)
                code, message = grpc.StatusCode.INTERNAL, f"{type(e).__name__} : {e}"
            if code != grpc.StatusCode.INTERNAL:
                logger.info("%s %s: %s", protocol, code.name, message)
            await context.abort(code, message)
        finally:
            metrics.in_flight.dec()
            metrics.requests.labels(protocol, endpoint, code.name).inc()
            metrics.latency.labels(protocol, endpoint).observe(time.perf_counter() - start)

    return grpc.unary_unary_rpc_method_handler(
        answer, request_deserializer=request_type.FromString,
        response_serializer=response_type.SerializeToString)
