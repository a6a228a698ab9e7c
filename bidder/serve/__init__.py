"""Serving: the aiohttp handlers, the assembly of a worker's state, the worker and its
pool, the supervisor, the admin port, settings and their command-line options."""
