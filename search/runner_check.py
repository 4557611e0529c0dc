"""Every trial's command line checked by the runner's own flag parser before any trial runs.

A search of 24 trials that fails at the first one's flags, or worse at the thirteenth, wastes the
user's afternoon. So the search loads the runner's flag definitions in a child process (the runner
module defines them when imported; nothing else runs, TensorFlow is not loaded) and parses, with
absl and the runner's range checks, the command line of each configuration to be run (a sampled
dimension's two ends); the first refusal is the search's one-line error.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from process.errors import SettingsError

# The fine-tuning runners a search can run (module names).
RUNNERS = ("run_classifier", "run_squad", "run_ner", "run_multiple_choice")

_PROBE = """
import importlib, json, sys
from absl import flags
importlib.import_module(sys.argv[1])
FLAGS = flags.FLAGS
errors = []
for argv in json.loads(sys.stdin.read()):
    FLAGS.unparse_flags()
    try:
        FLAGS([sys.argv[1]] + argv)
        errors.append(None)
    except flags.Error as e:
        errors.append(str(e))
print(json.dumps({"flags": sorted(FLAGS), "errors": errors}))
"""


def runner_module(name: str) -> str:
    """`run_classifier`, `run_classifier.py` or a path to it, as the module name."""
    module = os.path.basename(name or "")
    module = module[:-3] if module.endswith(".py") else module
    if module not in RUNNERS:
        raise SettingsError(f"--runner={name}: a search runs one of {', '.join(RUNNERS)}")
    return module


def check_command_lines(runner: str, command_lines: list[list[str]], describe: list[str]) -> None:
    """Parse each command line (flags only) with `runner`'s flags; a SettingsError naming the
    first one refused (`describe[i]` says where it came from)."""
    probe = subprocess.run([sys.executable, "-c", _PROBE, runner], input=json.dumps(command_lines),
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise SettingsError(f"--runner={runner}: its flags could not be loaded: "
                            f"{(probe.stderr.strip().splitlines() or ['?'])[-1]}")
    errors = json.loads(probe.stdout.strip().splitlines()[-1])["errors"]
    for where, error in zip(describe, errors):
        if error:
            raise SettingsError(f"{where}: {runner} refuses it: {error}")
