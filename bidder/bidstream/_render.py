"""An auction as one SSP sends it: ids, auction terms, OpenRTB 2.5 or 2.6 shape, schain.

Each function builds one object of the BidRequest. What differs between SSPs lives in
``inventory.Ssp``: its request-id style, where 2.5 puts schain, gdpr, consent,
us_privacy and eids (under ``ext``), auction type and tmax habits, and how it writes a
single banner size. Seller ids in schains are stable: a publisher's id at an SSP is
'<ssp short>-<publisher id>', a reseller's id at an SSP is '<ssp short>-reseller-<n>'.
"""

from __future__ import annotations

import functools
import hashlib
import random
import string
from typing import Any

import orjson

from bidder.bidstream import inventory as inv
from bidder.bidstream._draw import Auction, ImpSpec, uuid_like
from bidder.bidstream.privacy import consent_string, regs

_BASE62 = string.digits + string.ascii_letters
_FLOOR_JITTER = 0.5
"""Share of duplicate copies whose SSP applies its own floor to the publisher's."""


@functools.cache
def _native_request(feed: bool) -> str:
    # Native 1.2 request (a JSON string, as the spec says): title, main image, icon,
    # sponsor and description; in-feed content or in-app recommendation widget.
    assets: list[dict[str, Any]] = [
        {"id": 1, "required": 1, "title": {"len": 90}},
        {"id": 2, "required": 1, "img": {"type": 3, "wmin": 600, "hmin": 314}},
        {"id": 3, "required": 0, "img": {"type": 1, "w": 128, "h": 128}},
        {"id": 4, "required": 1, "data": {"type": 1, "len": 25}},
        {"id": 5, "required": 0, "data": {"type": 2, "len": 140}},
    ]
    context = (2, 20, 4) if feed else (1, 12, 1)
    native = {
        "ver": inv.NATIVE_VER,
        "context": context[0],
        "contextsubtype": context[1],
        "plcmttype": context[2],
        "plcmtcnt": 1,
        "assets": assets,
        "eventtrackers": [{"event": 1, "methods": [1, 2]}],
        "privacy": 1,
    }
    return orjson.dumps(native).decode()


def request_id(ssp: inv.Ssp, rng: random.Random, ts: int, seq: int) -> str:
    if ssp.id_style == "uuid":
        return uuid_like(rng)
    if ssp.id_style == "digits":
        return str(rng.getrandbits(62) | (1 << 61))
    if ssp.id_style == "base62":
        value = rng.getrandbits(128)
        return "".join(_BASE62[(value >> (6 * k)) % 62] for k in range(22))
    return f"dlt-{ts:x}-{seq:06d}"


def render(
    a: Auction, ssp: inv.Ssp, rng: random.Random, ts: int, seq: int, day_ds: int, *, own_floor: bool
) -> dict[str, Any]:
    """The BidRequest ``ssp`` sends for ``a``; ``own_floor`` lets it move the floors."""
    req_id = request_id(ssp, rng, ts, seq)
    currency = "EUR" if a.junk == "currency" else "USD"
    doc: dict[str, Any] = {
        "id": req_id,
        "imp": [_imp(a, spec, n, ssp, currency, rng, own_floor) for n, spec in enumerate(a.imps)],
        "device": device(a),
        "user": user(a, ssp, rng, day_ds),
        "at": 1 if rng.random() < ssp.first_price else 2,
        "tmax": rng.choice(ssp.tmax),
        "regs": regs(a, ssp.ortb, rng),
    }
    if a.channel == "site":
        doc["site"] = site(a)
    else:
        doc["app"] = app(a)
    cur = _currency(a, ssp, rng)
    if cur is not None:
        doc["cur"] = cur
    doc["source"] = source(a, ssp, req_id, rng)
    doc.update(_blocks(a.publisher_id))
    if a.test:
        doc["test"] = 1
    return doc


def site(a: Auction) -> dict[str, Any]:
    domain = f"{a.kind}-{a.number}.example"
    return {
        "id": f"s-{a.publisher_id}",
        "domain": domain,
        "page": f"https://{domain}/articles/{a.page}",
        "cat": [a.category],
        "publisher": {"id": a.publisher_id},
    }


def app(a: Auction) -> dict[str, Any]:
    if a.channel == "ctv":
        bundle, name = f"tv.example.channel{a.number}", f"Example Channel {a.number}"
    else:
        bundle, name = f"com.example.{a.kind}{a.number}", f"Example {a.kind.title()} {a.number}"
    return {
        "id": f"a-{a.publisher_id}",
        "bundle": bundle,
        "name": name,
        "cat": [a.category],
        "publisher": {"id": a.publisher_id},
    }


def device(a: Auction) -> dict[str, Any]:
    u, m = a.user, a.user.model
    doc: dict[str, Any] = {"ua": m.ua, "ip": u.ip, "os": m.os, "osv": m.osv}
    doc["language"] = inv.LANGUAGE[u.country]
    if a.channel == "ctv":
        doc["devicetype"] = 7 if m.make in ("Roku", "Amazon") else 3  # stick/box vs TV set
    else:
        doc["devicetype"] = inv.DEVICETYPE[u.device_class]
    if m.make:
        doc["make"] = m.make
    if m.model:
        doc["model"] = m.model
    if a.channel == "site":
        doc["js"] = 1
    else:
        doc["ifa"], doc["lmt"] = u.ifa, int(u.lmt)
    if a.country is not None:
        doc["geo"] = {"country": a.country, "type": 2}
    return doc


def user(a: Auction, ssp: inv.Ssp, rng: random.Random, day_ds: int) -> dict[str, Any]:
    u = a.user
    doc: dict[str, Any] = {"id": u.id}
    if u.buyeruid is not None:
        doc["buyeruid"] = u.buyeruid
    promoted: dict[str, Any] = {}  # fields 2.6 promoted out of user.ext
    consent = consent_string(a, day_ds, rng)
    if consent is not None:
        promoted["consent"] = consent
    if u.eid is not None:
        promoted["eids"] = [{"source": "uidapi.com", "uids": [{"id": u.eid, "atype": 3}]}]
    if promoted and ssp.ortb == "2.6":
        doc.update(promoted)
    elif promoted:
        doc["ext"] = promoted
    return doc


def source(a: Auction, ssp: inv.Ssp, req_id: str, rng: random.Random) -> dict[str, Any]:
    doc: dict[str, Any] = {"tid": a.tid}
    chain = schain(a.publisher_id, ssp, req_id, rng)
    if chain is not None and ssp.ortb == "2.6":
        doc["schain"] = chain
    elif chain is not None:
        doc["ext"] = {"schain": chain}
    return doc


def schain(pub: str, ssp: inv.Ssp, req_id: str, rng: random.Random) -> dict[str, Any] | None:
    """1-3 nodes from the publisher's first seller to ``ssp``; complete on ~90%.

    A controlled share does not verify against the bundled supply files (``_supply``):
    ``inv.SPOOFED_SELLER`` ends in a seller id the SSP does not list, and
    ``inv.UNAUTHORIZED_SELLER`` is sold through another publisher's direct account.
    """
    if rng.random() < ssp.no_schain:
        return None
    complete = 1 if rng.random() < 0.9 else 0
    fraud = rng.random()
    if fraud < inv.UNAUTHORIZED_SELLER:
        nodes = [_node(ssp.domain, f"{ssp.short}-{_other_direct_publisher(pub, ssp, rng)}")]
    else:
        nodes = seller_path(pub, ssp)
    if inv.UNAUTHORIZED_SELLER <= fraud < inv.UNAUTHORIZED_SELLER + inv.SPOOFED_SELLER:
        nodes[-1] = _node(ssp.domain, f"{ssp.short}-{rng.randrange(10**6, 10**7)}")
    nodes[-1]["rid"] = req_id
    return {"ver": "1.0", "complete": complete, "nodes": nodes}


def seller_path(pub: str, ssp: inv.Ssp) -> list[dict[str, Any]]:
    """The honest chain from ``pub``'s first seller to ``ssp`` (without ``rid``)."""
    nodes: list[dict[str, Any]] = []
    seller_id = pub
    for reseller in resellers(pub, ssp.name):
        nodes.append(_node(f"reseller-{reseller}.example", f"r{reseller}-{seller_id}"))
        seller_id = f"reseller-{reseller}"
    nodes.append(_node(ssp.domain, f"{ssp.short}-{seller_id}"))
    return nodes


def _node(asi: str, sid: str) -> dict[str, Any]:
    return {"asi": asi, "sid": sid, "hp": 1}


def _other_direct_publisher(pub: str, ssp: inv.Ssp, rng: random.Random) -> str:
    """A publisher other than ``pub`` that sells to ``ssp`` directly (a known account)."""
    while True:
        other = f"pub-news-{rng.randint(1, 120)}"
        if other != pub and not resellers(other, ssp.name):
            return other


@functools.cache
def resellers(pub: str, ssp_name: str) -> tuple[int, ...]:
    """The stable reseller path from a publisher to an SSP: none 60%, one 30%, two 10%."""
    h = stable_hash(f"{pub}|{ssp_name}")
    hops = 0 if h % 10 < 6 else 1 if h % 10 < 9 else 2
    first = 1 + (h >> 8) % inv.RESELLERS
    second = 1 + (first + (h >> 16) % (inv.RESELLERS - 1)) % inv.RESELLERS
    return (first, second)[:hops]


@functools.cache
def _blocks(pub: str) -> dict[str, list[str]]:
    """bcat/badv: a fifth of publishers block a few categories and rival advertisers."""
    h = stable_hash(f"{pub}|blocks")
    if h % 100 >= inv.BLOCKING_PUBLISHERS * 100:
        return {}
    rng = random.Random(h)
    bcat = sorted(rng.sample(inv.BCAT, rng.randint(1, 4)))
    rivals = rng.sample(range(1, inv.RIVAL_ADVERTISERS + 1), rng.randint(1, 3))
    return {"bcat": bcat, "badv": [f"rival-{n}.example" for n in sorted(rivals)]}


def stable_hash(text: str) -> int:
    # Not hash(): str hashing is salted per process, and streams must be reproducible.
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def _currency(a: Auction, ssp: inv.Ssp, rng: random.Random) -> list[str] | None:
    if a.junk == "currency":
        return ["EUR"]
    if ssp.name == "ssp-delta" and rng.random() < 0.3:
        return None  # delta leaves cur out (USD by default): ~3% of all requests
    return ["USD"]


def _imp(
    a: Auction,
    spec: ImpSpec,
    n: int,
    ssp: inv.Ssp,
    currency: str,
    rng: random.Random,
    own_floor: bool,
) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": str(n + 1), "tagid": f"{a.publisher_id}-slot{n + 1}", "secure": 1}
    floor = spec.floor
    if own_floor and floor > 0 and rng.random() < _FLOOR_JITTER:
        floor = round(floor * rng.uniform(0.9, 1.25), 2)
    if floor > 0 or ssp.ortb == "2.6":  # 2.6 SSPs state a zero floor, 2.5 ones omit it
        doc["bidfloor"], doc["bidfloorcur"] = floor, currency
    if spec.instl:
        doc["instl"] = 1
    if spec.media == "banner":
        doc["banner"] = _banner(spec.sizes, ssp)
    elif spec.media == "video":
        doc["video"] = _video(a, spec, ssp)
    else:
        doc["native"] = {"request": _native_request(a.channel == "site"), "ver": inv.NATIVE_VER}
    return doc


def _banner(sizes: inv.Placement, ssp: inv.Ssp) -> dict[str, Any]:
    if len(sizes) == 1 and not ssp.banner_format:
        return {"w": sizes[0][0], "h": sizes[0][1]}
    return {"format": [{"w": w, "h": h} for w, h in sizes]}


def _video(a: Auction, spec: ImpSpec, ssp: inv.Ssp) -> dict[str, Any]:
    (w, h) = spec.sizes[0]
    doc: dict[str, Any] = {
        "mimes": inv.VIDEO_MIMES,
        "minduration": 5,
        "maxduration": spec.maxduration,
        "protocols": inv.VIDEO_PROTOCOLS,
        "w": w,
        "h": h,
        "linearity": 1,
        "startdelay": 0,
    }
    # 2.6 replaced video.placement with plcmt: 1 instream, 3 interstitial, 4 standalone.
    if ssp.ortb == "2.6":
        doc["plcmt"] = 1 if a.channel == "ctv" else 3 if spec.instl else 4
    else:
        doc["placement"] = 1 if a.channel == "ctv" else 5 if spec.instl else 3
    return doc


def without_ids(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as an anonymous face sends it: no user id, buyeruid, eids or advertising
    id; the IP, consent and everything else stay."""
    user = doc.get("user", {})
    for name in ("id", "buyeruid", "eids"):
        user.pop(name, None)
    user.get("ext", {}).pop("eids", None)
    device = doc.get("device", {})
    if "ifa" in device:
        device.pop("ifa")
        device["lmt"] = 1
    return doc
