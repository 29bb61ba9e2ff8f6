"""LineIndex: random access to append-only JSONL files without reading them whole."""

from __future__ import annotations

from pathlib import Path

from sandlot.viewer.lines import IndexCache, LineIndex


def test_index_reads_any_line_and_picks_up_appended_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(f'{{"n": {i}}}\n' for i in range(5)))
    index = LineIndex(path)
    assert index.refresh() == 5
    assert index.read(3, 5) == [b'{"n": 3}\n', b'{"n": 4}\n']
    with path.open("a") as fh:
        fh.write('{"n": 5}\n{"n": 6}\n')
    assert index.refresh() == 7
    assert index.read(6, 100) == [b'{"n": 6}\n']


def test_a_line_still_being_written_is_not_counted_until_complete(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"n": 0}\n{"n": 1')
    index = LineIndex(path)
    assert index.refresh() == 1
    with path.open("a") as fh:
        fh.write('}\n')
    assert index.refresh() == 2
    assert index.read(1, 2) == [b'{"n": 1}\n']


def test_a_rewritten_shorter_file_is_indexed_again(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"n": 0}\n{"n": 1}\n{"n": 2}\n')
    index = LineIndex(path)
    assert index.refresh() == 3
    path.write_text('{"m": 9}\n')
    assert index.refresh() == 1
    assert index.read(0, 1) == [b'{"m": 9}\n']


def test_tags_count_marked_lines_before_each_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    kinds = ["a", "t", "t", "a", "t", "a"]
    path.write_text("".join(f'{{"type": "{k}"}}\n' for k in kinds))
    index = LineIndex(path, lambda head: 1 if b'"a"' in head else 0)
    index.refresh()
    assert [index.tagged_before(i) for i in range(6)] == [0, 1, 1, 1, 2, 2]


def test_missing_file_has_no_lines_and_cache_shares_indexes(tmp_path: Path) -> None:
    cache = IndexCache()
    missing = cache.get(tmp_path / "none.jsonl")
    assert len(missing) == 0 and missing.read(0, 10) == []
    path = tmp_path / "x.jsonl"
    path.write_text("{}\n")
    assert cache.get(path) is cache.get(path)
