"""The bid port's HTTP/1.1 server: a lean asyncio protocol on ``httptools``."""
