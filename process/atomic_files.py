"""Write files so that readers never see a partial one: write a temporary name, rename at the end.

The one atomic-write helper of the project (configs, checkpoints, results, records, statistics).
A file is written as `.NAME.tmp<pid>` beside `NAME` (hidden, so that a glob such as
`records-*.tfrecord` never picks up a partial shard) and renamed when complete; a failed write
leaves the previous file (or nothing) under the final name, and the temporary file is removed when
the failure is a Python exception. Paths with a scheme (`gs://...`) go through `tf.io.gfile`,
imported only then. Directories (the best checkpoint, a SavedModel) are staged beside their final
name (`staged_directory`) and swapped in with two renames; an exception or Ctrl-C removes the
staged copy, and a kill between the two renames leaves the previous copy under `NAME.old<pid>`,
which `recover_directory` puts back.
"""
import contextlib
import glob
import logging
import os
import re
import shutil

from bert_tf2.process import fault_points

logger = logging.getLogger(__name__)


def is_remote(path) -> bool:
    """Whether `path` names a file system other than the local one (`gs://`, `hdfs://`, ...)."""
    return "://" in os.fspath(path)


def temporary_name(path, suffix: str = "") -> str:
    """The hidden name beside `path` that its content is written under before the rename.

    `suffix` keeps a file-type ending that a writer insists on (Keras wants `.keras`).
    """
    directory, name = os.path.split(os.fspath(path))
    return os.path.join(directory, f".{name}.tmp{os.getpid()}{suffix}")


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


@contextlib.contextmanager
def atomic_path(path, suffix: str = ""):
    """Yield a temporary path beside `path`; it becomes `path` only if the block completes."""
    path = os.fspath(path)
    tmp = temporary_name(path, suffix)
    remote = is_remote(path)
    try:
        yield tmp
        if remote:
            _gfile().rename(tmp, path, overwrite=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        if remote:
            if _gfile().exists(tmp):
                _gfile().remove(tmp)
        elif os.path.exists(tmp):
            os.remove(tmp)
        raise


_TEMPORARY = re.compile(r"^\..+\.tmp(\d+)(\.[A-Za-z0-9]+)?$")


def remove_temporary_files(directory, names=None) -> list:
    """Delete the hidden temporary files (`.NAME.tmp<pid>`) that writes killed before their
    rename left in `directory` (only those of `names`, when given); call only while holding the
    outputs (`process.output_lock`), so that no live writer owns them. Returns what was removed."""
    removed = []
    directory = os.fspath(directory)
    if is_remote(directory) or not os.path.isdir(directory):
        return removed
    for name in sorted(os.listdir(directory)):
        match = _TEMPORARY.match(name)
        path = os.path.join(directory, name)
        if (match and int(match.group(1)) != os.getpid() and os.path.isfile(path)
                and (names is None or match.group(1) and name[1:name.rindex(".tmp")] in names)):
            os.remove(path)
            removed.append(path)
    return removed


def remove_partial_files(path) -> list:
    """The hidden temporary files of `path` (`.NAME.tmp<pid>`) that killed writes left beside
    it; call while holding `path` (`process.output_lock`). Returns what was removed."""
    if is_remote(path):
        return []
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    return remove_temporary_files(folder, [name])


def write_text(path, text: str) -> None:
    """`text` (UTF-8) as the whole content of `path`, local or remote, atomically."""
    with atomic_path(path) as tmp:
        if is_remote(tmp):
            with _gfile().GFile(tmp, "w") as f:
                f.write(text)
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)


def staging_directory(directory) -> str:
    """An empty directory name beside `directory` to write its next version into."""
    staging = f"{os.fspath(directory)}.tmp{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    return staging


@contextlib.contextmanager
def staged_directory(directory, fault_point: str | None = None):
    """Yield an empty directory name beside `directory` to write its next version into. When the
    block completes, the copy is swapped in (`replace_directory`); when it fails or is
    interrupted (Ctrl-C), the partial copy is removed and `directory` stays as it was."""
    staging = staging_directory(directory)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    replace_directory(staging, directory, fault_point)


def replace_directory(staging, directory, fault_point: str | None = None) -> None:
    """Swap the complete `staging` in for `directory` (which may not exist yet); `fault_point`
    names this swap for the kill tests (`process.fault_points`), reached between the renames.
    An exception between the renames (Ctrl-C) puts the previous copy back; a kill there leaves
    it as `directory.old<pid>`, which `recover_directory` puts back."""
    directory = os.fspath(directory)
    old = f"{directory}.old{os.getpid()}"
    if os.path.isdir(directory):
        os.replace(directory, old)
    try:
        if fault_point:
            fault_points.reached(fault_point)
        os.replace(staging, directory)
    except BaseException:
        if os.path.isdir(old) and not os.path.isdir(directory):
            os.replace(old, directory)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def recover_directory(directory) -> None:
    """Tidy what a killed `replace_directory` left beside `directory`.

    With `directory` missing, the newest `directory.old<pid>` (the previous complete copy) is
    renamed back. Other `.old<pid>` copies are removed, as are `.tmp<pid>` staging directories,
    which may be partial. Only one process (the chief) may write `directory`.
    """
    directory = os.fspath(directory)
    olds = sorted(glob.glob(glob.escape(directory) + ".old[0-9]*"), key=os.path.getmtime)
    if olds and not os.path.isdir(directory):
        logger.warning("%s was missing: restored the previous copy from %s (a run was stopped "
                       "while replacing it)", directory, olds[-1])
        os.replace(olds.pop(), directory)
    for leftover in olds + glob.glob(glob.escape(directory) + ".tmp[0-9]*"):
        logger.info("removed %s, left by an interrupted run", leftover)
        shutil.rmtree(leftover, ignore_errors=True)
