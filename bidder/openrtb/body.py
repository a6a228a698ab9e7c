"""Reading a request body within a size cap, decoding gzip within the same cap.

aiohttp's own decompression is switched off (``auto_decompress=False`` on the
runner) because on a corrupt gzip body it drops the connection and logs an
unhandled exception after our 204 has gone out; here a bad or oversized body is
just an ``InvalidRequest``. Decompression is bounded by ``max_length`` so a
small gzip bomb can't expand past the cap.
"""

from __future__ import annotations

import zlib

from aiohttp import web

from bidder.openrtb.request import InvalidRequest

_GZIP_WBITS = 16 + zlib.MAX_WBITS


async def read_body(request: web.BaseRequest, max_bytes: int) -> bytes:
    """The decoded body; raises InvalidRequest when too large or badly encoded."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise InvalidRequest(f"body of {length} bytes is over the {max_bytes} byte cap")
    body = await _read_capped(request, max_bytes)
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding == "gzip":
        return gunzip_capped(body, max_bytes)
    if encoding != "identity":
        raise InvalidRequest(f"unsupported Content-Encoding {encoding!r}")
    return body


async def _read_capped(request: web.BaseRequest, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.readany():
        size += len(chunk)
        if size > max_bytes:
            raise InvalidRequest(f"body is over the {max_bytes} byte cap")
        chunks.append(chunk)
    return b"".join(chunks)


def gunzip_capped(data: bytes, max_bytes: int) -> bytes:
    """Decode every gzip member (RFC 1952 allows several), ``max_bytes`` in all."""
    out = b""
    while True:
        decoder = zlib.decompressobj(wbits=_GZIP_WBITS)
        try:
            out += decoder.decompress(data, max_bytes + 1 - len(out))
        except zlib.error:
            raise InvalidRequest("body is not valid gzip") from None
        if len(out) > max_bytes:
            raise InvalidRequest(f"gzip body expands past the {max_bytes} byte cap")
        if not decoder.eof:
            raise InvalidRequest("gzip body is truncated")
        data = decoder.unused_data
        if not data:
            return out
