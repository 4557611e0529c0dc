"""Python programs that this one starts (a search's trials, its check of the runner's flags).

Each is `sys.executable ARGS` in a child process. `die_with_parent` asks Linux to send the child
SIGTERM when this process dies, however it dies (the parent-death signal, requested in the child
before it becomes the program, so that the request survives `exec`); a child whose parent is
already gone stops at once.

The tests start these programs their own way: BERT_TEST_PYTHON_LAUNCHER names a Python file whose
`launch(args, die_with_parent=..., **popen_arguments)` returns the process to use, or None to start
it here as usual (tests/warm_python.py forks it from a Python that has imported TensorFlow
already, as it does the programs the tests start themselves).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

LAUNCHER_VARIABLE = "BERT_TEST_PYTHON_LAUNCHER"

# Runs in the child before the program: ask Linux for SIGTERM when the parent dies, then become
# the program (the request survives exec). If the parent is already gone, stop.
_DIE_WITH_PARENT = """
import ctypes, os, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(143)
os.execv(sys.executable, [sys.executable] + sys.argv[2:])
"""

_launchers: dict = {}


def start(args: list, *, die_with_parent: bool = False, **popen_arguments):
    """`python ARGS` started as `subprocess.Popen(..., **popen_arguments)` would; the process."""
    launcher = _launcher()
    if launcher is not None:
        process = launcher.launch([sys.executable, *args], die_with_parent=die_with_parent,
                                  **popen_arguments)
        if process is not None:
            return process
    if die_with_parent:
        args = ["-c", _DIE_WITH_PARENT, str(os.getpid()), *args]
    return subprocess.Popen([sys.executable, *args], **popen_arguments)


def run(args: list, input: str) -> subprocess.CompletedProcess:
    """`python ARGS` given `input` on its standard input, run to its end; its text output."""
    process = start(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True)
    stdout, stderr = process.communicate(input)
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def _launcher():
    path = os.environ.get(LAUNCHER_VARIABLE)
    if not path:
        return None
    if path not in _launchers:
        spec = importlib.util.spec_from_file_location("bert_tf2_test_launcher", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _launchers[path] = module
    return _launchers[path]
