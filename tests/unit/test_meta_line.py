"""parse_meta_line: json.loads of a meta line, a long member list parsed once and shared."""

from __future__ import annotations

import json

import pytest

from ddpdoctor.trace.meta_line import parse_meta_line


def _group(n: int, t: int, **extra: object) -> bytes:
    return json.dumps({"index": 0, "name": "0", "ranks": list(range(n)), "size": n,
                       **extra, "event": "group", "t": t}).encode()


def test_every_rank_listing_the_same_members_shares_one_list() -> None:
    a, b = parse_meta_line(_group(4096, 1)), parse_meta_line(_group(4096, 2))
    assert a == json.loads(_group(4096, 1)) and b["t"] == 2
    assert a["ranks"] is b["ranks"]


@pytest.mark.parametrize("line", [
    _group(300, 1, x={"ranks": []}),  # a nested "ranks" too: no shortcut
    json.dumps({"x": {"ranks": list(range(300))}, "ranks": []}).encode(),
    json.dumps({"event": "group", "ranks": ["a]"] + list(range(300))}).encode(),
    json.dumps({"event": "group", "ranks": [1, 2]}).encode(),
    b'{"event": "group", "ranks": [' + b"1, " * 300 + b"]}",  # not JSON
    b'["ranks": [' + b"1, " * 300 + b"2]]",
])
def test_anything_else_parses_as_json_does(line: bytes) -> None:
    try:
        want = json.loads(line)
    except ValueError:
        with pytest.raises(ValueError):
            parse_meta_line(line)
        return
    assert parse_meta_line(line) == want
