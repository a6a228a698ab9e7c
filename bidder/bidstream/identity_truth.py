"""The generator's ground truth as an identity graph: every user key a person's faces
can reach the bidder under, joined into one cluster per person.

The keys are those ``bidder.decide.identity`` forms from the requests the generator
renders: ``b:<buyeruid>`` when the face is synced (it always wins), else ``i:<ifa>``
(apps and CTV, unless ad tracking is limited), ``e:uidapi.com:<eid>`` (logged-in
people) and ``x:<ssp>:<user.id>`` for every SSP.
"""

from __future__ import annotations

from collections.abc import Iterator

from bidder.bidstream import inventory as inv
from bidder.bidstream.population import Population, User, population
from bidder.decide.identity_graph import IdentityGraph, build_graph

_EID_SOURCE = "uidapi.com"


def face_keys(user: User) -> Iterator[str]:
    """Every user key the bidder can form for requests from this face."""
    if user.buyeruid is not None:
        yield "b:" + user.buyeruid
        return
    if not user.lmt and user.device_class != "desktop":
        yield "i:" + user.ifa.lower()
    if user.eid is not None:
        yield f"e:{_EID_SOURCE}:{user.eid}"
    for ssp in inv.SSPS:
        yield f"x:{ssp.name}:{user.id}"


def person_keys(index: int, pop: Population | None = None) -> list[str]:
    pop = pop or population()
    return [key for face in range(pop.faces(index)) for key in face_keys(pop.user(index, face))]


def truth_graph(people: int, version: int = 1) -> IdentityGraph:
    """The graph of the ``people`` most active people of the audience (confidence 1)."""
    pop = population()
    return build_graph(version, (person_keys(i, pop) for i in range(people)))
