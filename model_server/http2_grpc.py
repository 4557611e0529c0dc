"""gRPC's unary calls over HTTP/2, answered on the server's own event loop: the transport of both
gRPC ports (`grpc_ports`).

`grpc.aio`'s server crosses from its C core's threads to the event loop for each step of a call:
135-166 microseconds of the server's CPU a call that only returns its request, on two cores,
where the REST port's whole path through the loop is about 100 (docs/serving.md, "Over gRPC").
A unary call is few frames: the request's HEADERS and DATA, the answer's HEADERS, DATA and
trailing HEADERS. Read and written here as an asyncio protocol, the same call costs 39
microseconds (`python bench/grpc_echo.py`), and the calls of every connection ready in one loop
turn reach the batcher in that turn, as REST's do.

What it speaks (RFC 9113, gRPC's PROTOCOL-HTTP2.md), over cleartext TCP with prior knowledge, as
gRPC's insecure channels connect:
- the connection preface, SETTINGS and their acknowledgement, PING, WINDOW_UPDATE, RST_STREAM,
  GOAWAY, CONTINUATION; PRIORITY and unknown frame types are ignored, as the RFC says;
- header blocks decoded by `hpack` (RFC 7541, its dynamic table and Huffman codes); the answers'
  few headers are written as literals that need no table;
- flow control both ways: the peer's windows are kept to (an answer larger than them waits for
  WINDOW_UPDATE or SETTINGS), and the connection's window given to the peer is replenished only
  as requests are read whole or dropped, so one connection holds at most that window of
  unfinished requests; each stream's, as its data arrives, up to the size limit; data beyond the
  connection's window is FLOW_CONTROL_ERROR;
- unary methods only, each `path -> async (message bytes) -> (code, details, answer bytes)`; a
  request compressed with gzip or deflate is decompressed, at most to the size limit; a message
  over the size limit is RESOURCE_EXHAUSTED from its 5-byte prefix, before its body is read, and
  so is a body longer than its prefix says;
- a protocol error closes its connection with GOAWAY and one line in the log; a client that
  resets most of the calls it opens (HTTP/2's "rapid reset"), or that does not send the preface
  within `PREFACE_S`, is disconnected; while the client reads none of what is written to it,
  nothing more is read from it (no answers pile up for a client that only sends);
- a `grpc-message` is cut to `MAX_DETAILS` characters, so an answer's header block fits one
  frame.

`stop(grace)` closes the listening socket, sends every connection GOAWAY (the peer sends new calls
elsewhere, or is refused: UNAVAILABLE), answers the calls in flight for up to `grace` seconds,
then cancels what is left and drops the connections.
"""
from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import struct
import zlib

import hpack

logger = logging.getLogger(__name__)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED, FRAME_SIZE_ERROR, \
    REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, ENHANCE_YOUR_CALM = \
    0x0, 0x1, 0x2, 0x3, 0x5, 0x6, 0x7, 0x8, 0x9, 0xB
MAX_FRAME = 16384  # the frame size this end reads (the RFC's default; it announces no other)
MAX_WINDOW = (1 << 31) - 1
STREAM_WINDOW = 1 << 20  # what each call may send before this end reads it
CONNECTION_WINDOW = 16 << 20  # at least; twice the size limit where that is more
MAX_STREAMS = 100  # calls open at once on a connection (gRPC's own servers' common setting)
MAX_HEADER_BLOCK = 64 << 10
MAX_DETAILS = 1000  # characters of a grpc-message
PREFACE_S = 10.0  # for a new connection's preface to arrive
RESETS_ALLOWED = 100  # calls a client may reset before they are answered, beyond half it opens

FRAME_HEAD = struct.Struct(">BHBBI")


class StatusCode(enum.Enum):
    """gRPC's status codes (grpc/doc/statuscodes.md)."""
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class ProtocolError(Exception):
    """The peer broke HTTP/2: its connection ends with GOAWAY carrying `code`."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR):
        super().__init__(message)
        self.code = code


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return FRAME_HEAD.pack(n >> 16, n & 0xFFFF, kind, flags, stream) + payload


def hpack_integer(value: int, prefix_bits: int) -> bytes:
    """HPACK's integer with a `prefix_bits` prefix (RFC 7541, 5.1)."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out = [limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal_header(name: bytes, value: bytes) -> bytes:
    """A header as a literal without indexing, with a literal name (RFC 7541, 6.2.2)."""
    return (b"\x00" + hpack_integer(len(name), 7) + name + hpack_integer(len(value), 7)
            + value)


# ":status: 200" (the static table's 8th entry) and "content-type: application/grpc" (a literal
# value for the static table's name 31), neither indexed: no dynamic table is ever needed.
RESPONSE_HEAD = (b"\x88" + hpack_integer(31, 4) + hpack_integer(16, 7)
                 + b"application/grpc")
OK_TRAILERS = literal_header(b"grpc-status", b"0")


def percent_encoded(message: str) -> bytes:
    """grpc-message's encoding: UTF-8, with every byte outside 0x20-0x7E and '%' as %XX."""
    return b"".join(bytes([b]) if 0x20 <= b <= 0x7E and b != 0x25 else b"%%%02X" % b
                    for b in message.encode("utf-8"))


def trailers(code: StatusCode, details: str) -> bytes:
    """The trailing headers of a call that ended with `code` and `details` (cut to
    `MAX_DETAILS` characters: a header block of the answer must fit the client's frames)."""
    block = literal_header(b"grpc-status", str(code.value).encode())
    if details:
        if len(details) > MAX_DETAILS:
            details = details[:MAX_DETAILS - 3] + "..."
        block += literal_header(b"grpc-message", percent_encoded(details))
    return block


def decompressed(message: bytes, encoding: bytes, limit: int):
    """`message` inflated by `encoding` (gzip, deflate), or None for an encoding not read here;
    at most `limit` + 1 bytes are ever inflated, so a small bomb stays small."""
    if encoding == b"gzip":
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == b"deflate":
        inflate = zlib.decompressobj()
    else:
        return None
    return inflate.decompress(message, limit + 1)


class _Stream:
    __slots__ = ("id", "headers", "body", "declared", "task", "done", "remote_closed",
                 "send_window", "pending", "unacknowledged", "held")

    def __init__(self, stream_id: int, send_window: int):
        self.id = stream_id
        self.headers = None
        self.body = bytearray()
        self.declared = None  # the message's length, from its 5-byte prefix
        self.task = None
        self.done = False  # answered (or refused): later DATA is dropped
        self.remote_closed = False  # the peer's END_STREAM came
        self.send_window = send_window
        self.pending = None  # the answer's bytes left to send while a window is shut
        self.unacknowledged = 0  # bytes read since the last stream WINDOW_UPDATE
        self.held = 0  # bytes of the connection's window this stream's body holds


class Server:
    """Answers unary gRPC `methods` (`{"/package.Service/Method": async (bytes) -> (StatusCode,
    details, bytes)}`) on `sock`, a bound listening socket, with requests of at most
    `max_message_bytes`."""

    def __init__(self, sock, methods: dict, max_message_bytes: int):
        self.sock, self.methods, self.max_message_bytes = sock, methods, max_message_bytes
        self.window = max(CONNECTION_WINDOW, 2 * (max_message_bytes + 5))
        self.connections = set()
        self.closing = False
        self._server = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), sock=self.sock)

    async def stop(self, grace: float) -> None:
        self.closing = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.go_away()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while any(c.running() for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.drop()
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):  # Python 3.12 waits for connections
                await asyncio.wait_for(self._server.wait_closed(), 1.0)


class _Connection(asyncio.Protocol):
    def __init__(self, server: Server):
        self.server = server
        self.transport = None
        self.buffer = bytearray()
        self.preface = False
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = MAX_HEADER_BLOCK
        self.streams = {}
        self.last_stream = 0
        self.continuing = None  # (stream id, flags, header block so far) until END_HEADERS
        self.send_window = 65535  # the connection's, for this end's DATA
        self.peer_stream_window = 65535  # SETTINGS_INITIAL_WINDOW_SIZE of the peer
        self.peer_max_frame = 16384
        self.released = 0  # bytes of the connection's window read and let go, not yet given back
        self.receive_window = server.window  # what the peer may still send on the connection
        self.opened = self.reset = 0  # calls the client opened, and reset before their answer
        self.going_away = False
        self.timer = None
        self.peer = "?"

    # ----------------------------------------------------------------------------- the transport
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connections.add(self)
        transport.write(
            frame(SETTINGS, 0, 0, struct.pack(">HIHIHI", 0x3, MAX_STREAMS, 0x4, STREAM_WINDOW,
                                              0x6, MAX_HEADER_BLOCK))
            + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.server.window - 65535)))
        self.timer = asyncio.get_running_loop().call_later(PREFACE_S, self._no_preface)
        if self.server.closing:
            self.go_away()

    def _no_preface(self) -> None:
        if not self.preface:
            self.drop()

    def connection_lost(self, exc) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.server.connections.discard(self)
        for stream in self.streams.values():
            if stream.task is not None and not stream.task.done():
                stream.task.cancel()
        self.streams.clear()

    def pause_writing(self) -> None:
        """The client reads nothing of what is written to it: read nothing more from it."""
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.transport.resume_reading()

    def running(self) -> bool:
        """Whether a call is open: received in part, being answered, or waiting for a window."""
        return bool(self.streams)

    def go_away(self) -> None:
        if not self.going_away and not self.transport.is_closing():
            self.going_away = True
            self.transport.write(frame(GOAWAY, 0, 0, struct.pack(">II", self.last_stream,
                                                                 NO_ERROR)))
        if not self.running():
            self.close()

    def close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def drop(self) -> None:
        """Close at once, whatever is still to be written (a client that reads nothing)."""
        self.transport.abort()

    def _fail(self, out: list, code: int) -> None:
        self.transport.write(b"".join(out) + frame(GOAWAY, 0, 0, struct.pack(
            ">II", self.last_stream, code)))
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        if not self.preface:
            if len(buffer) < len(PREFACE):
                if not PREFACE.startswith(bytes(buffer)):
                    self.transport.close()  # not HTTP/2 with prior knowledge (HTTP/1.1, TLS)
                return
            if buffer[:len(PREFACE)] != PREFACE:
                self.transport.close()
                return
            del buffer[:len(PREFACE)]
            self.preface = True
            self.timer.cancel()
        out = []
        pos, end = 0, len(buffer)
        try:
            while end - pos >= 9:
                high, low, kind, flags, stream_id = FRAME_HEAD.unpack_from(buffer, pos)
                length = (high << 16) | low
                if length > MAX_FRAME:
                    raise ProtocolError(f"a frame of {length} bytes (at most {MAX_FRAME})",
                                        FRAME_SIZE_ERROR)
                if end - pos - 9 < length:
                    break
                payload = bytes(buffer[pos + 9:pos + 9 + length])
                pos += 9 + length
                self._frame(kind, flags, stream_id & MAX_WINDOW, payload, out)
        except (ProtocolError, hpack.HPACKError) as e:
            code = e.code if isinstance(e, ProtocolError) else COMPRESSION_ERROR
            logger.info("gRPC connection from %s closed: %s", self.peer, e)
            self._fail(out, code)
            return
        except Exception:  # noqa: BLE001 - a fault of this module's: the connection ends, logged
            logger.exception("gRPC connection from %s failed", self.peer)
            self._fail(out, INTERNAL_ERROR)
            return
        del buffer[:pos]
        if self.released >= self.server.window // 4:
            out.append(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.released)))
            self.receive_window += self.released
            self.released = 0
        if out:
            self.transport.write(b"".join(out))
        if self.going_away and not self.running():
            self.close()

    # ---------------------------------------------------------------------------------- frames
    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes, out: list) -> None:
        if self.continuing is not None and kind != CONTINUATION:
            raise ProtocolError("a frame inside a header block")
        if kind == DATA:
            self._data(flags, stream_id, payload, out)
        elif kind == HEADERS:
            if stream_id == 0 or stream_id % 2 == 0:
                raise ProtocolError(f"HEADERS on stream {stream_id}")
            if flags & PADDED:
                if not payload or payload[0] >= len(payload):
                    raise ProtocolError("padding longer than the frame")
                payload = payload[1:len(payload) - payload[0]]
            if flags & PRIORITY_FLAG:
                if len(payload) < 5:
                    raise ProtocolError("HEADERS too short for its priority", FRAME_SIZE_ERROR)
                payload = payload[5:]
            if flags & END_HEADERS:
                self._headers(stream_id, flags, payload, out)
            else:
                self.continuing = (stream_id, flags, bytearray(payload))
        elif kind == CONTINUATION:
            if self.continuing is None or self.continuing[0] != stream_id:
                raise ProtocolError("CONTINUATION outside a header block")
            block = self.continuing[2]
            block += payload
            if len(block) > MAX_HEADER_BLOCK:
                raise ProtocolError(f"a header block over {MAX_HEADER_BLOCK} bytes")
            if flags & END_HEADERS:
                _, first_flags, _ = self.continuing
                self.continuing = None
                self._headers(stream_id, first_flags, bytes(block), out)
        elif kind == SETTINGS:
            if stream_id != 0:
                raise ProtocolError("SETTINGS on a stream")
            if not flags & ACK:
                self._settings(payload)
                out.append(frame(SETTINGS, ACK, 0))
                self._flush(out)
        elif kind == WINDOW_UPDATE:
            if len(payload) != 4:
                raise ProtocolError("WINDOW_UPDATE of other than 4 bytes", FRAME_SIZE_ERROR)
            increment = struct.unpack(">I", payload)[0] & MAX_WINDOW
            if stream_id == 0:
                if not increment:
                    raise ProtocolError("WINDOW_UPDATE of 0 on the connection")
                self.send_window += increment
                if self.send_window > MAX_WINDOW:
                    raise ProtocolError("the connection's window over 2^31-1",
                                        FLOW_CONTROL_ERROR)
            elif stream_id > self.last_stream:
                raise ProtocolError(f"WINDOW_UPDATE on stream {stream_id}, never opened")
            elif stream_id in self.streams:
                stream = self.streams[stream_id]
                stream.send_window += increment
                if not increment or stream.send_window > MAX_WINDOW:
                    self._reset(stream, PROTOCOL_ERROR if not increment else FLOW_CONTROL_ERROR,
                                out)
            self._flush(out)
        elif kind == PING:
            if len(payload) != 8:
                raise ProtocolError("PING of other than 8 bytes", FRAME_SIZE_ERROR)
            if not flags & ACK:
                out.append(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            if len(payload) != 4:
                raise ProtocolError("RST_STREAM of other than 4 bytes", FRAME_SIZE_ERROR)
            if stream_id == 0 or stream_id > self.last_stream:
                raise ProtocolError(f"RST_STREAM on stream {stream_id}, never opened")
            stream = self.streams.pop(stream_id, None)
            if stream is not None:
                self._release(stream)
                if not stream.done:  # the client gave up (its deadline, or cancelled)
                    self.reset += 1
                    if stream.task is not None and not stream.task.done():
                        stream.task.cancel()
                    if self.reset > RESETS_ALLOWED and self.reset > self.opened // 2:
                        raise ProtocolError(f"{self.reset} of {self.opened} calls reset before "
                                            f"their answer", ENHANCE_YOUR_CALM)
        elif kind == GOAWAY:
            self.going_away = True
        elif kind == PUSH_PROMISE:
            raise ProtocolError("PUSH_PROMISE from a client")
        # PRIORITY and unknown frame types: ignored (RFC 9113, 4.1 and 5.3.2)

    def _settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise ProtocolError("SETTINGS of a length not a multiple of 6", FRAME_SIZE_ERROR)
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == 0x4:  # SETTINGS_INITIAL_WINDOW_SIZE: every stream's window moves with it
                if value > MAX_WINDOW:
                    raise ProtocolError("SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1",
                                        FLOW_CONTROL_ERROR)
                for stream in self.streams.values():
                    stream.send_window += value - self.peer_stream_window
                    if stream.send_window > MAX_WINDOW:
                        raise ProtocolError("a stream's window over 2^31-1", FLOW_CONTROL_ERROR)
                self.peer_stream_window = value
            elif key == 0x5:
                if not 16384 <= value <= (1 << 24) - 1:
                    raise ProtocolError(f"SETTINGS_MAX_FRAME_SIZE {value}")
                self.peer_max_frame = value

    def _headers(self, stream_id: int, flags: int, block: bytes, out: list) -> None:
        headers = self.decoder.decode(block, raw=True)
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers of a request: only END_STREAM matters
            if stream.remote_closed or not flags & END_STREAM:
                self._reset(stream, STREAM_CLOSED if stream.remote_closed else PROTOCOL_ERROR,
                            out)
                return
            self._end_of_request(stream, out)
            return
        if stream_id <= self.last_stream:
            return  # a stream already answered and forgotten (or reset)
        self.last_stream = stream_id
        if self.going_away or len(self.streams) >= MAX_STREAMS:
            out.append(frame(RST_STREAM, 0, stream_id, struct.pack(">I", REFUSED_STREAM)))
            return
        self.opened += 1
        stream = _Stream(stream_id, self.peer_stream_window)
        stream.headers = headers
        self.streams[stream_id] = stream
        if flags & END_STREAM:
            self._end_of_request(stream, out)

    def _data(self, flags: int, stream_id: int, payload: bytes, out: list) -> None:
        if stream_id == 0:
            raise ProtocolError("DATA on stream 0")
        length = len(payload)
        self.receive_window -= length
        if self.receive_window < 0:
            raise ProtocolError("DATA beyond the connection's window", FLOW_CONTROL_ERROR)
        stream = self.streams.get(stream_id)
        if stream is None and stream_id > self.last_stream:
            raise ProtocolError(f"DATA on stream {stream_id}, never opened")
        if stream is None or stream.remote_closed or stream.done:
            self.released += length  # answered early, reset, or unknown: dropped
            if stream is not None and stream.remote_closed:
                self._reset(stream, STREAM_CLOSED, out)
            elif stream is not None and flags & END_STREAM:
                stream.remote_closed = True
                self._forget(stream)
            return
        # (No stream can pass its own window: it is given back from half on, a frame at most
        # behind.)
        stream.held += length
        if flags & PADDED:
            if not payload or payload[0] >= length:
                raise ProtocolError("padding longer than the frame")
            payload = payload[1:length - payload[0]]
        body = stream.body
        body += payload
        limit = self.server.max_message_bytes
        if stream.declared is None and len(body) >= 5:
            stream.declared = struct.unpack_from(">I", body, 1)[0]
        refusal = None
        if stream.declared is not None and stream.declared > limit:
            refusal = f"Received message larger than max ({stream.declared} vs. {limit})"
        elif stream.declared is not None and len(body) > 5 + stream.declared:
            refusal = (f"a unary call takes exactly one message ({len(body) - 5} bytes came for "
                       f"a message of {stream.declared})")
        if refusal is not None:
            code = StatusCode.RESOURCE_EXHAUSTED if "larger" in refusal else \
                StatusCode.INVALID_ARGUMENT
            logger.info("gRPC %s: %s", code.name, refusal)
            self._answer(stream, code, refusal, None, out)
            return
        stream.unacknowledged += length
        if stream.unacknowledged >= STREAM_WINDOW // 2 and not flags & END_STREAM:
            out.append(frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I",
                                                                     stream.unacknowledged)))
            stream.unacknowledged = 0
        if flags & END_STREAM:
            self._end_of_request(stream, out)

    # ---------------------------------------------------------------------------------- calls
    def _end_of_request(self, stream: _Stream, out: list) -> None:
        stream.remote_closed = True
        body, stream.body = stream.body, None
        self._release(stream)
        if stream.done:
            self._forget(stream)
            return
        headers = dict(stream.headers)
        path = headers.get(b":path", b"").decode("latin-1")
        method = self.server.methods.get(path)
        limit = self.server.max_message_bytes
        if headers.get(b":method") != b"POST" or not headers.get(
                b"content-type", b"").startswith(b"application/grpc"):
            refusal = (StatusCode.UNIMPLEMENTED, "not a gRPC call (POST of application/grpc)")
        elif method is None:
            refusal = (StatusCode.UNIMPLEMENTED, f"Method not found: {path[:200]}")
        elif len(body) < 5 or len(body) != 5 + stream.declared:
            refusal = (StatusCode.INVALID_ARGUMENT, "a unary call takes exactly one message "
                                                    f"({len(body)} bytes of messages came)")
        else:
            refusal = None
            message = bytes(body[5:])
            if body[0]:  # compressed
                encoding = headers.get(b"grpc-encoding", b"identity")
                try:
                    message = decompressed(message, encoding, limit)
                except zlib.error as e:
                    refusal = (StatusCode.INTERNAL, f"the message does not decompress: {e}")
                else:
                    if message is None:
                        refusal = (StatusCode.UNIMPLEMENTED if encoding != b"identity" else
                                   StatusCode.INTERNAL,
                                   f"a compressed message with grpc-encoding "
                                   f"{encoding.decode('latin-1')[:50]} (this server reads "
                                   f"gzip and deflate)")
                    elif len(message) > limit:
                        refusal = (StatusCode.RESOURCE_EXHAUSTED, f"Received message larger "
                                   f"than max (more than {limit} bytes, inflated)")
        if refusal is not None:
            logger.info("gRPC %s: %s", refusal[0].name, refusal[1])
            self._answer(stream, *refusal, None, out)
            return
        stream.task = asyncio.ensure_future(self._call(stream, method, message))

    async def _call(self, stream: _Stream, method, message: bytes) -> None:
        try:
            code, details, answer = await method(message)
        except asyncio.CancelledError:
            if self.streams.get(stream.id) is stream:  # not the client's reset: a drain's end
                self._forget(stream, force=True)
            return
        except Exception as e:  # noqa: BLE001 - a method that failed: INTERNAL, logged
            logger.exception("%s failed", stream.headers and dict(stream.headers).get(b":path"))
            code, details, answer = StatusCode.INTERNAL, f"{type(e).__name__} : {e}", None
        if self.transport.is_closing() or self.streams.get(stream.id) is not stream:
            return  # the peer reset the stream, or left
        out = []
        if code is StatusCode.OK and answer is None:
            code, details = StatusCode.INTERNAL, "the method gave no answer"
        self._answer(stream, code, details, answer, out)
        self.transport.write(b"".join(out))
        if self.going_away and not self.running():
            self.close()

    def _answer(self, stream: _Stream, code: StatusCode, details: str, answer, out: list):
        stream.done = True
        if code is not StatusCode.OK:  # trailers only
            out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream.id,
                             RESPONSE_HEAD + trailers(code, details)))
            self._closed_by_us(stream, out)
            return
        out.append(frame(HEADERS, END_HEADERS, stream.id, RESPONSE_HEAD))
        data = struct.pack(">BI", 0, len(answer)) + answer
        if len(data) <= min(self.send_window, stream.send_window, self.peer_max_frame):
            self.send_window -= len(data)
            stream.send_window -= len(data)
            out.append(frame(DATA, 0, stream.id, data))
            out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream.id, OK_TRAILERS))
            self._closed_by_us(stream, out)
            return
        stream.pending = memoryview(data)
        self._flush(out)

    def _flush(self, out: list) -> None:
        """Send what the windows now allow of answers that waited for them."""
        for stream in [s for s in self.streams.values() if s.pending is not None]:
            data = stream.pending
            while len(data) and self.send_window > 0 and stream.send_window > 0:
                n = min(len(data), self.send_window, stream.send_window, self.peer_max_frame)
                out.append(frame(DATA, 0, stream.id, bytes(data[:n])))
                data = data[n:]
                self.send_window -= n
                stream.send_window -= n
            stream.pending = data
            if not len(data):
                stream.pending = None
                out.append(frame(HEADERS, END_HEADERS | END_STREAM, stream.id, OK_TRAILERS))
                self._closed_by_us(stream, out)

    def _closed_by_us(self, stream: _Stream, out: list) -> None:
        if not stream.remote_closed:  # answered before the request ended: stop its sending
            out.append(frame(RST_STREAM, 0, stream.id, struct.pack(">I", NO_ERROR)))
            stream.remote_closed = True
            self._release(stream)
            stream.body = None
        self._forget(stream)

    def _reset(self, stream: _Stream, code: int, out: list) -> None:
        """End `stream` with RST_STREAM `code` (a stream error): its call, if running, is
        cancelled and never answered."""
        out.append(frame(RST_STREAM, 0, stream.id, struct.pack(">I", code)))
        if stream.task is not None and not stream.task.done():
            stream.task.cancel()
        self._release(stream)
        self._forget(stream, force=True)

    def _release(self, stream: _Stream) -> None:
        """The connection's window that `stream`'s body held, to give back to the client."""
        self.released += stream.held
        stream.held = 0

    def _forget(self, stream: _Stream, force: bool = False) -> None:
        if force or stream.pending is None:
            self.streams.pop(stream.id, None)
