"""The parsed-catalog cache (planner/catalog_cache.py): a hit gives the same catalog, an edited
catalog file or a corrupt, foreign or unwritable cache never gives a stale or failed load."""

import os
import shutil
from pathlib import Path

import pytest

from planner import catalog as catalog_module
from planner import catalog_cache
from planner.catalog import DEFAULT_CATALOG_DIR
from planner.schema import PlanningInputError


def _load(directory):
    """A load of ``directory`` that bypasses the in-process memo (the disk cache only)."""
    return catalog_module._load_cached.__wrapped__(Path(directory).resolve())


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def catalogs(tmp_path):
    folder = tmp_path / "catalogs"
    shutil.copytree(DEFAULT_CATALOG_DIR, folder)
    return folder


def _refuse_parsing(monkeypatch):
    def parse(directory):
        raise AssertionError(f"parsed {directory} despite a valid cache file")
    monkeypatch.setattr(catalog_module, "_parse", parse)


def test_a_hit_gives_an_equal_catalog_without_parsing(cache, catalogs, monkeypatch):
    built = _load(catalogs)
    files = list(cache.iterdir())
    assert len(files) == 1 and files[0].name.startswith("catalog-") and files[0].suffix == ".pickle"
    _refuse_parsing(monkeypatch)
    hit = _load(catalogs)
    assert hit == built and hit is not built
    assert hit.gpu("h100") == built.gpu("h100-sxm")            # aliases and lookups work on a hit
    assert hit.versions == built.versions and hit.directory == catalogs.resolve()
    monkeypatch.undo()                                          # the real parser again, no cache
    monkeypatch.setenv("PLANNER_CACHE_DIR", "off")
    assert _load(catalogs) == hit


def test_editing_a_catalog_file_invalidates_the_cache(cache, catalogs):
    before = _load(catalogs)
    path = catalogs / "gpus.yaml"
    text = path.read_text()
    old = "name: NVIDIA H100 SXM5 80GB\n"
    assert text.count(old) == 1
    path.write_text(text.replace(old, "name: NVIDIA H100 SXM5 80GB (edited)\n"))
    after = _load(catalogs)
    assert after.gpu("h100-sxm").name == "NVIDIA H100 SXM5 80GB (edited)"
    assert [g for g in after.gpus.entries if after.gpu(g) != before.gpu(g)] == ["h100-sxm"]
    path.write_text(text)                                       # back: the original again
    assert _load(catalogs) == before
    assert len(list(cache.iterdir())) == 1                      # one file per catalog directory


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "other key"])
def test_a_corrupt_or_foreign_cache_file_is_ignored_and_rebuilt(cache, catalogs, damage):
    built = _load(catalogs)
    (path,) = cache.iterdir()
    data = path.read_bytes()
    key, _, body = data.partition(b"\n")
    path.write_bytes({"garbage": key + b"\n" + b"\x80\x05not a pickle",
                      "truncated": key + b"\n" + body[:len(body) // 2],
                      "empty": b"",
                      "other key": b"0" * len(key) + b"\n" + body}[damage])
    assert _load(catalogs) == built
    assert path.read_bytes() == data                            # rewritten whole


def test_a_broken_catalog_is_never_cached(cache, catalogs):
    (catalogs / "prices.yaml").write_text("catalog_version: 1\nrental: [{gpu: h100-sxmm}]\n")
    for _ in range(2):
        with pytest.raises(PlanningInputError):
            _load(catalogs)
    assert not cache.exists() or not list(cache.iterdir())


def test_an_unwritable_or_disabled_cache_never_fails_a_load(tmp_path, catalogs, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    expected = _load(catalogs)
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(blocker / "cache"))   # mkdir fails: NotADirectoryError
    assert _load(catalogs) == expected
    for value in ("off", "OFF", ""):
        monkeypatch.setenv("PLANNER_CACHE_DIR", value)
        assert catalog_cache.cache_dir() is None
        assert _load(catalogs) == expected


def test_the_cache_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(tmp_path / "mine"))
    assert catalog_cache.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("PLANNER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert catalog_cache.cache_dir() == tmp_path / "xdg" / "llm-planner"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert catalog_cache.cache_dir() == tmp_path / "home" / ".cache" / "llm-planner"


def test_the_test_suite_keeps_the_cache_out_of_the_home_directory():
    folder = Path(os.environ["PLANNER_CACHE_DIR"])              # tests/conftest.py
    assert catalog_cache.cache_dir() == folder
    assert not folder.resolve().is_relative_to((Path.home() / ".cache").resolve())


def test_the_calibration_file_is_parsed_once_per_version(cache, tmp_path, monkeypatch):
    from planner import calibration, yamlio

    path = tmp_path / "calibration.yaml"
    shutil.copy(calibration.DEFAULT_CALIBRATION_PATH, path)
    monkeypatch.setenv("PLANNER_CACHE_DIR", "off")
    expected = calibration.load_calibration(path)
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(cache))
    assert calibration.load_calibration(path) == expected       # parsed, stored
    reads = []
    real = yamlio.read_yaml
    monkeypatch.setattr(yamlio, "read_yaml", lambda p: reads.append(p) or real(p))
    assert calibration.load_calibration(path) == expected and reads == []
    path.write_text(path.read_text() + "# edited\n")
    assert calibration.load_calibration(path) == expected and reads == [path]


def test_a_problem_file_is_validated_once_per_version_and_errors_are_never_cached(cache, tmp_path, monkeypatch):
    from planner import yamlio
    from planner.problem import load_problem

    path = tmp_path / "p.yaml"
    shutil.copy(Path(__file__).resolve().parent.parent / "problems" / "chat-70b.yaml", path)
    expected = load_problem(path).spec                                 # validated, stored
    assert any(f.name.startswith("problem-spec-") for f in cache.iterdir())
    reads = []
    real = yamlio.read_yaml
    monkeypatch.setattr(yamlio, "read_yaml", lambda p: reads.append(p) or real(p))
    hit = load_problem(path).spec
    assert hit == expected and hit is not expected and reads == []      # a hit: no parse
    path.write_text(path.read_text().replace("name: ", "name: x", 1))
    assert load_problem(path).spec.name == "x" + expected.name and reads == [path]
    path.write_text("name: [unclosed\n")
    for _ in range(2):                                                  # the same error, never stored
        with pytest.raises(PlanningInputError, match="YAML syntax error"):
            load_problem(path)
    path.write_text("name: p\nworkloads: []\n")
    for _ in range(2):
        with pytest.raises(PlanningInputError, match="workloads: give at least one workload"):
            load_problem(path)
    assert reads == [path] * 5


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_a_path_the_cache_cannot_key_gets_the_plain_read_error(cache, tmp_path, kind):
    from planner import yamlio
    from planner.problem import ProblemSpec

    path = tmp_path / "p.yaml"
    if kind == "directory":
        path.mkdir()
    with pytest.raises(PlanningInputError) as direct:
        yamlio.read_yaml(path)
    with pytest.raises(PlanningInputError) as cached:
        yamlio.parse_file_cached(ProblemSpec, path, "problem-spec")
    assert cached.value.problems == direct.value.problems
    assert not cache.exists() or not list(cache.iterdir())


def test_a_file_beyond_the_input_limit_is_never_read_whole_for_a_key(cache, tmp_path, monkeypatch):
    from planner import limits, yamlio
    from planner.problem import Slo

    path = tmp_path / "p.yaml"
    path.write_text("ttft_p95_s: 1\ntpot_p95_s: 0.05\n")
    monkeypatch.setattr(limits, "MAX_INPUT_FILE_BYTES", 3)     # read_yaml's own bound stays 16 MiB
    monkeypatch.setattr(catalog_cache, "cached", lambda *a: pytest.fail("keyed a file beyond the limit"))
    assert yamlio.parse_file_cached(Slo, path, "slo") == Slo(ttft_p95_s=1, tpot_p95_s=0.05)
