"""One module per chaos scenario; each has ``NAME``, ``INJECTED`` and ``run(options)``."""
