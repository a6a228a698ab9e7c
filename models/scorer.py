"""Serving: load the artifact, check it against the feature code, score a batch.

The artifact is a directory (``models/artifact`` by default) of three files written by
``bidsim train``: ``ctr.txt`` (LightGBM text model), ``ctr.json`` (metadata: feature
version, fingerprint and names, the model file's SHA-256, training data hash, metrics)
and ``win_rate.json`` (``models.win_rate``). ``Scorer.load`` refuses, with
``ArtifactError`` naming the file and the disagreement, an artifact whose feature
version, fingerprint or feature names differ from ``models.features``, or whose model
file is not the one the metadata describes (a half-copied artifact).

Predict path. ``Booster.predict`` spends most of a small call in Python (a predictor
object, parameter strings, shape checks: about 20 us for one row). ``Scorer.predict``
calls LightGBM's C API directly with the parameter string (``num_threads=1``) and the
output buffer prepared once; outputs are bit-identical to ``Booster.predict`` (a test
checks). Its input is the packed rows of ``models.features.pack_rows``: a bytes object
goes to C as a pointer to its own buffer, where getting a numpy array's pointer
(``ndarray.ctypes``) costs about 2 us, nearly the 2.3 us of the C call for one row of
the 100-tree model. One row (88% of the scoring calls over the sample stream) goes
through ``LGBM_BoosterPredictForMatSingleRowFast`` with a ``FastConfig`` made at load
time: ``LGBM_BoosterPredictForMat`` builds a predictor per call (10 us against 4 us for
one row, idle machine). A batch goes through ``LGBM_BoosterPredictForMat``.

The calls keep the GIL (``ctypes.PyDLL``; LightGBM's own ``CDLL`` releases it). A call
takes microseconds, and releasing the GIL on the event loop's thread hands it to
whichever worker thread wants it: a boto3 call (profile fills, spend stream puts) then
runs Python for up to the interpreter's switch interval (5 ms) before the loop gets
the GIL back (``scripts/bench_score.py``'s contended figures; docs/benchmarks.md,
"Scoring", has what it did in a worker). One Scorer serves one event loop; its buffers
are not for concurrent callers.

``ModelHandle`` holds the live Scorer. ``reload`` builds a new one off to the side and
swaps the reference in one assignment, so a request sees the old model or the new one,
never a mix; a failed reload keeps the old model.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightgbm
import numpy as np
import orjson
from lightgbm.basic import _LIB, _safe_call  # the loaded C library LightGBM itself calls

from models import features
from models.win_rate import WinRateModel

MODEL_FILE = "ctr.txt"
META_FILE = "ctr.json"
WIN_RATE_FILE = "win_rate.json"
DEFAULT_DIR = Path(__file__).resolve().parent / "artifact"
MAX_BATCH = 256

_LIB_KEEPING_GIL = ctypes.PyDLL(_LIB._name, handle=_LIB._handle)

_C_API_DTYPE_FLOAT64 = 1
_C_API_IS_ROW_MAJOR = 1
_C_API_PREDICT_NORMAL = 0


class ArtifactError(ValueError):
    """The model artifact is missing, malformed, or disagrees with the feature code."""


class ScoringError(RuntimeError):
    """Scoring failed at run time; the bid stage answers SCORE_ERROR."""


@dataclass(frozen=True, slots=True)
class ArtifactMeta:
    feature_version: int
    fingerprint: str
    features: tuple[str, ...]
    model_sha256: str
    training_data_sha256: str
    doc: dict[str, Any]
    """The whole metadata document (metrics, parameters, command)."""


class Scorer:
    """A loaded, checked artifact: P(click) for feature rows, and the win-rate curves."""

    def __init__(self, booster: lightgbm.Booster, meta: ArtifactMeta, win_rate: WinRateModel):
        self.booster = booster
        self.meta = meta
        self.win_rate = win_rate
        self._params = b"num_threads=1"
        self._out = np.empty(MAX_BATCH, dtype=np.float64)
        self._out_ptr = self._out.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        self._n_out = ctypes.c_int64(0)
        self._n_out_ref = ctypes.byref(self._n_out)
        self._fast = ctypes.c_void_p()
        _safe_call(
            _LIB.LGBM_BoosterPredictForMatSingleRowFastInit(
                booster._handle,
                ctypes.c_int(_C_API_PREDICT_NORMAL),
                ctypes.c_int(0),  # start iteration
                ctypes.c_int(-1),  # all iterations
                ctypes.c_int(_C_API_DTYPE_FLOAT64),
                ctypes.c_int32(features.WIDTH),
                ctypes.c_char_p(self._params),
                ctypes.byref(self._fast),
            )
        )
        # The finalizer holds the booster, so the FastConfig never outlives the model.
        weakref.finalize(self, _free_fast_config, self._fast, booster)

    @classmethod
    def load(cls, directory: Path = DEFAULT_DIR) -> Scorer:
        """Load and check ``directory``; raises ArtifactError saying what is wrong."""
        meta = read_meta(directory / META_FILE)
        model_path = directory / MODEL_FILE
        raw = _read(model_path)
        if hashlib.sha256(raw).hexdigest() != meta.model_sha256:
            raise ArtifactError(
                f"{model_path}: not the model {META_FILE} describes (SHA-256 differs); "
                "copy the artifact whole or retrain with `bidsim train`"
            )
        try:
            booster = lightgbm.Booster(model_str=raw.decode())
        except (lightgbm.basic.LightGBMError, UnicodeDecodeError) as exc:
            raise ArtifactError(f"{model_path}: LightGBM cannot load it: {exc}") from None
        if tuple(booster.feature_name()) != features.NAMES:
            raise ArtifactError(f"{model_path}: its features are not models.features.NAMES")
        return cls(booster, meta, read_win_rate(directory / WIN_RATE_FILE))

    def predict(self, packed: bytes) -> list[float]:
        """P(click) per row of ``features.pack_rows`` output, in one C call."""
        n, extra = divmod(len(packed), features.ROW_BYTES)
        if extra or type(packed) is not bytes:
            raise ScoringError(f"cannot score {len(packed)} {type(packed).__name__} as packed rows")
        if n == 0:
            return []
        out, out_ptr = self._out, self._out_ptr
        if n > len(out):  # rare: more candidates than the preallocated buffer holds
            out = np.empty(n, dtype=np.float64)
            out_ptr = out.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        try:
            if n == 1:
                _safe_call(
                    _LIB_KEEPING_GIL.LGBM_BoosterPredictForMatSingleRowFast(
                        self._fast, packed, self._n_out_ref, out_ptr
                    )
                )
            else:
                self._predict_batch(packed, n, out_ptr)
        except lightgbm.basic.LightGBMError as exc:
            raise ScoringError(f"LightGBM predict failed: {exc}") from exc
        if self._n_out.value != n:
            raise ScoringError(f"LightGBM returned {self._n_out.value} scores for {n} rows")
        return out[:n].tolist()

    def _predict_batch(self, packed: bytes, n: int, out_ptr: Any) -> None:
        _safe_call(
            _LIB_KEEPING_GIL.LGBM_BoosterPredictForMat(
                self.booster._handle,
                packed,
                ctypes.c_int(_C_API_DTYPE_FLOAT64),
                ctypes.c_int32(n),
                ctypes.c_int32(features.WIDTH),
                ctypes.c_int(_C_API_IS_ROW_MAJOR),
                ctypes.c_int(_C_API_PREDICT_NORMAL),
                ctypes.c_int(0),  # start iteration
                ctypes.c_int(-1),  # all iterations
                ctypes.c_char_p(self._params),
                self._n_out_ref,
                out_ptr,
            )
        )


def _free_fast_config(fast: ctypes.c_void_p, _booster: lightgbm.Booster) -> None:
    """``_booster`` is passed only to keep the model alive until its FastConfig is freed."""
    _LIB.LGBM_FastConfigFree(fast)


def read_meta(path: Path) -> ArtifactMeta:
    """Parse and check the metadata against ``models.features``; raises ArtifactError."""
    try:
        doc = orjson.loads(_read(path))
        meta = ArtifactMeta(
            feature_version=int(doc["feature_version"]),
            fingerprint=str(doc["fingerprint"]),
            features=tuple(str(name) for name in doc["features"]),
            model_sha256=str(doc["model_sha256"]),
            training_data_sha256=str(doc["training_data_sha256"]),
            doc=doc,
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"{path}: not model metadata ({exc!r})") from None
    if meta.feature_version != features.FEATURE_VERSION:
        raise ArtifactError(
            f"{path}: model built for feature version {meta.feature_version}, this code is "
            f"version {features.FEATURE_VERSION}; retrain with `bidsim train`"
        )
    if meta.fingerprint != features.FINGERPRINT or meta.features != features.NAMES:
        raise ArtifactError(
            f"{path}: feature definition changed since the model was trained (fingerprint "
            f"{meta.fingerprint}, code has {features.FINGERPRINT}); bump FEATURE_VERSION and "
            "retrain with `bidsim train`"
        )
    return meta


def read_win_rate(path: Path) -> WinRateModel:
    try:
        return WinRateModel.from_doc(orjson.loads(_read(path)))
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise ArtifactError(f"{path}: {exc}") from None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no such file (train one with `bidsim train`)") from None
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read: {exc.strerror or exc}") from None


class ModelHandle:
    """The live Scorer of a worker, reloadable without a restart."""

    def __init__(self, directory: Path, scorer: Scorer) -> None:
        self.directory = directory
        self.current = scorer
        self._signature = _signature(directory)

    @classmethod
    def load(cls, directory: Path = DEFAULT_DIR) -> ModelHandle:
        """Load at start-up; raises ArtifactError (the bidder must refuse to start)."""
        signature = _signature(directory)
        handle = cls(directory, Scorer.load(directory))
        handle._signature = signature
        return handle

    def reload(self) -> Scorer:
        """Load the artifact again and swap it in; on ArtifactError the old one stays."""
        signature = _signature(self.directory)
        scorer = Scorer.load(self.directory)
        self.current, self._signature = scorer, signature
        return scorer

    def reload_if_changed(self) -> bool:
        """Reload when any artifact file's size or mtime changed; True if it did."""
        if _signature(self.directory) == self._signature:
            return False
        self.reload()
        return True


def _signature(directory: Path) -> tuple[tuple[int, int], ...]:
    out = []
    for name in (MODEL_FILE, META_FILE, WIN_RATE_FILE):
        try:
            st = os.stat(directory / name)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((0, -1))
    return tuple(out)
