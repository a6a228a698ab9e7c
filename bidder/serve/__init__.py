"""Serving: the bid port (its HTTP server and handlers), the assembly of a worker's
state, the worker and its pool, the supervisor, the admin port, settings and their
command-line options."""
