"""Write files so that readers never see a partial one: write a temporary name, rename at the end.

A failed or killed write leaves the previous file (or nothing) under the final name, and the
temporary file is removed when the failure is a Python exception.
"""
import contextlib
import os


@contextlib.contextmanager
def atomic_path(path, suffix: str = ""):
    """Yield a temporary path beside `path`; it becomes `path` only if the block completes.

    `suffix` keeps a file-type ending that a writer insists on (Keras wants `.keras`).
    """
    path = os.fspath(path)
    stem = path[:-len(suffix)] if suffix and path.endswith(suffix) else path
    tmp = f"{stem}.tmp{os.getpid()}{suffix}"
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_text(path, text: str) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
