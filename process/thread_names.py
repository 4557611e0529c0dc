"""Python's thread names given to the operating system, so that `top -H`, `ps -L`, py-spy and
`/proc/PID/task/*/comm` tell a server's threads apart (the model's batch thread, the event loop,
gRPC's poller) instead of showing the program's name on every one. Python names its threads for
itself only; Linux takes a name of up to 15 bytes per thread (elsewhere this does nothing)."""
from __future__ import annotations

import re
import threading

_GENERATED = re.compile(r"Thread-\d+ \((.+)\)")  # Python's name for an unnamed thread


def os_name(thread: threading.Thread) -> str:
    """The name the OS is given: the thread's own, or its target's where Python made one up."""
    made_up = _GENERATED.fullmatch(thread.name)
    return (made_up.group(1) if made_up else thread.name).encode()[:15].decode(errors="ignore")


def name_os_threads(but: tuple = ()) -> dict:
    """Give every live Python thread its name in the OS, but the main thread (its name is the
    process's, which `ps`, `top` and `pkill` show) and those named in `but`; `{native id: name}`
    of those named. A thread started later by a named one (a runtime's worker pool) takes its
    name: leave out a thread that will start others which are not its own work."""
    named = {}
    for thread in threading.enumerate():
        if thread.native_id is None or thread.name in but or thread is threading.main_thread():
            continue
        name = os_name(thread)
        try:
            with open(f"/proc/self/task/{thread.native_id}/comm", "w") as comm:
                comm.write(name)
        except OSError:  # not Linux, or the thread has just ended
            continue
        named[thread.native_id] = name
    return named
