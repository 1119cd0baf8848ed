"""How the output of a run is kept: its head and tail within a byte limit, with a marker saying how much was cut."""

from __future__ import annotations

def truncate_middle(data: bytes, limit: int) -> tuple[bytes, bool]:
    """Keep the head and tail of an over-long output, with a marker saying how much was cut."""
    if len(data) <= limit:
        return data, False
    half = limit // 2
    cut = len(data) - 2 * half
    marker = f"\n[... {cut} bytes of output cut by ssrkit ...]\n".encode()
    return data[:half] + marker + data[-half:], True


class OutputCapture:
    """Streaming form of `truncate_middle`: keeps at most `limit` bytes (head and tail) of any stream.

    Memory stays bounded (about 1.5 x limit) however long the stream is; `result()` equals
    `truncate_middle(whole_stream, limit)`.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(int(limit), 2)
        self.half = self.limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            keep = self.limit - self.half  # enough to return everything while total <= limit
            if len(self.tail) > 2 * keep:
                del self.tail[: len(self.tail) - keep]

    def result(self) -> tuple[bytes, bool]:
        if self.total <= self.limit:
            return bytes(self.head) + bytes(self.tail), False
        cut = self.total - 2 * self.half
        marker = f"\n[... {cut} bytes of output cut by ssrkit ...]\n".encode()
        tail = bytes(self.tail[-self.half:]) if self.half else b""
        return bytes(self.head) + marker + tail, True
