"""What no store can hold, found where callers hand it in and escaped where job code says it."""

from __future__ import annotations

import json

import pytest

from asynctask import InvalidString, storable
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import LOG, Transition, decode_entry, status


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x00b", "a\\u0000b"),
        ("x\ud800y", "x\\ud800y"),
        ("\udfff", "\\udfff"),
        ("mixed 日本語 ✓ \x00", "mixed 日本語 ✓ \\u0000"),
        ("plain", "plain"),
    ],
)
def test_unstorable_characters_are_written_as_visible_escapes(text: str, shown: str) -> None:
    assert storable.escaped(text) == shown
    shown.encode()  # every store's encoding takes it


def test_a_long_text_is_cut_at_the_limit_on_a_character_boundary_with_its_size() -> None:
    text = "é" * 100  # 200 bytes of UTF-8
    cut = storable.bounded(text, 51)
    assert cut == "é" * 25 + "... (truncated, 200 bytes)"
    assert storable.bounded(text, 200) == text


def test_params_strings_and_keys_are_made_storable_and_untouched_values_are_the_same_object() -> None:
    clean = [1, {"a": "b"}, ["日本"]]
    assert storable.storable_value(clean, 1000) is clean
    assert storable.storable_value([{"k\x00": "v\ud800"}, "x" * 50], 20) == [
        {"k\\u0000": "v\\ud800"},
        "x" * 20 + "... (truncated, 50 bytes)",
    ]


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"name": "a\x00b"}, "items[7]['name'] holds a NUL character (U+0000)"),
        ([1, "\ud800"], "items[7][1] holds a lone surrogate (U+D800)"),
        ({"\udc00": 1}, "items[7] key '\\udc00' holds a lone surrogate (U+DC00)"),
        ("\x00", "items[7] holds a NUL character"),
    ],
)
def test_data_with_an_unstorable_string_is_refused_naming_the_item_and_field(
    value: object, where: str
) -> None:
    with pytest.raises(InvalidString) as refused:
        storable.check(value, "items", item=7)
    assert str(refused.value).startswith(where)
    assert "\n" not in str(refused.value)
    assert (refused.value.field, refused.value.item) == ("items", 7)


def test_storable_data_passes() -> None:
    storable.check({"name": "日本語 ✓", "n": [1, 2.5, None, True]}, "meta")


def test_a_transition_is_encoded_as_text_every_store_holds() -> None:
    huge = "é" * 600_000
    transition = status(
        "j1", EventStatus.ERROR, f"bad \x00 input \ud800 {huge}", error_class="Boom\x00" + "X" * 300
    )
    encoded = transition.encode(limit=1000)
    encoded.encode()  # no lone surrogate left
    (decoded,) = decode_entry(1, f"[{encoded}]")
    assert decoded.text is not None and decoded.error_class is not None
    assert decoded.text.startswith("bad \\u0000 input \\ud800 éé")
    # The size given is that of the whole text as stored: escapes included.
    assert decoded.text.endswith(
        f"... (truncated, {len(storable.escaped(transition.text or '').encode())} bytes)"
    )
    assert len(decoded.text.encode()) < 1000 + 40
    assert decoded.error_class.startswith("Boom\\u0000XX") and len(decoded.error_class) <= 255


def test_an_ordinary_transition_is_encoded_unchanged() -> None:
    transition = Transition("j1", LOG, 1.5, "imported 5 rows 日本")
    assert json.loads(transition.encode()) == ["j1", "log", 1.5, "imported 5 rows 日本"]


@pytest.mark.parametrize(
    ("jid", "text"),
    [
        ("0123456789abcdef01234567", "started"),
        ("6f1c2a3e-9b8d-4c7e-a1f2-3b4c5d6e7f80", "waiting for retry 1 of 2"),
        ('a"b', "finished"),
        ("a\\b", "finished"),
        ("j1", 'say "hi"'),
        ("j1", "tab\there"),
        ("j\u00e9", "finished"),
        ("j1", "日本"),
        ("j1", ""),
    ],
)
def test_a_status_transition_is_the_json_of_its_fields(jid: str, text: str) -> None:
    for kind in EventStatus:
        transition = Transition(jid, kind.value, 1795632246.9102843, text)
        encoded = transition.encode()
        assert encoded == json.dumps(
            [jid, kind.value, 1795632246.9102843, text], ensure_ascii=False, separators=(",", ":")
        )
        (decoded,) = decode_entry(1, f"[{encoded}]")
        assert (decoded.jid, decoded.kind, decoded.at, decoded.text) == (jid, kind.value, transition.at, text)


def test_a_status_text_longer_than_the_limit_is_cut() -> None:
    encoded = status("j1", EventStatus.FINISH, "finished " * 20).encode(limit=40)
    assert "truncated" in json.loads(encoded)[3]


def test_decoding_escapes_what_another_writer_left_in_the_stream() -> None:
    raw = json.dumps(
        [["j1", "log", 1.0, "a\x00b"], ["j2", "error", 2.0, "\ud800", "E\x00", None, "J\x00", ["p\x00"]]]
    )
    log, error = decode_entry(1, raw)
    assert log.text == "a\\u0000b"
    assert (error.text, error.error_class, error.name, error.params) == (
        "\\ud800",
        "E\\u0000",
        "J\\u0000",
        ["p\\u0000"],
    )
