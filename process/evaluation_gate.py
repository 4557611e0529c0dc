"""A run watched by a search waits after each evaluation until the search has read it.

A search learns of a trial's evaluations by watching its `eval_results.txt`, and prunes a trial by
stopping it (SIGTERM) right after an epoch's evaluation. Watching alone is a race: a short epoch
can overwrite one evaluation with the next before the search reads it (the median then lacks that
epoch), or end the run before the search could stop it. So the search names a file in
`BERT_EVALUATION_GATE`; after writing an evaluation the run waits until that file holds a step at
least the evaluation's (`open_to`). The search writes it once it has decided not to prune; when it
prunes, its SIGTERM ends the wait as it ends any other part of a run. Without the variable (every
run a user starts) `wait` returns at once.
"""
from __future__ import annotations

import logging
import os
import time

from bert_tf2.process.atomic_files import write_text

VARIABLE = "BERT_EVALUATION_GATE"
POLL_S = 0.02
# A search that stops answering is gone (its trial gets SIGTERM when it dies), so this bound is
# only for a file named by hand: the run then goes on, saying so.
TIMEOUT_S = 600.0

logger = logging.getLogger(__name__)


def wait(step: int, timeout_s: float = TIMEOUT_S) -> None:
    """Return once the gate named in the environment is open to `step` (at once without one)."""
    path = os.environ.get(VARIABLE)
    if not path:
        return
    deadline = time.monotonic() + timeout_s
    while opened_to(path) < step:
        if time.monotonic() > deadline:
            logger.warning("%s=%s: nothing opened it to step %d in %.0f s; going on", VARIABLE,
                           path, step, timeout_s)
            return
        time.sleep(POLL_S)


def open_to(path: str, step: int) -> None:
    """Let the run go on past its evaluation at `step` (and every earlier one)."""
    write_text(path, f"{int(step)}\n")


def opened_to(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as f:
            return int(f.read().strip() or -1)
    except (FileNotFoundError, ValueError):
        return -1
