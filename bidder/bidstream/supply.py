"""The bundled supply files: sellers.json, ads.txt and app-ads.txt for the generator's world.

Written from the same stable seller paths ``_render`` puts in schains, so an honest
chain verifies and the generator's controlled share of bad chains does not. The files
are written in the layout ``bidder.supply.files`` reads (``sellers/``, ``ads.txt/``,
``app-ads.txt/``); ``fixtures/openrtb/supply/`` holds them, made by::

    .venv/bin/python -m bidder.bidstream.supply fixtures/openrtb/supply

What they say (docs/bidstream.md, "Supply files"):

* each SSP's sellers.json lists, as PUBLISHER, every publisher that sells to it
  directly (``<short>-<publisher id>``) and, as INTERMEDIARY, every reseller
  (``<short>-reseller-<m>``); each reseller's lists the publishers whose path starts
  with it and the other resellers;
* a publisher's ads.txt (site, by domain) or app-ads.txt (app, by bundle) lists, for
  every SSP, the first node of its path as DIRECT and the later ones as RESELLER;
  ``inv.NO_ADS_TXT`` of publishers (stable) have none.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from bidder.bidstream import inventory as inv
from bidder.bidstream._render import seller_path, stable_hash
from bidder.supply.ads_txt import AdsRecord, AdsTxt, write_ads_txt
from bidder.supply.sellers_json import Seller, SellersJson, write_sellers_json


def publishers() -> Iterator[tuple[str, str, str]]:
    """(publisher id, 'site' or 'app', site domain or app bundle) of every publisher."""
    for kind, count, _ in inv.SITE_KINDS:
        for n in range(1, count + 1):
            yield f"pub-{kind}-{n}", "site", f"{kind}-{n}.example"
    for kind, count, _ in inv.APP_KINDS:
        for n in range(1, count + 1):
            yield f"pub-app-{kind}-{n}", "app", f"com.example.{kind}{n}"
    for n in range(1, inv.CTV_CHANNELS + 1):
        yield f"pub-tv-{n}", "app", f"tv.example.channel{n}"


def has_ads_txt(pub: str) -> bool:
    return stable_hash(f"{pub}|ads.txt") % 1000 >= inv.NO_ADS_TXT * 1000


def path(pub: str, ssp: inv.Ssp) -> list[tuple[str, str]]:
    """(asi, sid) of each node from ``pub`` to ``ssp``: the honest schain."""
    return [(node["asi"], node["sid"]) for node in seller_path(pub, ssp)]


def sellers_files() -> dict[str, SellersJson]:
    """By advertising system domain."""
    listed: dict[str, dict[str, Seller]] = {ssp.domain: {} for ssp in inv.SSPS}
    listed.update({f"reseller-{r}.example": {} for r in range(1, inv.RESELLERS + 1)})
    for pub, _, _ in publishers():
        for ssp in inv.SSPS:
            asi, sid = path(pub, ssp)[0]
            listed[asi][sid] = Seller(sid, "PUBLISHER", f"Publisher {pub}", f"{pub}.example")
    for asi, sellers in listed.items():
        for r in range(1, inv.RESELLERS + 1):
            if asi != f"reseller-{r}.example":
                sid = f"{_short(asi)}-reseller-{r}"
                name, domain = f"Reseller {r}", f"reseller-{r}.example"
                sellers[sid] = Seller(sid, "INTERMEDIARY", name, domain)
    return {
        asi: SellersJson(
            sellers=dict(sorted(sellers.items())),
            version="1.0",
            contact_email=f"sellers@{asi}",
        )
        for asi, sellers in listed.items()
    }


def _short(asi: str) -> str:
    """The seller-id prefix an advertising system uses: 'alpha', 'r7'."""
    name = asi.removesuffix(".example")
    return name.removeprefix("ssp-") if name.startswith("ssp-") else "r" + name.split("-")[1]


def ads_file(pub: str) -> AdsTxt:
    records: dict[tuple[str, str], AdsRecord] = {}
    for ssp in inv.SSPS:
        for position, (asi, sid) in enumerate(path(pub, ssp)):
            relationship = "DIRECT" if position == 0 else "RESELLER"
            records.setdefault((asi, sid), AdsRecord(asi, sid, relationship))
    ordered = sorted(records.values(), key=lambda r: (r.relationship, r.domain, r.account_id))
    variables = (("OWNERDOMAIN", f"{pub}.example"), ("CONTACT", f"adops@{pub}.example"))
    return AdsTxt(records=tuple(ordered), variables=variables)


def write_supply_files(root: Path) -> int:
    """Write every file under ``root``; returns how many."""
    written = 0
    for asi, sellers in sellers_files().items():
        written += _write(root / "sellers" / f"{asi}.json", write_sellers_json(sellers))
    for pub, channel, name in publishers():
        if has_ads_txt(pub):
            folder = "ads.txt" if channel == "site" else "app-ads.txt"
            text = f"# {folder} for {name} (bidsim generator world)\n" + write_ads_txt(
                ads_file(pub)
            )
            written += _write(root / folder / f"{name}.txt", text)
    return written


def _write(path: Path, text: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m bidder.bidstream.supply OUT_DIR")
    print(f"wrote {write_supply_files(Path(sys.argv[1]))} files under {sys.argv[1]}")
