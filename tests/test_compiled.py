"""Compiled functions where numba can write no cache (`process.compiled`): an install on a
read-only file system with no home made numba refuse every function as it was defined, so
importing the tokenizer, the record reader or crc32c failed."""
import pathlib
import re

import numba
import numpy as np
import pytest
from numba.core import caching

from bert_tf2.process import compiled

PACKAGE = pathlib.Path(compiled.__file__).resolve().parents[1]


@pytest.fixture
def no_cache_locator(monkeypatch):
    """numba as it is where no cache folder can be written: none of its locators applies."""
    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])


def twice_plus_one(x):
    return 2 * x + 1


def test_without_a_cache_folder_a_function_compiles_in_memory(no_cache_locator):
    with pytest.raises(RuntimeError, match="no locator available"):  # numba's own refusal
        numba.njit(cache=True)(twice_plus_one)
    function = compiled.njit(nogil=True)(twice_plus_one)
    assert function(20) == 41
    assert function.signatures  # compiled, not run as Python


def test_with_a_cache_folder_the_cache_is_used(tmp_path, monkeypatch):
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(caching.CacheImpl, "_locator_classes",
                        [caching.UserProvidedCacheLocator])
    assert compiled.njit()(twice_plus_one)(3) == 7
    assert list(tmp_path.rglob("*.nbi"))  # the cache's index, written


def test_every_compiled_function_of_the_package_goes_through_process_compiled():
    direct = [f"{path.relative_to(PACKAGE)}:{number}"
              for path in sorted(PACKAGE.rglob("*.py"))
              if not ({"tests", "bench", "examples", ".venv", "build"} & set(path.relative_to(
                  PACKAGE).parts)) and path.name != "compiled.py"
              for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if re.search(r"\bnumba\.(njit|jit)\b|^\s*from numba import", line)]
    assert not direct, direct
    assert len([path for path in PACKAGE.rglob("*.py") if "tests" not in path.parts
                and ".venv" not in path.parts
                and "compiled.njit(" in path.read_text(encoding="utf-8")]) >= 9


def test_the_tokenizer_and_crc32c_load_and_run_without_a_cache_folder(no_cache_locator):
    """What bert-serve and a JAX run_pretraining import first, defined again as a read-only
    install defines them (they were refused there: the server never got ready, the run ended in
    a traceback)."""
    import importlib

    from bert_tf2.data_gen import compiled_wordpiece
    from bert_tf2.modeling import crc32c

    importlib.reload(crc32c)
    importlib.reload(compiled_wordpiece)
    data = np.frombuffer(b"123456789", np.uint8)
    assert crc32c.crc32c(data, 0, len(data), crc32c.table()) == 0xE3069283  # CRC-32C's check
