"""Comparing two certificates: what differs in identity, installed stack and proof."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.cert.document import Certificate

# --- comparing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One difference between two certificates."""

    section: str  # identity, installed or proof
    item: str  # e.g. "gpu 00000000:18:00.0", "disk S1A2BN01D00", "packages"
    key: str
    a: Any
    b: Any

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {
            "section": self.section,
            "item": self.item,
            "key": self.key,
            "a": self.a,
            "b": self.b,
        }


def _diff_fields(
    section: str, item: str, left: Mapping[str, Any], right: Mapping[str, Any]
) -> list[Difference]:
    return [
        Difference(section, item, key, left.get(key), right.get(key))
        for key in sorted(set(left) | set(right))
        if left.get(key) != right.get(key)
    ]


Records = Sequence[Mapping[str, Any]]


def _diff_records(section: str, label: str, key: str, a: Records, b: Records) -> list[Difference]:
    """Two lists of records compared as multisets of whole records.

    Records present on both sides (as often on each) are the same. Of the rest, a record
    whose ``key`` (a PCI slot, a serial) is set and found once on each side is one item that
    changed, shown field by field; any other record (no key, as cloud disks have no serial,
    or a key found more than once) is shown whole, as only in ``a`` or only in ``b``.
    """
    only_b = [dict(r) for r in b]
    only_a = []
    for record in map(dict, a):
        if record in only_b:
            only_b.remove(record)
        else:
            only_a.append(record)

    def keys(records: list[dict[str, Any]]) -> list[Any]:
        return [r.get(key) for r in records]

    out = []
    for record in only_a:
        value = record.get(key)
        item = f"{label} {value if value is not None else '(no ' + key + ')'}"
        if value is not None and keys(only_a).count(value) == 1 and keys(only_b).count(value) == 1:
            other = only_b.pop(keys(only_b).index(value))
            out += _diff_fields(section, item, record, other)
        else:
            out.append(Difference(section, item, "record", record, None))
    for record in only_b:
        value = record.get(key)
        item = f"{label} {value if value is not None else '(no ' + key + ')'}"
        out.append(Difference(section, item, "record", None, record))
    return out


def compare(a: Certificate, b: Certificate) -> list[Difference]:
    """What differs between two certificates: GPUs, disks, NICs and checks compared as
    multisets of whole records (a changed one matched by PCI slot, serial or name, so a
    swapped board shows as its serial and UUID), then what is installed and what was proven."""
    da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
    ia, ib = da["identity"], db["identity"]
    diffs: list[Difference] = []
    if ia["hostname"] != ib["hostname"]:
        diffs.append(Difference("identity", "node", "hostname", ia["hostname"], ib["hostname"]))
    diffs += _diff_fields("identity", "system", ia["system"], ib["system"])
    diffs += _diff_records("identity", "gpu", "pci_bus_id", ia["gpus"], ib["gpus"])
    diffs += _diff_records("identity", "disk", "serial", ia["disks"], ib["disks"])
    diffs += _diff_records("identity", "nic", "name", ia["nics"], ib["nics"])
    pa, pb = da["installed"].pop("packages"), db["installed"].pop("packages")
    diffs += _diff_fields("installed", "stack", da["installed"], db["installed"])
    diffs += _diff_fields("installed", "packages", pa, pb)
    checks_a, checks_b = da["proof"].pop("checks"), db["proof"].pop("checks")
    diffs += _diff_fields("proof", "run", da["proof"], db["proof"])
    diffs += _diff_records("proof", "check", "name", checks_a, checks_b)
    return diffs
