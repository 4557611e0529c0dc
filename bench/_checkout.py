"""This checkout as the `bert_tf2` package, for a bench process in an environment where the
package is not installed (a peer's virtual environment, the GPU machine): a temporary folder
holding a `bert_tf2` link to the checkout goes first on `sys.path`."""
import pathlib
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent


def importable() -> None:
    try:
        import bert_tf2  # noqa: F401
        return
    except ImportError:
        pass
    sys.path.insert(0, path_entry())


def path_entry() -> str:
    """A folder holding a `bert_tf2` link to this checkout, for `sys.path` or a child process's
    PYTHONPATH (a runner started as `python run_pretraining.py` imports `bert_tf2`)."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="bert_tf2_checkout_"))
    (folder / "bert_tf2").symlink_to(REPO, target_is_directory=True)
    return str(folder)
