"""Click scoring and bid pricing: features, training, the scorer and the win-rate model.

Serving needs three names: ``ModelHandle.load`` (raises ``ArtifactError``), ``Pricer``
(its ``price`` raises ``ScoringError``) and the artifact directory ``DEFAULT_DIR``.
"""

from __future__ import annotations

from models.scorer import DEFAULT_DIR, ArtifactError, ModelHandle, Scorer, ScoringError
from models.serving import Pricer

__all__ = ["DEFAULT_DIR", "ArtifactError", "ModelHandle", "Pricer", "Scorer", "ScoringError"]
