"""How `make demo`'s scripts run a step: print the exact command first, so that a reader can copy
it, then run it as its own process and say how long it took."""
import os
import shlex
import subprocess
import sys
import time


def shown(path) -> str:
    """A path as a reader would type it: relative to here when it lies below, else absolute
    (`.venv/bin/python` from the repository, not `/home/.../.venv/bin/python`)."""
    relative = os.path.relpath(path)
    return os.path.abspath(path) if relative.startswith("..") else relative


def run(step: str, *command: str, quiet_stderr: bool = False) -> float:
    """Run `python COMMAND...`; returns the seconds it took. With `quiet_stderr`, the process's
    stderr (TensorFlow's start-up chatter) is shown only if it fails."""
    print(f"\n== {step}\n$ {shlex.join([shown(sys.executable), *command])}", flush=True)
    start = time.time()
    result = subprocess.run([sys.executable, *command],
                            stderr=subprocess.PIPE if quiet_stderr else None, text=True)
    if result.returncode:
        if quiet_stderr:
            sys.stderr.write(result.stderr)
        sys.exit(f"step failed (exit status {result.returncode}): {step}")
    seconds = time.time() - start
    print(f"({seconds:.0f}s)", flush=True)
    return seconds
