"""The server's gRPC ports (TF Serving's API on `--tf_serving_grpc_port`, the Open Inference
Protocol on `--grpc_port`), each an HTTP/2 server of this package's (`http2_grpc`) on the REST
port's event loop, held to what the REST port holds to.

- It listens on `--host` only, on the socket `app.bind` bound before the model loaded: a taken
  port is refused in one line, and SO_REUSEPORT is off (gRPC's own server turned it on, which let
  a second server share the port and take half of its connections).
- A message over the size limit is RESOURCE_EXHAUSTED, with gRPC's own words.
- A client's mistake is its status code and one line, logged at INFO as the REST port logs a 400:
  `Refused` (a code of its choice), `protocol.RequestError` or a message that does not parse
  (INVALID_ARGUMENT); a full queue is RESOURCE_EXHAUSTED (TF Serving's answer to overload), a
  model warming up or draining UNAVAILABLE. Only the model failing on a batch logs a traceback,
  as over REST (INTERNAL).
- Every call is counted in `/metrics` under its protocol, endpoint and status code.
"""
from __future__ import annotations

import asyncio
import logging
import time

from google.protobuf.message import DecodeError

from bert_tf2.model_server.batching import NotServing, Overloaded
from bert_tf2.model_server.http2_grpc import Server, StatusCode
from bert_tf2.model_server.protocol import RequestError

logger = logging.getLogger(__name__)

__all__ = ["Refused", "StatusCode", "address", "open_port", "unary"]


class Refused(Exception):
    """A call answered with `code` and the one-line `message`."""

    def __init__(self, code: StatusCode, message: str):
        super().__init__(message)
        self.code = code


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def open_port(sock, max_message_bytes: int, methods: dict) -> Server:
    """The gRPC server of `methods` (`{path: unary(...)}`) on `sock`, a listening socket bound
    by `app.bind` (`await server.start()` on the event loop that will run it)."""
    return Server(sock, methods, max_message_bytes)


def unary(function, request_type, response_type, metrics, protocol: str, endpoint: str):
    """`async function(request) -> response` as a unary method of `http2_grpc.Server`:
    `async (request bytes) -> (StatusCode, details, answer bytes)`, every refusal in one line,
    every call counted."""
    name = request_type.DESCRIPTOR.name

    async def answer(message: bytes):
        start = time.perf_counter()
        code, details, payload = StatusCode.OK, "", None
        metrics.in_flight.inc()
        try:
            try:
                request = request_type.FromString(message)
            except (DecodeError, RecursionError) as e:
                raise RequestError(f"the request is not a {name} ({e})") from None
            payload = response_type.SerializeToString(await function(request))
        except asyncio.CancelledError:  # the client went away: nothing to answer
            code = StatusCode.CANCELLED
            raise
        except Refused as e:
            code, details = e.code, str(e)
        except RequestError as e:
            code, details = StatusCode.INVALID_ARGUMENT, str(e)
        except Overloaded as e:
            code, details = StatusCode.RESOURCE_EXHAUSTED, str(e)
        except NotServing as e:
            code, details = StatusCode.UNAVAILABLE, str(e)
        except RecursionError:
            code, details = StatusCode.INVALID_ARGUMENT, "the request nests too deep"
        except Exception as e:  # noqa: BLE001 - the model failed: INTERNAL, logged
            logger.exception("%s failed", endpoint)
            code, details = StatusCode.INTERNAL, f"{type(e).__name__} : {e}"
        finally:
            metrics.in_flight.dec()
            metrics.requests.labels(protocol, endpoint, code.name).inc()
            metrics.latency.labels(protocol, endpoint).observe(time.perf_counter() - start)
        if code is not StatusCode.OK and code is not StatusCode.INTERNAL:
            logger.info("%s %s: %s", protocol, code.name, details)
        return code, details, payload

    return answer
