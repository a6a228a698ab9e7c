"""The simulated audience: 200,000 users with Zipf-distributed activity.

A user is an index; index 0 is the most active. A request comes from user k with
probability proportional to (k + 1 + Q)^-S, a Zipf-Mandelbrot law with S = 1.1 and Q = 5:
heavy users exist (the top 1% send about two thirds of the requests) without one user
sending 13% of the stream, as pure Zipf over 200,000 users would.

Every attribute is a function of the index alone, built from a fixed seed, so user 123
is the same person in every stream; a stream's seed only decides who shows up when.

Country and device class must reproduce their target shares at request level. A random
assignment would not: the heaviest user alone carries ~2.6% of requests. So the head
(the most active users) is assigned greedily, each user to the category furthest below
its share of the mass assigned so far, and the long tail at random. Users of a country
are grouped into households of 1-4 that share an IP.

Heavy users (``with_heavy_users``) are an optional overlay for frequency-cap runs: a
share of the events is handed to the N most active users, evenly. The head is
stratified, so those N users are a mix of countries and devices, as real heavy users
are; each of them then sends ``share / N`` of the stream, enough to meet its caps.

People with several ids (``face``, for multi-id streams): a person (an index) shows up
as 1-3 *faces*, each a browser or device of their own with its own exchange id, cookie
(``buyeruid``) and advertising id: 45% of people have one face, 35% two, 20% three. Face
0 is the user as above. Other faces share the person's home IP (one household) and, when
the person is logged in (has an ``eid``, a hashed login), that eid: the overlap an
identity graph links them by. The index is the ground truth of who the person is.

Anonymous faces (``User.anonymous_draw``, for streams with an anonymous share): a
browser that keeps no third-party cookie and sends no login, or an app with ad
tracking limited and no exchange id: its requests carry no id at all, only the
household's IP, which every face and member of the household shares.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import numpy as np

from bidder.bidstream import inventory as inv

POPULATION = 200_000
ZIPF_S = 1.1
ZIPF_Q = 5.0
_SEED = 2026_01_05
_HEAD = 4_000
_HOUSEHOLD_SIZES = ([1, 2, 3, 4], [0.55, 0.25, 0.12, 0.08])
_USER_CACHE = 50_000
_FACE_SHARES = (0.45, 0.35, 0.20)
"""Share of people with 1, 2 and 3 faces (devices or browsers with ids of their own)."""
MAX_FACES = len(_FACE_SHARES)


@dataclass(frozen=True, slots=True)
class User:
    index: int
    """The person: the same for every face of one person (the ground truth)."""
    id: str
    buyeruid: str | None
    """Our own id for the user, known only where a cookie sync happened."""
    country: str
    device_class: str
    model: inv.DeviceModel
    ip: str
    ifa: str
    """Advertising id (apps, CTV); all zeros when the user limits ad tracking."""
    lmt: bool
    eid: str | None
    """A UID2-style token when the user is in an identity graph."""
    consent_draw: float
    """Uniform in [0, 1): which TCF choices this user made (see _privacy)."""
    face: int = 0
    """Which of the person's devices or browsers this is (0 for single-id streams)."""
    anonymous_draw: float = 1.0
    """Uniform in [0, 1): a stream with an anonymous share F sends this face's requests
    without any id when the draw is under F (``generate(..., anonymous_share=F)``)."""


class Population:
    """Users by index and a sampler of indexes by activity."""

    def __init__(self, size: int = POPULATION) -> None:
        rng = np.random.default_rng(_SEED)
        ranks = np.arange(1, size + 1, dtype=np.float64)
        mass = (ranks + ZIPF_Q) ** -ZIPF_S
        mass /= mass.sum()
        self.size = size
        self._cdf = np.cumsum(mass)
        self._country = _stratified(mass, inv.COUNTRIES.shares(), rng)
        self._device = _stratified(mass, inv.DEVICE_CLASSES.shares(), rng)
        self._household = _households(self._country, rng)
        self._users: dict[tuple[int, int], User] = {}

    def sample(self, rng: np.random.Generator, n: int) -> list[int]:
        """``n`` user indexes drawn by activity."""
        picks = np.searchsorted(self._cdf, rng.random(n) * self._cdf[-1], side="right")
        return [int(i) for i in np.minimum(picks, self.size - 1)]

    def with_heavy_users(
        self, rng: np.random.Generator, users: list[int], heavy_users: int, heavy_share: float
    ) -> list[int]:
        """``users`` with each event given, with probability ``heavy_share``, to one of
        the ``heavy_users`` most active users (indexes 0 .. N-1, uniformly).

        Draws nothing when there are no heavy users, so a stream without them is the
        same as before the option existed.
        """
        if heavy_users < 1 or heavy_share <= 0:
            return users
        taken = rng.random(len(users)) < heavy_share
        heavy = rng.integers(0, min(heavy_users, self.size), size=len(users))
        return [int(h) if t else u for u, t, h in zip(users, taken, heavy, strict=True)]

    def user(self, index: int, face: int = 0) -> User:
        """Person ``index`` as seen through face ``face`` (below ``faces(index)``)."""
        found = self._users.get((index, face))
        if found is None:
            if len(self._users) >= _USER_CACHE:
                self._users.clear()  # bounded memory; users are cheap to rebuild
            found = self._users[index, face] = self._build(index, face)
        return found

    def faces(self, index: int) -> int:
        """How many devices or browsers with ids of their own person ``index`` uses."""
        draw, total = _uniform(index, b"faces"), 0.0
        for count, share in enumerate(_FACE_SHARES, start=1):
            total += share
            if draw < total:
                return count
        return MAX_FACES

    def face_of(self, index: int, draw: float) -> User:
        """The face a request of person ``index`` comes from, for a uniform ``draw``."""
        return self.user(index, min(int(draw * self.faces(index)), MAX_FACES - 1))

    def _build(self, index: int, face: int) -> User:
        def name(what: bytes) -> bytes:  # face 0 keeps the single-id attributes
            return what if face == 0 else what + b":%d" % face

        country = inv.COUNTRIES.values[self._country[index]]
        device = self._device[index] if face == 0 else _digest(index, name(b"device"))[0]
        device_class = inv.DEVICE_CLASSES.values[device % len(inv.DEVICE_CLASSES.values)]
        models = inv.DEVICE_MODELS[device_class]
        model = models[_digest(index, name(b"model"))[0] % len(models)]
        lmt = device_class != "desktop" and _uniform(index, name(b"lmt")) < 0.04
        synced = _uniform(index, name(b"synced")) < 0.7
        return User(
            index=index,
            id=_digest(index, name(b"user.id")).hex(),
            buyeruid=_digest(index, name(b"buyeruid")).hex()[:24] if synced else None,
            country=country,
            device_class=device_class,
            model=model,
            ip=_ip(country, int(self._household[index])),
            ifa=_ifa(index, model.os == "iOS", name(b"ifa")) if not lmt else _ZERO_IFA,
            lmt=lmt,
            eid=_digest(index, b"uid2").hex() if _uniform(index, b"eids") < 0.4 else None,
            consent_draw=_uniform(index, b"consent"),
            face=face,
            anonymous_draw=_uniform(index, name(b"anonymous")),
        )


@functools.cache
def population() -> Population:
    """The one shared audience (about 0.1 s to build)."""
    return Population()


def _stratified(
    mass: np.ndarray, shares: tuple[float, ...], rng: np.random.Generator
) -> np.ndarray:
    """A category per user whose mass-weighted shares match ``shares`` (see module doc)."""
    target = np.asarray(shares)
    out = rng.choice(len(target), size=len(mass), p=target)
    assigned = np.zeros(len(target))
    total = 0.0
    for i in range(min(_HEAD, len(mass))):
        total += mass[i]
        category = int(np.argmax(target * total - assigned))
        out[i] = category
        assigned[category] += mass[i]
    return out


def _households(country: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Household number per user: runs of 1-4 users of one country (by index)."""
    order = np.lexsort((np.arange(len(country)), country))
    sizes = rng.choice(_HOUSEHOLD_SIZES[0], size=len(country), p=_HOUSEHOLD_SIZES[1])
    runs = np.repeat(np.arange(len(country)), sizes)[: len(country)]
    household = np.empty(len(country), dtype=np.int64)
    household[order] = runs
    return household


_ZERO_IFA = "00000000-0000-0000-0000-000000000000"


def _digest(index: int, what: bytes) -> bytes:
    # Keyed by attribute name so attributes of one user are independent of each other.
    return hashlib.blake2b(index.to_bytes(4, "big"), digest_size=16, person=what).digest()


def _uniform(index: int, what: bytes) -> float:
    return int.from_bytes(_digest(index, what)[:6], "big") / float(1 << 48)


def _ifa(index: int, upper: bool, what: bytes = b"ifa") -> str:
    h = _digest(index, what).hex()
    ifa = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"
    return ifa.upper() if upper else ifa


def _ip(country: str, household: int) -> str:
    firsts = inv.IP_FIRST_OCTETS[country]
    b = hashlib.blake2b(household.to_bytes(8, "big"), digest_size=3, person=b"ip").digest()
    return f"{firsts[household % len(firsts)]}.{b[0]}.{b[1]}.{1 + b[2] % 254}"
