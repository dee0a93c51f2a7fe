"""A body of blank lines is refused once a run of them passes max_item_bytes, not after reading
the whole of it: each request holds a thread for as long as its body is read."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest

from tests.webapi.conftest import Api
from webapi.config import MIB

#: The body sent: far more blank bytes than the limit allows in a row.
BODY_BYTES = 60 * 1024 * 1024
#: The app's limits here: what it would take of a body, and a blank run it allows.
BODY_LIMIT = 64 * MIB
LIMIT = MIB


@pytest.fixture
def api(make_api: Callable[..., Api]) -> Api:
    return make_api(max_body_bytes=BODY_LIMIT, max_item_bytes=LIMIT)


class Counted(io.RawIOBase):
    """A body of ``head`` then line breaks, ``size`` bytes in all, that counts what was read."""

    def __init__(self, head: bytes, filler: bytes, size: int) -> None:
        self.head = head
        self.filler = filler
        self.size = size
        self.sent = 0
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """The test client measures the body (to the end and back) before sending it."""
        self.position = self.size if whence == io.SEEK_END else offset
        assert whence in (io.SEEK_SET, io.SEEK_END) and self.position in (self.sent, self.size)
        return self.position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self.size - self.sent)
        if want <= 0:
            return 0
        chunk = (self.head[self.sent :] if self.sent < len(self.head) else b"") or self.filler * (
            want // len(self.filler) + 1
        )
        chunk = chunk[:want]
        buffer[: len(chunk)] = chunk
        self.sent += len(chunk)
        return len(chunk)


@pytest.mark.parametrize(
    ("media_type", "head", "filler"),
    [
        ("application/x-ndjson", b"", b"\n"),
        ("application/x-ndjson", b'{"sku": "A", "price": "1"}\n', b"\r\n"),
        ("application/x-ndjson", b"", b"   \n"),
        ("text/csv", b"sku,price\n", b"\n"),
        ("text/csv", b"sku,price\nA,1\n", b"\r\n"),
    ],
)
def test_a_run_of_blank_lines_is_refused_before_the_body_is_read(
    api: Api, media_type: str, head: bytes, filler: bytes
) -> None:
    body = Counted(head, filler, BODY_BYTES)
    response = api.http.post(
        "/api/tasks?job=echo",
        input_stream=body,
        headers={**api.headers(), "Content-Type": media_type, "Content-Length": str(BODY_BYTES)},
    )
    assert response.status_code == 422, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == "blank_lines"
    assert "an item was expected" in error["message"]
    assert body.sent < 4 * LIMIT + len(head) + 1024 * 1024


def test_blank_lines_between_items_within_the_limit_are_skipped(api: Api) -> None:
    body = b'{"sku": "A"}\n' + b"\n" * (LIMIT // 2) + b'{"sku": "B"}\n'
    response = api.http.post(
        "/api/tasks?job=echo", data=body, headers={**api.headers(), "Content-Type": "application/x-ndjson"}
    )
    assert response.status_code == 202, response.get_data(as_text=True)
