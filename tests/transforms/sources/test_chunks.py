"""ChunkBuilder: records cut into chunks of chunk_rows, given as columns or as rows; the rest
flushed; an early chunk where the fields change; record texts kept with their records."""

import json

from transforms.records import one_line_records
from transforms.sources.chunks import ChunkBuilder


def _builder(chunk_rows=3, **kwargs) -> ChunkBuilder:
    return ChunkBuilder("src", "f.x", chunk_rows, **kwargs)


def _columns(rows: list[dict]) -> dict[str, list]:
    return {
        name: [row.get(name) for row in rows] for name in dict.fromkeys(k for r in rows for k in r)
    }


def test_columns_are_cut_at_chunk_rows_across_adds_and_flush_gives_the_rest():
    builder = _builder()
    first = list(builder.add({"a": [1, 2], "b": ["x", "y"]}, [1, 2]))
    second = list(builder.add({"a": [3, 4, 5, 6, 7], "b": list("zuvwt")}, range(3, 8)))
    rest = list(builder.flush())
    assert first == []
    assert [(c.columns, c.lines) for c in second] == [
        ({"a": [1, 2, 3], "b": ["x", "y", "z"]}, [1, 2, 3]),
        ({"a": [4, 5, 6], "b": ["u", "v", "w"]}, [4, 5, 6]),
    ]
    assert [(c.columns, c.lines) for c in rest] == [({"a": [7], "b": ["t"]}, [7])]
    assert all(c.source == "src" and c.path == "f.x" and not c.text for c in second + rest)
    assert all(c.raw_text is None and c.starts is None for c in second + rest)
    assert list(builder.flush()) == []


def test_nothing_added_or_nothing_left_yields_nothing():
    assert list(_builder().flush()) == []
    builder = _builder()
    assert list(builder.add({"a": []}, [])) == []
    assert list(builder.flush()) == []
    chunks = list(builder.add({"a": [1, 2, 3]}, [1, 2, 3]))
    assert [c.lines for c in chunks] == [[1, 2, 3]]
    assert list(builder.flush()) == []


def test_other_fields_deliver_the_waiting_records_first():
    builder = _builder(chunk_rows=4)
    chunks = list(builder.add({"a": [1, 2], "b": [10, 20]}, [1, 2]))
    chunks += builder.add({"b": [30], "a": [3]}, [3])  # the same fields, in another order
    chunks += builder.add({"a": [4, 5]}, [4, 5])
    chunks += builder.add({"a": [6, 7], "c": [True, False]}, [6, 7])
    chunks += builder.flush()
    assert [(c.columns, c.lines) for c in chunks] == [
        ({"a": [1, 2, 3], "b": [10, 20, 30]}, [1, 2, 3]),
        ({"a": [4, 5]}, [4, 5]),
        ({"a": [6, 7], "c": [True, False]}, [6, 7]),
    ]


def test_fields_after_a_chunk_cut_at_the_end_of_an_add_are_only_the_new_ones():
    builder = _builder(chunk_rows=2)
    chunks = list(builder.add({"a": [1, 2], "b": [3, 4]}, [1, 2]))
    chunks += builder.add({"a": [5]}, [3])
    chunks += builder.add({"a": [6], "b": [7]}, [4])
    chunks += builder.flush()
    assert [(c.columns, c.lines) for c in chunks] == [
        ({"a": [1, 2], "b": [3, 4]}, [1, 2]),
        ({"a": [5]}, [3]),
        ({"a": [6], "b": [7]}, [4]),
    ]


def test_rows_become_columns_of_each_chunks_own_rows():
    seen = []

    def columns_of(rows):
        seen.append(list(rows))
        return _columns(rows)

    builder = _builder(columns_of=columns_of)
    chunks = list(builder.add_rows([{"a": 1}, {"a": 2, "b": "x"}], [1, 2]))
    chunks += builder.add_rows([{"c": 3}, {"a": 4}, {"b": "y"}, {}], [4, 5, 7, 9])
    chunks += builder.flush()
    assert [(c.columns, c.lines) for c in chunks] == [
        ({"a": [1, 2, None], "b": [None, "x", None], "c": [None, None, 3]}, [1, 2, 4]),
        ({"a": [4, None, None], "b": [None, "y", None]}, [5, 7, 9]),
    ]
    assert seen == [[{"a": 1}, {"a": 2, "b": "x"}, {"c": 3}], [{"a": 4}, {"b": "y"}, {}]]


def test_add_row_returns_the_chunk_it_completes():
    builder = _builder(chunk_rows=2, columns_of=_columns)
    got = [builder.add_row({"n": n}, n + 10) for n in range(5)]
    assert got[0] is None and got[2] is None and got[4] is None
    assert (got[1].columns, got[1].lines) == ({"n": [0, 1]}, [10, 11])
    assert (got[3].columns, got[3].lines) == ({"n": [2, 3]}, [12, 13])
    (last,) = builder.flush()
    assert (last.columns, last.lines) == ({"n": [4]}, [14])


def test_record_texts_stay_with_their_records_across_cuts():
    lines = ["alpha", "", "b é", "gamma delta", "e"]
    builder = _builder(chunk_rows=2, raw_fields=one_line_records, text=True)
    chunks = list(builder.add({"line": lines[:3]}, [1, 2, 3], lines[:3]))
    chunks += builder.add({"line": lines[3:]}, [5, 8], lines[3:])
    chunks += builder.flush()
    assert [len(c) for c in chunks] == [2, 2, 1] and all(c.text for c in chunks)
    assert [(c.lines[i], c.raw(i)) for c in chunks for i in range(len(c))] == list(
        zip([1, 2, 3, 5, 8], lines)
    )
    assert [v for c in chunks for v in c.columns["line"]] == lines
    assert (chunks[1].raw_text, chunks[1].starts, chunks[1].ends) == (
        "b égamma delta",
        [0, 3],
        [3, 14],
    )

    rows = _builder(chunk_rows=2, columns_of=_columns, raw_fields=one_line_records)
    texts = ['{"a": 1}', '{"b": 2}', '{"a": 3}']
    got = [rows.add_row(json.loads(t), n, t) for n, t in enumerate(texts, 1)]
    assert got[0] is None and got[2] is None
    chunks = [got[1], *rows.flush()]
    assert [[c.raw(i) for i in range(len(c))] for c in chunks] == [texts[:2], texts[2:]]
    assert chunks[0].columns == {"a": [1, None], "b": [None, 2]}
