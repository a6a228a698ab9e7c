"""ads.txt and app-ads.txt (IAB Tech Lab 1.1): a tolerant parser, a writer, the lookup.

A publisher lists, one per line, the advertising systems allowed to sell its inventory:
``<ad system domain>, <publisher's account id there>, DIRECT|RESELLER[, <cert id>]``.
``#`` starts a comment; a ``;`` after the fields starts extension data (kept, unused).
A line ``NAME=value`` is a variable: CONTACT, SUBDOMAIN, INVENTORYPARTNERDOMAIN,
OWNERDOMAIN, MANAGERDOMAIN (names are case-insensitive; unknown names are kept too).
app-ads.txt has the same syntax; it lives on the app developer's site.

``parse_ads_txt`` never raises and reports each line it skipped, with the reason:
fewer than three fields, a first field that is not a domain, an empty account id, a
relationship other than DIRECT/RESELLER, a malformed variable. Tolerated: a UTF-8
BOM, CRLF or CR line ends, tabs and stray spaces, trailing commas, lower-case
relationships. Domains are lower case; account ids keep their case (exchanges' ids
are case-sensitive). A record is kept once (the first of repeats, but DIRECT wins
over RESELLER for the same account). The IAB placeholder line
(``placeholder.example.com, placeholder, DIRECT, placeholder``: "no authorized
sellers") is an ordinary record that authorizes nobody real.

``write_ads_txt`` writes the normal form, so parse(write(x)) == x.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

RELATIONSHIPS = ("DIRECT", "RESELLER")
VARIABLES = ("CONTACT", "SUBDOMAIN", "INVENTORYPARTNERDOMAIN", "OWNERDOMAIN", "MANAGERDOMAIN")
_DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+")
_VARIABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class AdsRecord:
    domain: str
    """The advertising system's domain, lower case (the schain node's ``asi``)."""
    account_id: str
    """The publisher's (or the reseller's) account there (the node's ``sid``)."""
    relationship: str
    """'DIRECT' or 'RESELLER'."""
    cert_id: str | None = None
    extension: str | None = None


@dataclass(frozen=True, slots=True)
class AdsTxt:
    records: tuple[AdsRecord, ...] = ()
    variables: tuple[tuple[str, str], ...] = ()
    """(NAME upper case, value) in file order."""
    skipped: tuple[str, ...] = field(default=(), compare=False)
    """'line N: reason' for each line dropped (not part of the content)."""
    authorized: dict[tuple[str, str], str] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    """(domain, account id) -> relationship: the O(1) lookup for the bid path."""
    systems: dict[str, str] = field(default_factory=dict, init=False, compare=False, repr=False)
    """Advertising system domain -> 'DIRECT' when it has a DIRECT record, else 'RESELLER'."""

    def __post_init__(self) -> None:
        for record in self.records:
            key = (record.domain, record.account_id)
            if self.authorized.get(key) != "DIRECT":
                self.authorized[key] = record.relationship
            if self.systems.get(record.domain) != "DIRECT":
                self.systems[record.domain] = record.relationship

    def relationship(self, domain: str, account_id: str) -> str | None:
        """'DIRECT', 'RESELLER' or None (not authorized)."""
        return self.authorized.get((domain, account_id))

    def variable(self, name: str) -> tuple[str, ...]:
        return tuple(value for key, value in self.variables if key == name.upper())


def parse_ads_txt(text: str | bytes) -> AdsTxt:
    """Every usable record and variable; never raises (see ``skipped``)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    records: list[AdsRecord] = []
    seen: dict[tuple[str, str], int] = {}
    variables: list[tuple[str, str]] = []
    skipped: list[str] = []
    for number, raw in enumerate(_LINE_END.split(text.removeprefix("\ufeff")), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        item = _line(line)
        if isinstance(item, str):
            skipped.append(f"line {number}: {item}")
        elif isinstance(item, AdsRecord):
            _add(records, seen, item)
        else:
            variables.append(item)
    return AdsTxt(records=tuple(records), variables=tuple(variables), skipped=tuple(skipped))


def _add(records: list[AdsRecord], seen: dict[tuple[str, str], int], record: AdsRecord) -> None:
    key = (record.domain, record.account_id)
    at = seen.get(key)
    if at is None:
        seen[key] = len(records)
        records.append(record)
    elif record.relationship == "DIRECT" and records[at].relationship != "DIRECT":
        records[at] = record


def _line(line: str) -> AdsRecord | tuple[str, str] | str:
    """A record, a variable, or the reason the line is skipped."""
    head, eq, value = line.partition("=")
    if eq and "," not in head:
        return _variable(head.strip(), value.strip())
    data, semi, extension = line.partition(";")
    fields = [f.strip() for f in data.split(",")]
    while fields and not fields[-1]:
        fields.pop()  # trailing commas
    if len(fields) < 3:
        return "fewer than three fields"
    domain, account_id, relationship = fields[0].lower(), fields[1], fields[2].upper()
    if not _DOMAIN.fullmatch(domain):
        return f"{fields[0]!r} is not a domain"
    if not account_id or any(c.isspace() for c in account_id):
        return "bad account id"
    if relationship not in RELATIONSHIPS:
        return f"relationship {fields[2]!r} is not DIRECT or RESELLER"
    cert = fields[3] if len(fields) > 3 and fields[3] else None
    ext = extension.strip() if semi and extension.strip() else None
    return AdsRecord(domain, account_id, relationship, cert, ext)


def _variable(name: str, value: str) -> tuple[str, str] | str:
    if not _VARIABLE_NAME.fullmatch(name):
        return f"{name!r} is not a variable name"
    if not value:
        return f"variable {name} has no value"
    return (name.upper(), value)


def write_ads_txt(ads: AdsTxt) -> str:
    """The file in normal form: variables first, then one record per line."""
    lines = [f"{name}={value}" for name, value in ads.variables]
    for r in ads.records:
        line = f"{r.domain}, {r.account_id}, {r.relationship}"
        if r.cert_id is not None:
            line += f", {r.cert_id}"
        elif r.extension is not None:
            line += ","  # an empty cert field keeps the extension after the fourth
        if r.extension is not None:
            line += f";{r.extension}"
        lines.append(line)
    return "".join(f"{line}\n" for line in lines)
