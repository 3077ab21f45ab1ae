"""The validated database's cache between processes (issue 55): keyed by the data files' contents, so it is never
stale, and a cache that cannot be read is rebuilt from the data files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from provision.compat import load_db
from provision.resources import data_dir

KEPLER = '{name: "Kepler", cc: ["3.0", "3.2", "3.5", "3.7"]'


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "data"
    shutil.copytree(data_dir(), root)
    return root


def _load(root: Path):  # the disk cache, without the in-process one
    return load_db.__wrapped__(root)


def _caches(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "compat").glob("db-*.pickle"))


def test_an_edit_that_keeps_size_and_mtime_is_read_again(data: Path, tmp_path: Path) -> None:
    gpus = data / "gpus.yaml"
    assert _load(data).architectures[0].cc == ("3.0", "3.2", "3.5", "3.7")
    assert len(_caches(tmp_path)) == 1
    assert _load(data).architectures[0].cc == ("3.0", "3.2", "3.5", "3.7")  # from the cache
    st = gpus.stat()
    text = gpus.read_text()
    assert KEPLER in text
    gpus.write_text(text.replace(KEPLER, KEPLER.replace('"3.0"', '"3.1"')))
    os.utime(gpus, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime: only the content differs
    assert gpus.stat().st_size == st.st_size and gpus.stat().st_mtime_ns == st.st_mtime_ns
    assert _load(data).architectures[0].cc == ("3.1", "3.2", "3.5", "3.7")
    assert len(_caches(tmp_path)) == 2


def test_a_broken_cache_is_rebuilt_from_the_data_files(data: Path, tmp_path: Path) -> None:
    first = _load(data)
    (cache,) = _caches(tmp_path)
    cache.write_bytes(b"not a pickle")
    assert _load(data) == first
    assert cache.read_bytes() != b"not a pickle"


def test_the_cached_database_equals_the_one_read_from_the_files(data: Path) -> None:
    built = _load(data)  # no cache yet: read and validated from the YAML
    assert _load(data) == built  # unpickled, with the rows' schemas deferred
