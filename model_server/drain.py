"""The drain: what the server does from SIGTERM to its exit, so that no request is lost.

Kubernetes sends SIGTERM at every rollout while load balancers may still send requests for a few
seconds, and a connection the kernel has accepted into the listen backlog is reset when the
listening socket closes: its client cannot tell whether its request ran. So on SIGTERM (or Ctrl-C):
1. readiness turns 503 at once (liveness stays 200), and every answer from then on carries
   `Connection: close`, so keep-alive clients move to new connections;
2. for `--drain_grace_s` the server goes on accepting and answering, so the load balancer has time
   to stop sending;
3. it then stops the kernel from completing new handshakes on its port (a socket filter that
   drops arriving SYNs, `close_door`), accepts what is already in the listen backlog until it is
   empty, and answers it with results;
4. and only then closes the listening socket, finishes what is in flight and exits 0, within
   `--drain_seconds` of the end of the grace. A client whose SYN was dropped retries it a second
   later and is refused at connect: it knows its request did not run, and can send it elsewhere.
A second SIGTERM or Ctrl-C cuts the grace short (steps 3 and 4 still run); a third Ctrl-C stops
at once.
"""
from __future__ import annotations

import ctypes
import logging
import signal
import socket
import struct
import threading
import time

logger = logging.getLogger(__name__)

SETTLE_S = 0.02  # for handshakes under way when the door closed to reach the backlog
POLL_S = 0.005
BACKLOG_WAIT_S = 5.0  # at most this long for the backlog to empty
SO_ATTACH_FILTER = 26  # Linux's socket option


def _instruction(code: int, jump_true: int, jump_false: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jump_true, jump_false, k)


# A classic BPF program for a TCP listening socket (its offsets start at the TCP header): drop a
# segment whose flags are SYN without ACK (a new connection), keep everything else (the ACK that
# completes a handshake under way).
_DROP_SYN = b"".join([
    _instruction(0x30, 0, 0, 13),  # ldb [13]: the flags
    _instruction(0x54, 0, 0, 0x12),  # and #SYN|ACK
    _instruction(0x15, 0, 1, 0x02),  # jeq #SYN: drop, else keep
    _instruction(0x06, 0, 0, 0),  # ret #0: drop
    _instruction(0x06, 0, 0, 0xFFFFFFFF),  # ret #-1: keep the whole segment
])


def close_door(sock: socket.socket) -> bool:
    """New connections to `sock` no longer complete (their SYNs are dropped), while those in its
    backlog stay to be accepted; whether the system let it be done (Linux does)."""
    program = ctypes.create_string_buffer(_DROP_SYN)
    fprog = struct.pack("HL", len(_DROP_SYN) // 8, ctypes.addressof(program))
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)  # the kernel copies it
    except OSError as e:
        logger.warning("cannot stop new connections before closing the port (%s): one that "
                       "arrives as it closes may be reset", e)
        return False
    return True


def backlog(sock: socket.socket) -> int | None:
    """Connections waiting in `sock`'s accept queue (Linux's TCP_INFO of a listening socket
    gives its length as `tcpi_unacked`); None where the system does not say."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        return struct.unpack_from("I", info, 24)[0]
    except (AttributeError, OSError, struct.error):
        return None


class Drain:
    """Started by the first signal; tells uvicorn's server to stop (`should_exit`) once nothing
    more can be lost. `requests()`: how many requests the server has received so far."""

    def __init__(self, server, sock: socket.socket, model, grace_s: float, requests):
        self.server, self.sock, self.model = server, sock, model
        self.grace_s, self.requests = grace_s, requests
        self.signals = 0
        self.cut = threading.Event()
        self.thread = None

    def on_signal(self, sig, frame) -> None:
        self.signals += 1
        name = signal.Signals(sig).name
        if self.signals == 1:
            logger.info("%s: draining (readiness 503; answering for %.1f s more, then until "
                        "nothing more comes; second signal: skip the wait)", name, self.grace_s)
            self.model.draining = True
            self.thread = threading.Thread(target=self.run, name="drain", daemon=True)
            self.thread.start()
        elif self.signals == 2:
            logger.info("%s: the grace is cut short; answering what the kernel accepted", name)
            self.cut.set()
        elif sig == signal.SIGINT:
            logger.info("%s: stopping now", name)
            self.server.force_exit = True
            self.server.should_exit = True

    def run(self) -> None:
        self.cut.wait(self.grace_s)
        close_door(self.sock)
        time.sleep(SETTLE_S)
        deadline = time.monotonic() + BACKLOG_WAIT_S
        while backlog(self.sock) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        logger.info("closing the listening socket after %d requests: its backlog is empty",
                    self.requests())
        self.server.should_exit = True
