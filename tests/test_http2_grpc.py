"""model_server.http2_grpc spoken to frame by frame, in process (no socket): what the real gRPC
clients of test_model_server_grpc.py do not make it do. Flow control both ways, a header block in
CONTINUATION frames, a message over the limit refused from its prefix, compressed messages,
grpc-message's percent-encoding, a call reset by its client, a protocol error, the drain's GOAWAY;
each answer read back with hpack, as a client reads it."""
import asyncio
import gzip
import struct

import pytest

hpack = pytest.importorskip("hpack", reason="the serve extra is not installed: pip install "
                            "'bert-tf2[serve]'")

from bert_tf2.model_server import http2_grpc as h2  # noqa: E402

ECHO = "/bench.Echo/Echo"


class Transport:
    """What an asyncio transport gives the protocol: the bytes written, closing."""

    def __init__(self):
        self.written = bytearray()
        self.closed = self.paused = False

    def write(self, data):
        assert not self.closed
        self.written += data

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def abort(self):
        self.closed = True

    def pause_reading(self):
        self.paused = True

    def resume_reading(self):
        self.paused = False

    def get_extra_info(self, name):
        return ("127.0.0.1", 5000) if name == "peername" else None

    def frames(self) -> list:
        """The frames written since the last call: `(type, flags, stream, payload)`."""
        data, self.written = bytes(self.written), bytearray()
        found = []
        while data:
            high, low, kind, flags, stream = struct.unpack_from(">BHBBI", data)
            length = (high << 16) | low
            found.append((kind, flags, stream, data[9:9 + length]))
            data = data[9 + length:]
        return found


class Client:
    """One end of a connection to a `Server` of `methods`: sends frames, reads answers."""

    def __init__(self, methods, limit=1000):
        self.server = h2.Server(None, methods, limit)
        self.connection = h2._Connection(self.server)
        self.transport = Transport()
        self.connection.connection_made(self.transport)
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.connection.data_received(h2.PREFACE + h2.frame(h2.SETTINGS, 0, 0))
        kinds = [kind for kind, *_ in self.transport.frames()]
        assert kinds == [h2.SETTINGS, h2.WINDOW_UPDATE, h2.SETTINGS]  # ours, then the ACK

    def send(self, *frames):
        self.connection.data_received(b"".join(frames))

    def headers(self, stream, path=ECHO, flags=h2.END_HEADERS, extra=()):
        return h2.frame(h2.HEADERS, flags, stream, self.encoder.encode([
            (":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", "localhost"), ("content-type", "application/grpc"), ("te", "trailers"),
            *extra]))

    def call(self, stream, message: bytes, path=ECHO, compressed=False, extra=()):
        """The call's frames: its HEADERS, then its message in DATA frames of at most 16,384
        bytes (the server's frame size), the last one ending the stream."""
        data = struct.pack(">BI", int(compressed), len(message)) + message
        pieces = [data[i:i + 16_384] for i in range(0, len(data), 16_384)]
        return [self.headers(stream, path, extra=extra)] + [
            h2.frame(h2.DATA, h2.END_STREAM if i == len(pieces) - 1 else 0, stream, piece)
            for i, piece in enumerate(pieces)]

    def answers(self) -> dict:
        """`{stream: {"headers": [...], "data": bytes, "trailers": {...}, "ended": bool}}`, and
        the other frames under "frames"."""
        found = {"frames": []}
        for kind, flags, stream, payload in self.transport.frames():
            if kind == h2.HEADERS:
                answer = found.setdefault(stream, {"data": b"", "ended": False})
                decoded = dict(self.decoder.decode(payload))
                answer["trailers" if "grpc-status" in decoded else "headers"] = decoded
                answer["ended"] = bool(flags & h2.END_STREAM)
            elif kind == h2.DATA:
                found.setdefault(stream, {"data": b"", "ended": False})["data"] += payload
            else:
                found["frames"].append((kind, flags, stream, payload))
        return found


async def echo(message: bytes):
    return h2.StatusCode.OK, "", message


def echo_when(release: asyncio.Event):
    """A method that echoes its message once `release` is set."""
    async def held(message: bytes):
        await release.wait()
        return await echo(message)

    return held


def run(coroutine):
    return asyncio.run(coroutine)


def test_a_unary_call_and_its_answer_as_grpc_frames_them():
    async def main():
        client = Client({ECHO: echo})
        client.send(*client.call(1, b"hello"), *client.call(3, b"again"))
        await asyncio.sleep(0)
        answers = client.answers()
        for stream, text in ((1, b"hello"), (3, b"again")):
            answer = answers[stream]
            assert answer["headers"] == {":status": "200", "content-type": "application/grpc"}
            assert answer["data"] == struct.pack(">BI", 0, len(text)) + text
            assert answer["trailers"] == {"grpc-status": "0"} and answer["ended"]
        assert client.connection.streams == {}  # both forgotten once answered
    run(main())


def test_an_answer_larger_than_the_clients_windows_waits_for_window_updates():
    """The client's SETTINGS_INITIAL_WINDOW_SIZE of 10 bytes and its 16,384-byte frames: the
    answer goes out as far as the windows allow, the rest after each WINDOW_UPDATE, the trailers
    last."""
    async def main():
        client = Client({ECHO: echo}, limit=100_000)
        client.send(h2.frame(h2.SETTINGS, 0, 0, struct.pack(">HI", 0x4, 10)))
        assert client.answers()["frames"] == [(h2.SETTINGS, h2.ACK, 0, b"")]
        big = bytes(range(256)) * 200  # 51,200 bytes, in four frames each way
        client.send(*client.call(1, big))
        await asyncio.sleep(0)
        answer = client.answers()[1]
        assert len(answer["data"]) == 10 and "trailers" not in answer
        client.send(h2.frame(h2.WINDOW_UPDATE, 0, 1, struct.pack(">I", 30_000)))
        answer = client.answers()[1]
        assert len(answer["data"]) == 30_000 and "trailers" not in answer
        client.send(h2.frame(h2.WINDOW_UPDATE, 0, 1, struct.pack(">I", 30_000)))
        frames = client.transport.written
        sizes = []
        data = bytes(frames)
        while data:
            length = int.from_bytes(data[:3], "big")
            if data[3] == h2.DATA:
                sizes.append(length)
            data = data[9 + length:]
        assert max(sizes) <= 16_384  # the client's frame size
        answer = client.answers()[1]
        # 65,535 - 10 - 30,000 of the connection's window were left for the rest: all of it.
        assert len(answer["data"]) == 5 + len(big) - 30_010
        assert answer["trailers"] == {"grpc-status": "0"} and answer["ended"]
        assert client.connection.streams == {}
    run(main())


def test_a_header_block_in_continuation_frames_and_a_gzip_message():
    async def main():
        client = Client({ECHO: echo})
        block = client.encoder.encode([
            (":method", "POST"), (":scheme", "http"), (":path", ECHO), (":authority", "h"),
            ("content-type", "application/grpc+proto"), ("grpc-encoding", "gzip")])
        packed = gzip.compress(b"squeezed")
        client.send(h2.frame(h2.HEADERS, 0, 1, block[:5]),
                    h2.frame(h2.CONTINUATION, 0, 1, block[5:9]),
                    h2.frame(h2.CONTINUATION, h2.END_HEADERS, 1, block[9:]),
                    h2.frame(h2.DATA, h2.END_STREAM, 1, struct.pack(">BI", 1, len(packed))
                             + packed))
        await asyncio.sleep(0)
        answer = client.answers()[1]
        assert answer["data"] == struct.pack(">BI", 0, 8) + b"squeezed"
        assert answer["trailers"] == {"grpc-status": "0"}
    run(main())


def test_refusals_are_trailers_only_with_the_code_and_a_percent_encoded_message():
    async def refuse(message: bytes):
        return h2.StatusCode.INVALID_ARGUMENT, "bad: 100% wrong, é", None

    async def main():
        client = Client({ECHO: echo, "/bench.Echo/Refuse": refuse}, limit=1000)
        client.send(*client.call(1, b"x", path="/bench.Echo/Refuse"),
                    *client.call(3, b"x", path="/bench.Echo/Missing"),
                    *client.call(5, b"x", compressed=True, extra=[("grpc-encoding", "snappy")]))
        await asyncio.sleep(0)
        answers = client.answers()
        expected = {1: ("3", "bad: 100%25 wrong, %C3%A9"),
                    3: ("12", "Method not found: /bench.Echo/Missing"),
                    5: ("12", "a compressed message with grpc-encoding snappy (this server "
                              "reads gzip and deflate)")}
        for stream, (code, message) in expected.items():
            answer = answers[stream]
            assert answer["trailers"] == {":status": "200", "content-type": "application/grpc",
                                          "grpc-status": code, "grpc-message": message}
            assert answer["ended"] and answer["data"] == b""
    run(main())


def test_a_message_over_the_limit_is_refused_from_its_prefix_and_its_stream_reset():
    """RESOURCE_EXHAUSTED in gRPC's own words as soon as the 5-byte prefix says the size; the
    client is told to stop sending (RST_STREAM NO_ERROR), its later DATA is dropped, and the
    connection serves the next call."""
    async def main():
        client = Client({ECHO: echo}, limit=1000)
        client.send(client.headers(1), h2.frame(h2.DATA, 0, 1, struct.pack(">BI", 0, 5000)
                                                + b"x" * 100))
        answers = client.answers()
        assert answers[1]["trailers"]["grpc-status"] == "8"
        assert answers[1]["trailers"]["grpc-message"] == ("Received message larger than max "
                                                          "(5000 vs. 1000)")
        assert answers["frames"] == [(h2.RST_STREAM, 0, 1, struct.pack(">I", h2.NO_ERROR))]
        client.send(h2.frame(h2.DATA, h2.END_STREAM, 1, b"x" * 4900), *client.call(3, b"ok"))
        await asyncio.sleep(0)
        answers = client.answers()
        assert 1 not in answers and answers[3]["data"].endswith(b"ok")
    run(main())


def test_a_reset_call_is_cancelled_and_never_answered():
    started, cancelled = asyncio.Event, []

    async def main():
        began = started()

        async def slow(message: bytes):
            began.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(message)
                raise
            return h2.StatusCode.OK, "", message

        client = Client({ECHO: slow})
        client.send(*client.call(1, b"late"))
        await began.wait()
        client.send(h2.frame(h2.RST_STREAM, 0, 1, struct.pack(">I", h2.CANCEL)))
        await asyncio.sleep(0.01)
        assert cancelled == [b"late"] and 1 not in client.answers()
    run(main())


def test_the_drain_answers_calls_in_flight_refuses_new_ones_and_closes():
    async def main():
        release = asyncio.Event()
        client = Client({ECHO: echo_when(release)})
        client.send(*client.call(1, b"in flight"))
        await asyncio.sleep(0)
        stopping = asyncio.ensure_future(client.server.stop(5))
        await asyncio.sleep(0.02)
        assert client.answers()["frames"] == [(h2.GOAWAY, 0, 0, struct.pack(">II", 1,
                                                                           h2.NO_ERROR))]
        client.send(*client.call(3, b"new"))  # after GOAWAY: refused, to be sent elsewhere
        assert client.answers()["frames"] == [(h2.RST_STREAM, 0, 3, struct.pack(
            ">I", h2.REFUSED_STREAM))]
        assert not stopping.done() and not client.transport.closed
        release.set()
        await asyncio.wait_for(stopping, 5)
        answer = client.answers()[1]
        assert answer["data"].endswith(b"in flight") and answer["trailers"]["grpc-status"] == "0"
        assert client.transport.closed
    run(main())


@pytest.mark.parametrize("sent, words", [
    (h2.frame(h2.DATA, 0, 0, b"x"), "DATA on stream 0"),
    (h2.frame(h2.PING, 0, 0, b"short"), "PING of other than 8 bytes"),
    (b"\x00\x40\x01" + bytes(6), "a frame of 16385 bytes"),
    (h2.frame(h2.HEADERS, 0, 1, bytes(16_384))
     + h2.frame(h2.CONTINUATION, 0, 1, bytes(16_384)) * 4, "a header block over 65536 bytes"),
    (h2.frame(h2.WINDOW_UPDATE, 0, 0, bytes(4)), "WINDOW_UPDATE of 0 on the connection"),
    (h2.frame(h2.DATA, 0, 7, b"x"), "DATA on stream 7, never opened"),
    (h2.frame(h2.RST_STREAM, 0, 9, bytes(4)), "RST_STREAM on stream 9, never opened"),
])
def test_a_protocol_error_ends_the_connection_with_goaway_and_one_line(sent, words, caplog):
    async def main():
        client = Client({ECHO: echo})
        with caplog.at_level("INFO", logger=h2.__name__):
            client.send(sent)
        (kind, _, _, payload), = client.answers()["frames"]
        assert kind == h2.GOAWAY and struct.unpack(">I", payload[4:])[0] in (
            h2.PROTOCOL_ERROR, h2.FRAME_SIZE_ERROR, h2.FLOW_CONTROL_ERROR)
        assert client.transport.closed
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and words in lines[0], lines
    run(main())


def test_a_client_that_does_not_speak_http2_is_closed_without_an_answer():
    async def main():
        client = h2.Server(None, {ECHO: echo}, 1000)
        connection = h2._Connection(client)
        transport = Transport()
        connection.connection_made(transport)
        transport.frames()
        connection.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert transport.closed and transport.written == b""
    run(main())


def test_integers_and_literals_are_hpacks():
    """The answers' header encoding read back by hpack, over the 7-bit prefix's limit too."""
    long = "m" * 300
    block = h2.RESPONSE_HEAD + h2.trailers(h2.StatusCode.INTERNAL, long)
    assert hpack.Decoder().decode(block) == [(":status", "200"),
                                             ("content-type", "application/grpc"),
                                             ("grpc-status", "13"), ("grpc-message", long)]


def test_the_connection_window_holds_answers_and_a_larger_initial_window_releases_them():
    """An answer waits for whichever window is shut: the stream's (a client's
    SETTINGS_INITIAL_WINDOW_SIZE of 0, opened later by a larger one) and the connection's
    (65,535 bytes until the client's WINDOW_UPDATE on stream 0)."""
    async def main():
        client = Client({ECHO: echo}, limit=200_000)
        client.send(h2.frame(h2.SETTINGS, 0, 0, struct.pack(">HI", 0x4, 0)))
        client.answers()
        client.send(*client.call(1, b"x" * 100))
        await asyncio.sleep(0)
        answer = client.answers()[1]
        assert answer["data"] == b"" and "trailers" not in answer
        client.send(h2.frame(h2.SETTINGS, 0, 0, struct.pack(">HI", 0x4, 1 << 20)))
        answer = client.answers()[1]
        assert answer["data"] == struct.pack(">BI", 0, 100) + b"x" * 100
        assert answer["trailers"] == {"grpc-status": "0"}
        left = 65_535 - 105  # of the connection's window
        big = b"y" * 100_000
        client.send(*client.call(3, big))
        await asyncio.sleep(0)
        answer = client.answers()[3]
        assert len(answer["data"]) == left and "trailers" not in answer
        client.send(*client.call(5, b"small"))  # the connection's window is spent: it waits too
        await asyncio.sleep(0)
        waiting = client.answers()[5]
        assert waiting["data"] == b"" and "trailers" not in waiting  # its HEADERS only
        client.send(h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(">I", 40_000)))
        answers = client.answers()
        assert len(answers[3]["data"]) == 100_005 - left
        assert answers[3]["trailers"] == {"grpc-status": "0"}
        assert answers[5]["data"] == struct.pack(">BI", 0, 5) + b"small"
        assert answers[5]["trailers"] == {"grpc-status": "0"}
    run(main())


def test_the_clients_unfinished_bodies_hold_the_connections_window_until_read_whole():
    """Each stream's window is given back as its data arrives, the connection's only once a
    request is read whole (or dropped): a client cannot make the server hold more than that
    window of unfinished requests, however many streams it opens."""
    async def main():
        client = Client({ECHO: echo}, limit=4 << 20)  # a window of max(16 MiB, 2 x 4 MiB)
        chunk = b"z" * 16_384
        for stream in (1, 3, 5, 7, 9):
            client.send(client.headers(stream), h2.frame(h2.DATA, 0, stream, struct.pack(
                ">BI", 0, 2 << 20) + chunk[5:]), *[h2.frame(h2.DATA, 0, stream, chunk)] * 63)
        updates = [(stream, struct.unpack(">I", payload)[0]) for kind, _, stream, payload
                   in client.answers()["frames"] if kind == h2.WINDOW_UPDATE]
        assert updates and all(stream != 0 for stream, _ in updates)  # 5 MiB held: none yet
        assert {stream for stream, _ in updates} == {1, 3, 5, 7, 9}
        client.send(*[h2.frame(h2.DATA, h2.END_STREAM, stream, b"")  # each ends at 1 MiB of its
                      for stream in (1, 3, 5, 7, 9)])                   # 2: refused, let go
        answers = client.answers()
        assert all(answers[s]["trailers"]["grpc-status"] == "3" for s in (1, 3, 5, 7, 9))
        given_back = [struct.unpack(">I", payload)[0] for kind, _, stream, payload
                      in answers["frames"] if kind == h2.WINDOW_UPDATE and stream == 0]
        assert given_back == [5 * 64 * 16_384] and client.connection.streams == {}
    run(main())


def test_a_body_longer_than_its_message_is_refused_at_once():
    async def main():
        client = Client({ECHO: echo}, limit=1000)
        client.send(client.headers(1), h2.frame(h2.DATA, 0, 1, struct.pack(">BI", 0, 10)
                                                + b"0123456789" + b"more" * 25))
        answers = client.answers()
        assert answers[1]["trailers"]["grpc-status"] == "3"
        assert answers[1]["trailers"]["grpc-message"] == ("a unary call takes exactly one "
                                                          "message (110 bytes came for a "
                                                          "message of 10)")
        assert answers["frames"] == [(h2.RST_STREAM, 0, 1, struct.pack(">I", h2.NO_ERROR))]
        assert client.connection.streams == {}
    run(main())


def test_a_gzip_bomb_is_inflated_only_to_the_limit():
    async def main():
        client = Client({ECHO: echo}, limit=10_000)
        bomb = gzip.compress(bytes(8_000_000))  # 8 MB of zeros in under 10 KB
        assert len(bomb) < 10_000
        assert len(h2.decompressed(bomb, b"gzip", 10_000)) == 10_001  # never more is inflated
        client.send(*client.call(1, bomb, compressed=True, extra=[("grpc-encoding", "gzip")]))
        trailers = client.answers()[1]["trailers"]
        assert trailers["grpc-status"] == "8"
        assert trailers["grpc-message"] == ("Received message larger than max (more than 10000 "
                                            "bytes, inflated)")
    run(main())


def test_headers_again_on_a_call_being_answered_resets_that_call_only():
    async def main():
        release = asyncio.Event()
        client = Client({ECHO: echo_when(release)})
        client.send(*client.call(1, b"first"))
        await asyncio.sleep(0)
        client.send(client.headers(1, flags=h2.END_HEADERS | h2.END_STREAM),
                    h2.frame(h2.PING, 0, 0, b"12345678"))
        assert client.answers()["frames"] == [
            (h2.RST_STREAM, 0, 1, struct.pack(">I", h2.STREAM_CLOSED)),
            (h2.PING, h2.ACK, 0, b"12345678")]
        assert not client.transport.closed
        release.set()
        client.send(*client.call(3, b"next"))
        await asyncio.sleep(0.01)
        answers = client.answers()
        assert 1 not in answers and answers[3]["data"].endswith(b"next")
    run(main())


def test_long_details_are_cut_to_fit_one_frame():
    async def refuse(message: bytes):
        return h2.StatusCode.INTERNAL, "é" * 4000, None

    async def main():
        client = Client({ECHO: refuse})
        client.send(*client.call(1, b"x"))
        await asyncio.sleep(0)
        (kind, _, _, payload), = [f for f in client.transport.frames() if f[0] == h2.HEADERS]
        assert len(payload) <= 16_384
        message = dict(hpack.Decoder().decode(payload))["grpc-message"]
        assert message == "%C3%A9" * 997 + "..."
    run(main())


def test_a_method_that_raises_is_answered_internal_and_forgotten(caplog):
    async def broken(message: bytes):
        raise RuntimeError("boom")

    async def main():
        client = Client({ECHO: broken})
        with caplog.at_level("ERROR", logger=h2.__name__):
            client.send(*client.call(1, b"x"))
            await asyncio.sleep(0.01)
        trailers = client.answers()[1]["trailers"]
        assert (trailers["grpc-status"], trailers["grpc-message"]) == ("13", "RuntimeError : boom")
        assert client.connection.streams == {}
        assert [r.levelname for r in caplog.records] == ["ERROR"]
    run(main())


def test_a_client_that_reads_nothing_is_not_read_from_and_many_resets_end_it():
    async def main():
        client = Client({ECHO: echo_when(asyncio.Event())})  # never released
        client.connection.pause_writing()  # its socket's buffer is full
        assert client.transport.paused
        client.connection.resume_writing()
        assert not client.transport.paused
        for stream in range(1, 2 * (h2.RESETS_ALLOWED + 1) + 1, 2):  # open, then reset
            client.send(*client.call(stream, b"x"),
                        h2.frame(h2.RST_STREAM, 0, stream, struct.pack(">I", h2.CANCEL)))
        (kind, _, _, payload), = client.answers()["frames"]
        assert kind == h2.GOAWAY and struct.unpack(">I", payload[4:])[0] == h2.ENHANCE_YOUR_CALM
        assert client.transport.closed and client.connection.opened == h2.RESETS_ALLOWED + 1
    run(main())


def test_padding_and_priority_are_stripped_and_a_long_body_refills_its_window():
    async def main():
        client = Client({ECHO: echo}, limit=1 << 20)
        block = client.encoder.encode([(":method", "POST"), (":scheme", "http"),
                                       (":path", ECHO), (":authority", "h"),
                                       ("content-type", "application/grpc")])
        client.send(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.PADDED | h2.PRIORITY_FLAG, 1,
                             b"\x03" + bytes(5) + block + b"pad"),
                    h2.frame(h2.DATA, h2.END_STREAM | h2.PADDED, 1,
                             b"\x02" + struct.pack(">BI", 0, 3) + b"abc" + b"pp"))
        await asyncio.sleep(0)
        assert client.answers()[1]["data"] == struct.pack(">BI", 0, 3) + b"abc"
        message = b"w" * 600_000
        frames = client.call(3, message)
        client.send(*frames[:-1])  # all but the last DATA: over half the stream's window read
        updates = [(stream, struct.unpack(">I", payload)[0]) for kind, _, stream, payload
                   in client.answers()["frames"] if kind == h2.WINDOW_UPDATE]
        assert updates and updates[0][0] == 3 and sum(n for _, n in updates) >= 1 << 19
        client.send(frames[-1], h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 20)),
                    h2.frame(h2.WINDOW_UPDATE, 0, 3, struct.pack(">I", 1 << 20)))
        await asyncio.sleep(0)
        client.send(h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 20)),
                    h2.frame(h2.WINDOW_UPDATE, 0, 3, struct.pack(">I", 1 << 20)))
        answer = client.answers()[3]
        assert len(answer["data"]) == 600_005 and answer["trailers"] == {"grpc-status": "0"}
    run(main())


def test_data_beyond_the_connections_window_is_a_flow_control_error():
    """The connection's window (16 MiB here) is not given back while bodies are unfinished: a
    client that sends past it anyway loses the connection."""
    async def main():
        client = Client({ECHO: echo}, limit=4 << 20)
        chunk = bytes(16_384)
        for stream in (1, 3, 5, 7, 9):  # 5 x 3.5 MiB, each message declared 4 MiB
            frames = [client.headers(stream), h2.frame(h2.DATA, 0, stream, struct.pack(
                ">BI", 0, 4 << 20) + chunk[5:])] + [h2.frame(h2.DATA, 0, stream, chunk)] * 223
            client.send(*frames)
            if client.transport.closed:
                break
        assert stream == 9 and client.transport.closed
        (goaway,) = [f for f in client.answers()["frames"] if f[0] == h2.GOAWAY]
        assert struct.unpack(">I", goaway[3][4:])[0] == h2.FLOW_CONTROL_ERROR
    run(main())


def test_a_client_keeping_to_its_windows_may_send_far_more_than_one_window():
    """The connection's window given back as requests are read whole is the client's to use
    again: 20 requests of 1 MiB, one after the other, on a window of 16 MiB."""
    async def small(message: bytes):
        return h2.StatusCode.OK, "", str(len(message)).encode()

    async def main():
        client = Client({ECHO: small}, limit=2 << 20)
        given = 0
        for i in range(20):
            client.send(*client.call(1 + 2 * i, bytes(1 << 20)))
            await asyncio.sleep(0)
            answers = client.answers()
            assert answers[1 + 2 * i]["data"].endswith(b"1048576"), i
            given += sum(struct.unpack(">I", payload)[0] for kind, _, stream, payload
                         in answers["frames"] if kind == h2.WINDOW_UPDATE and stream == 0)
        assert not client.transport.closed and given >= 16 << 20
    run(main())
