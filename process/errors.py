"""User errors, and how every program reports them: one line on stderr, no traceback.

A user error is a mistake the user can fix: bad data, a bad config or checkpoint, a flag that cannot
work, a missing file. Each layer raises its own kind (`ConfigError`, `CheckpointError`,
`data_gen.errors.DataError`, `process.errors.SettingsError`, ...), all `UserError`s whose message
starts with the file (and line) at fault. Every program's front door (the runners, the data tools,
the converter) runs its `main` through `run_main`, which prints such an error as

    PROGRAM: error: FILE[:LINE]: what is wrong and what to do

and exits with status 1 (2 for flag and usage errors, as absl does for bad flags). An `OSError`
naming a file (a path that does not exist) is reported the same way. With the environment
variable `BERT_TRACEBACK=1` the traceback is shown as well. Anything else is a programming error
and keeps its traceback. Ctrl-C and SIGTERM end a run in one line too (`process.interrupts`).

This module sits in the lowest layer so that every layer's errors and every front door can use it.
"""
from __future__ import annotations

import errno
import os
import re
import sys
from typing import Callable

from bert_tf2.process import environment, interrupts

TRACEBACK_VARIABLE = "BERT_TRACEBACK"
USAGE_STATUS = 2


class UserError(ValueError):
    """A mistake the user can fix; the message names the file (and line) or flag at fault."""

    exit_status = 1


class SettingsError(UserError):
    """Settings that cannot work (a flag out of range, a missing file or flag, a setting the model
    or the output folder does not fit): exit status 2, as a bad flag."""

    exit_status = USAGE_STATUS


def as_user_error(error: Exception) -> Exception:
    """For tools whose every ValueError or OSError comes from their input or flags: `error` as a
    `UserError` (kept as it is when it already is one, or an OSError naming its file)."""
    if isinstance(error, UserError) or (isinstance(error, OSError) and error.filename):
        return error
    return UserError(str(error))


def program_name() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "bert"


def one_line(message: str) -> str:
    """A message made one line: its lines joined with '; ' (lists of variables, flag errors)."""
    parts = [part.strip() for part in str(message).strip().splitlines() if part.strip()]
    return "; ".join(parts)


def report(message: str, status: int) -> None:
    """Print `PROGRAM: error: MESSAGE` to stderr and exit with `status`."""
    sys.stderr.write(f"{program_name()}: error: {one_line(message)}\n")
    sys.stderr.flush()
    sys.exit(status)


def user_error_status(error: BaseException) -> int | None:
    """The exit status for `error` if it is a user error, else None."""
    from absl import app

    if isinstance(error, app.UsageError):
        return USAGE_STATUS
    if isinstance(error, UserError):
        return error.exit_status
    if isinstance(error, OSError) and error.filename is not None:
        return 1
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(error, tf.errors.NotFoundError):
        return 1
    if environment_failure(error):
        return 1
    return None


# What the operating system says when a write cannot be done, in TensorFlow's messages too.
_ENVIRONMENT = {"No space left on device": "free some space", "File too large": "free some "
                "space or raise the file size limit", "Disk quota exceeded": "free some space",
                "Read-only file system": "write elsewhere", "Permission denied": "check the "
                "folder's permissions"}
_PATH = re.compile(r"(/[^\s;:'\"]+)")


def environment_failure(error: BaseException) -> str | None:
    """For a write the machine refused (disk full, file size limit, read-only, permission),
    raised as an OSError or by TensorFlow: `PATH: reason; what to do`, else None."""
    if isinstance(error, OSError) and error.errno in _ERRNOS:
        reason = os.strerror(error.errno)
        path = error.filename
    else:
        tf = sys.modules.get("tensorflow")
        if tf is None or not isinstance(error, tf.errors.OpError):
            return None
        text = getattr(error, "message", str(error))
        reason = next((r for r in _ENVIRONMENT if r in text), None)
        if reason is None:
            return None
        path = next((p for p in _PATH.findall(text) if _written_in(p)), None)
    advice = _ENVIRONMENT.get(reason, "free some space")
    where = _outside_temporary(path) if path else None
    return (f"{where or 'an output'}: {reason.lower()} while writing; {advice}, then run the "
            f"same command again (it resumes where it stopped)")


def _outside_temporary(path: str) -> str:
    """A checkpoint or shard is written under a temporary name (removed when the write fails):
    the folder that holds it."""
    parts = path.split(os.sep)
    temporary = [i for i, part in enumerate(parts) if part.endswith("_temp") or ".tmp" in part]
    return os.sep.join(parts[:temporary[0]]) or os.sep if temporary else path


def _written_in(path: str) -> bool:
    """Whether a path in an error message is one this machine writes in (not a source file's)."""
    folder = os.path.dirname(path)
    if _outside_temporary(path) != path:
        folder = _outside_temporary(path)
    return folder != os.sep and os.path.isdir(folder)


_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS}


def message_of(error: BaseException) -> str:
    failure = environment_failure(error)
    if failure:
        return failure
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror or error}"
    if not isinstance(error, UserError) and type(error).__module__.startswith("tensorflow"):
        return getattr(error, "message", str(error))
    return str(error)


def guarded(main: Callable) -> Callable:
    """`main` with user errors reported as one line (see the module docstring)."""

    def run(argv):
        try:
            return main(argv)
        except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM: `interrupts`
            if os.environ.get(TRACEBACK_VARIABLE):
                raise
            interrupts.report(program_name(), interrupt)
        except Exception as error:  # noqa: BLE001 - sorted into user errors and the rest
            status = user_error_status(error)
            if status is None or os.environ.get(TRACEBACK_VARIABLE):
                raise
            report(message_of(error), status)

    return run


def parse_flags_or_exit(parse: Callable | None = None) -> Callable:
    """An absl `flags_parser` whose errors are one line and exit status 2 (absl's own prints
    a multi-line block and exits 1)."""
    from absl import flags

    def parser(argv):
        try:
            return parse(argv) if parse else flags.FLAGS(argv)
        except flags.Error as error:
            report(f"{error} (--helpshort lists the flags)", USAGE_STATUS)

    return parser


def parse_known_flags(argv: list) -> list:
    """An absl `flags_parser` for programs that pass flags on (Beam pipelines): absl takes the
    flags it knows; the rest, and everything after `--`, is returned for `PipelineOptions`."""
    from absl import flags

    if "--" in argv:
        split = argv.index("--")
        ours, others = argv[:split], argv[split + 1:]
    else:
        ours, others = argv, []
    return flags.FLAGS(ours, known_only=True) + others


def configure_process() -> None:
    """`environment.configure()`, a bad `KERAS_BACKEND` reported as one line (exit status 2)."""
    try:
        environment.configure()
    except environment.BackendError as error:
        report(str(error), USAGE_STATUS)


def list_program_flags(flag_values, program: str, main_module) -> None:
    """File the program's flags under `program` (`sys.argv[0]`), where absl's `--helpshort`
    looks for them: absl files a flag under the module that defined it, and under the script's
    path only when that module is `__main__`. An installed console script (`bin/run_classifier`)
    is neither `bert_tf2.run_classifier` nor `bert_tf2.runner_flags`, so its `--helpshort`
    would list no flag. The program's flags are those of this package's modules and the
    script's own. A console script's usage text is then the runner module's docstring."""
    for module, defined in flag_values.flags_by_module_dict().items():
        if module == program or module.split(".")[0] == __name__.split(".")[0]:
            for flag in defined:
                flag_values.register_key_flag_for_module(program, flag)
    script = sys.modules.get("__main__")
    if script is not None and not script.__doc__ and main_module is not None:
        script.__doc__ = main_module.__doc__


def run_main(main: Callable, flags_parser: Callable | None = None) -> None:
    """absl's `app.run(main)` with one-line user errors and flag errors, and Ctrl-C and SIGTERM
    reported in one line (`interrupts`); the process's settings (`environment.configure`) are
    made here, the one place every program starts through."""
    from absl import app, flags

    configure_process()
    interrupts.install()
    list_program_flags(flags.FLAGS, sys.argv[0], sys.modules.get(main.__module__))
    app.run(guarded(main), flags_parser=parse_flags_or_exit(flags_parser))
