"""Decoding a request body within a size cap, gzip within the same cap.

The bid port's server reads the body (dropping one over the cap); here a bad or
oversized body is just an ``InvalidRequest``. Decompression is bounded by
``max_bytes`` so a small gzip bomb can't expand past the cap.
"""

from __future__ import annotations

import zlib

from bidder.openrtb.request import InvalidRequest

_GZIP_WBITS = 16 + zlib.MAX_WBITS


def decode_body(body: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """The decoded body; raises InvalidRequest when too large or badly encoded."""
    if len(body) > max_bytes:
        raise InvalidRequest(f"body of {len(body)} bytes is over the {max_bytes} byte cap")
    if content_encoding is None:
        return body
    encoding = content_encoding.strip().lower()
    if encoding == "gzip":
        return gunzip_capped(body, max_bytes)
    if encoding != "identity":
        raise InvalidRequest(f"unsupported Content-Encoding {encoding!r}")
    return body


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
