"""Click scoring and bid pricing: features, training, the scorer and the win-rate model.

Serving uses ``models.scorer`` (``ModelHandle.load``, raising ``ArtifactError``; the
artifact directory ``DEFAULT_DIR``) and ``models.serving`` (``Pricer``, whose ``price``
raises ``ScoringError``). The package itself imports nothing, so a module that needs
only the features does not load LightGBM.
"""
