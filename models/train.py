"""``bidsim train``: learn P(click) from labelled impressions and write the artifact.

Rows come from ``models.features.build_rows``, the very function serving calls, one
row per impression. A seeded random 20% is held out (not the day's last hours: the
hour of day is a feature, and a time split would test it only on hours it never saw).
LightGBM trains single-threaded with ``deterministic``, so the same impressions and
seed give the same model text.

Reported on the holdout: AUC and log loss of the model, of the trivial baseline (the
training base rate for everyone: log loss of a constant, AUC 0.5), and of the oracle
(the generator's true probabilities: the best any model could do).

The artifact is written file by file through temporary names and ``os.replace``,
metadata last; a reader that catches it half-written sees a model/metadata hash
mismatch and keeps its old model (``models.scorer``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lightgbm
import numpy as np
import orjson

from models import features
from models.logs import Impression, encode
from models.scorer import META_FILE, MODEL_FILE, WIN_RATE_FILE
from models.win_rate import WinRateModel


@dataclass(frozen=True, slots=True)
class TrainConfig:
    trees: int = 100
    num_leaves: int = 15
    learning_rate: float = 0.05
    min_data_in_leaf: int = 40
    holdout: float = 0.2
    seed: int = 1

    def problems(self) -> list[str]:
        checks = [
            (1 <= self.trees <= 5000, f"--trees must be 1-5000, got {self.trees}"),
            (2 <= self.num_leaves <= 1024, f"--leaves must be 2-1024, got {self.num_leaves}"),
            (0 < self.learning_rate <= 1, "--learning-rate must be in (0, 1]"),
            (self.min_data_in_leaf >= 1, "--min-data-in-leaf must be at least 1"),
            (0.05 <= self.holdout <= 0.5, "--holdout must be 0.05-0.5"),
        ]
        return [message for ok, message in checks if not ok]

    def lightgbm_params(self) -> dict[str, Any]:
        return {
            "objective": "binary",
            "num_leaves": self.num_leaves,
            "learning_rate": self.learning_rate,
            "min_data_in_leaf": self.min_data_in_leaf,
            "seed": self.seed,
            "deterministic": True,
            "force_row_wise": True,
            "num_threads": 1,
            "verbose": -1,
        }


@dataclass(frozen=True, slots=True)
class Dataset:
    x: np.ndarray
    y: np.ndarray
    p_true: np.ndarray
    sha256: str
    """Of the impressions' log lines (``models.logs.encode``), in order."""


@dataclass(frozen=True, slots=True)
class TrainReport:
    auc: float
    baseline_auc: float
    logloss: float
    baseline_logloss: float
    oracle_auc: float
    oracle_logloss: float
    rows: int
    train_rows: int
    holdout_rows: int
    positives: int
    base_rate: float
    trees: int
    training_data_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def dataset(items: Iterable[Impression]) -> Dataset:
    """Feature rows, labels and true probabilities of impressions (one row each)."""
    digest = hashlib.sha256()
    rows: list[np.ndarray] = []
    labels: list[float] = []
    truth: list[float] = []
    for imp in items:
        digest.update(encode(imp))
        rows.append(features.build_rows(imp.request, imp.ssp, imp.profile, [imp.candidate], imp.ts))
        labels.append(1.0 if imp.clicked else 0.0)
        truth.append(imp.p_true)
    if not rows:
        raise ValueError("no impressions to train on")
    return Dataset(np.vstack(rows), np.asarray(labels), np.asarray(truth), digest.hexdigest())


def holdout_mask(rows: int, config: TrainConfig) -> np.ndarray:
    return np.random.default_rng(config.seed).random(rows) < config.holdout


def fit(data: Dataset, config: TrainConfig) -> tuple[lightgbm.Booster, TrainReport]:
    """Train on the non-holdout rows; report on the holdout. Raises ValueError on bad data."""
    problems = config.problems()
    if problems:
        raise ValueError("; ".join(problems))
    test = holdout_mask(len(data.y), config)
    train_y, test_y = data.y[~test], data.y[test]
    if train_y.sum() < 10 or test_y.sum() < 10:
        raise ValueError(f"too few clicks to train on ({int(data.y.sum())} in {len(data.y)} rows)")
    train_set = lightgbm.Dataset(
        data.x[~test],
        train_y,
        feature_name=list(features.NAMES),
        categorical_feature=list(features.CATEGORICAL),
        params={"verbose": -1},
    )
    booster = lightgbm.train(config.lightgbm_params(), train_set, num_boost_round=config.trees)
    predicted = np.asarray(booster.predict(data.x[test]))
    base_rate = float(train_y.mean())
    report = TrainReport(
        auc=auc(test_y, predicted),
        baseline_auc=auc(test_y, np.full(len(test_y), base_rate)),
        logloss=logloss(test_y, predicted),
        baseline_logloss=logloss(test_y, np.full(len(test_y), base_rate)),
        oracle_auc=auc(test_y, data.p_true[test]),
        oracle_logloss=logloss(test_y, data.p_true[test]),
        rows=len(data.y),
        train_rows=int((~test).sum()),
        holdout_rows=int(test.sum()),
        positives=int(data.y.sum()),
        base_rate=base_rate,
        trees=booster.num_trees(),
        training_data_sha256=data.sha256,
    )
    return booster, report


def auc(y: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U; tied scores count one half)."""
    positives = int(y.sum())
    negatives = len(y) - positives
    if positives == 0 or negatives == 0:
        raise ValueError("AUC needs both clicks and non-clicks")
    order = np.argsort(score, kind="mergesort")
    _, inverse, counts = np.unique(score[order], return_inverse=True, return_counts=True)
    mean_rank = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based average rank of each tie run
    ranks = np.empty(len(y))
    ranks[order] = mean_rank[inverse]
    u = ranks[y == 1].sum() - positives * (positives + 1) / 2.0
    return float(u / (positives * negatives))


def logloss(y: np.ndarray, p: np.ndarray) -> float:
    q = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)))


def write_artifact(
    directory: Path,
    booster: lightgbm.Booster,
    report: TrainReport,
    win_rate: WinRateModel,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write model, win-rate curves and metadata (last) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    model_text = booster.model_to_string().encode()
    meta = {
        "feature_version": features.FEATURE_VERSION,
        "fingerprint": features.FINGERPRINT,
        "features": list(features.NAMES),
        "categorical": [features.NAMES[i] for i in features.CATEGORICAL],
        "model_sha256": hashlib.sha256(model_text).hexdigest(),
        "training_data_sha256": report.training_data_sha256,
        "lightgbm_version": lightgbm.__version__,
        "metrics": {k: v for k, v in report.to_dict().items() if k != "training_data_sha256"},
        **(extra or {}),
    }
    _replace(directory / WIN_RATE_FILE, orjson.dumps(win_rate.to_doc(), option=_JSON))
    _replace(directory / MODEL_FILE, model_text)
    _replace(directory / META_FILE, orjson.dumps(meta, option=_JSON))


_JSON = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
