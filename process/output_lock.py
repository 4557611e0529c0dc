"""One process per output: an exclusive OS lock on each output folder or file before anything is written.

Two runs writing one `--output_dir` (or one `--output_file`) mix their files without a word: the
second overwrites the first's checkpoints, best weights and results. So every program takes
`hold(path)` on each of its outputs first. The lock is `flock` on a hidden file beside the output,
`PARENT/.NAME.lock`, so the output itself is not touched and an output that does not exist yet is
not created by locking it (missing parent folders are, and removed again on refusal). The holder writes its pid and program into the lock file; a second
process gets an `OutputInUseError` naming the output and the holder (one line, exit status 1), and
writes nothing. The operating system releases the lock when the holder dies, however it dies, so a
killed run never blocks the next one; the holder removes the lock file when it exits normally, and
a stale one (left by a kill) is simply locked again. Where the parent folder is read-only the
output folder itself is locked (`flock` on the directory; no pid to show). Remote outputs
(`gs://...`) are not locked: no OS lock reaches them.

Programs hold their outputs for a block (`holding`). Until the run calls `setup_done`, a user
error in the block rolls each output back (`roll_back`): a refused run leaves each output as it
found it, whatever it had begun to write (features, run_config.json).
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import sys
import time

from bert_tf2.process import errors
from bert_tf2.process.errors import UserError


class OutputInUseError(UserError):
    """Another live process holds the output."""


_held: dict = {}  # absolute output path -> (lock file path or None, descriptor)
# Outputs still being set up -> (their entries when locked, None if absent; parents made by
# `hold`): what `roll_back` removes when the run is refused before it starts its real work.
_setups: dict = {}


def lock_path(output) -> str:
    """The lock file of `output`: `.NAME.lock` beside it."""
    output = os.path.abspath(os.fspath(output))
    parent, name = os.path.split(output.rstrip(os.sep) or os.sep)
    return os.path.join(parent, f".{name}.lock")


def check_file_output(path, flag: str) -> None:
    """An output file's path must not name a folder (refused before anything is written)."""
    from bert_tf2.process.errors import SettingsError

    if path and "://" not in os.fspath(path) and os.path.isdir(path):
        raise SettingsError(f"{flag} {path}: is a folder; name the file to write")


def is_held(output) -> bool:
    return os.path.abspath(os.fspath(output)) in _held


def hold(output, what: str = "output") -> None:
    """Lock `output` (a folder or file, existing or not) for this process until it exits.

    `what` names it in the refusal (`--output_dir`). Holding it twice is a no-op.
    """
    output = os.fspath(output)
    if "://" in output:
        return
    key = os.path.abspath(output)
    if key in _held:
        return
    path = lock_path(key)
    made = _make_parents(os.path.dirname(path), output, what)
    for _ in range(10):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            if error.errno in (errno.EACCES, errno.EROFS, errno.EPERM) and os.path.isdir(key):
                _hold_directory(key, what)
                return
            _remove_made(made)
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _read_holder(fd)
            os.close(fd)
            _remove_made(made)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise OutputInUseError(_refusal(key, what, holder)) from None
            raise
        # The file may have been removed by its previous holder between our open and our lock:
        # then we locked an orphan; try again on the file now at `path`.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {_program()} {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                     .encode())
            _held[key] = (path, fd)
            _setups[key] = (_listing(key), made)
            return
        os.close(fd)
    raise OutputInUseError(f"{key}: its lock file {path} keeps changing; another process is "
                           f"starting on it")


def _hold_directory(directory: str, what: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise OutputInUseError(_refusal(directory, what, None)) from None
    _held[directory] = (None, fd)
    _setups[directory] = (_listing(directory), [])


def _listing(path: str):
    """A folder's entries; None for nothing there; FILE for a file (never rolled back)."""
    if os.path.isdir(path):
        return set(os.listdir(path))
    return FILE if os.path.lexists(path) else None


FILE = "file"


def _make_parents(parent: str, output: str, what: str) -> list:
    """Create `parent` and its missing ancestors; returns those made, deepest first. A file in
    the way is a `SettingsError` naming it."""
    from bert_tf2.process.errors import SettingsError

    made = []
    while not os.path.isdir(parent):
        if os.path.lexists(parent):
            raise SettingsError(f"{what} {output}: {parent} is a file, not a folder; name a path "
                                f"whose folders are folders")
        made.append(parent)
        parent = os.path.dirname(parent)
    for folder in reversed(made):
        os.makedirs(folder, exist_ok=True)
    return made


def _remove_made(made: list) -> None:
    for folder in made:  # deepest first; only while still empty
        try:
            os.rmdir(folder)
        except OSError:
            return


def setup_done(output) -> None:
    """The run has started its real work (training, prediction): from here on, what it wrote is
    kept whatever happens, for the next run to resume from."""
    _setups.pop(os.path.abspath(os.fspath(output)), None)


def roll_back(output) -> list:
    """For a run refused during its set-up: remove what it added to `output` (the folder, if it
    created it; else new files and folders in it; parent folders `hold` made). Entries that were
    there before are never touched, nor a file output that existed. Returns the paths removed."""
    import shutil

    key = os.path.abspath(os.fspath(output))
    removed = []
    if key not in _setups:
        return removed
    entries, made = _setups.pop(key)
    if entries is None:
        if os.path.isdir(key) and not os.path.islink(key):
            shutil.rmtree(key, ignore_errors=True)
            removed.append(key)
        elif os.path.lexists(key):
            os.remove(key)
            removed.append(key)
    elif entries is not FILE and os.path.isdir(key):
        for name in sorted(set(os.listdir(key)) - entries):
            path = os.path.join(key, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
            removed.append(path)
    release(key)
    _remove_made(made)
    return removed


@contextlib.contextmanager
def holding(outputs: dict):
    """Hold each output of `{path: what}` (`what` names it in a refusal, `--output_dir`) for the
    block; on a user error during set-up (before `setup_done`) roll each back, then release."""
    newly = []
    try:
        for path, what in outputs.items():
            if path and not is_held(path):
                hold(path, what)
                newly.append(path)
        yield
    except BaseException as error:
        if errors.user_error_status(error) is not None:
            for path in newly:
                roll_back(path)
        raise
    finally:
        for path in newly:
            release(path)


def release(output) -> None:
    """Remove the lock file and release the lock (at exit; a kill releases the lock too)."""
    key = os.path.abspath(os.fspath(output))
    _setups.pop(key, None)
    path, fd = _held.pop(key, (None, None))
    if fd is None:
        return
    if path is not None:
        try:
            os.remove(path)  # while still locked: a waiting open gets the orphan and retries
        except OSError:
            pass
    os.close(fd)


@atexit.register
def _release_all() -> None:
    for key in list(_held):
        release(key)


def _read_holder(fd: int) -> str | None:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return text or None


def _refusal(output: str, what: str, holder: str | None) -> str:
    if holder:
        pid, _, rest = holder.partition(" ")
        program, _, since = rest.partition(" ")
        who = f"{program or 'another process'} (pid {pid}, since {since or '?'})"
    else:
        who = "another process"
    return (f"{output}: {what} in use by {who}; wait for it to finish, or use another {what}")


def _program() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
