"""RAPL energy counters of the CPU packages (and their DRAM), read from the
Linux powercap interface: ``/sys/class/powercap/intel-rapl:<N>[:<M>]/energy_uj``.

Each zone's counter is a cumulative microjoule count that wraps to zero after
``max_energy_range_uj``; a wrap shows up as a value smaller than the previous
one and is undone by adding the range. That is only unambiguous when samples
are closer together than one wrap period (the range is ~262 kJ on common
Intel parts: 20+ minutes at 200 W), which a sampling interval of seconds is.

Package zones measure the whole socket, every process on it, not just the
run's. Since Linux 5.10 (CVE-2020-8694) ``energy_uj`` is readable by root
only on most distributions; the zone is then reported as unreadable rather
than silently skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")


@dataclass
class RaplZone:
    path: Path
    name: str  # "package-0", "dram", ...
    max_range_uj: int
    last_uj: int
    total_uj: int = 0  # microjoules since the first reading, wraps undone

    @property
    def device(self) -> str:
        return f"rapl:{self.path.name}"

    def read(self) -> float:
        """Joules consumed since the zone was first read."""
        now = int((self.path / "energy_uj").read_text())
        self.total_uj += unwrap_delta(self.last_uj, now, self.max_range_uj)
        self.last_uj = now
        return self.total_uj / 1e6


def unwrap_delta(previous: int, current: int, max_range: int) -> int:
    """Counter increase from ``previous`` to ``current``, across at most one wrap."""
    if current >= previous:
        return current - previous
    return current + max_range - previous


def discover(root: Path = POWERCAP) -> tuple[list[RaplZone], str]:
    """Readable package and DRAM zones, and a sentence saying what was found."""
    if not root.is_dir():
        return [], f"{root} absent (no RAPL driver in this kernel or container)"
    zones, unreadable = [], []
    # Top-level zones are packages (or psys, which contains them: skipped so
    # nothing is counted twice); their sub-zones core/uncore are part of the
    # package, while dram is not, so only dram sub-zones are added.
    for zone_dir in sorted(root.glob("intel-rapl:*")):
        try:
            name = (zone_dir / "name").read_text().strip()
        except OSError:
            continue
        top_level = zone_dir.name.count(":") == 1
        if not ((top_level and name.startswith("package")) or (not top_level and name == "dram")):
            continue
        try:
            first = int((zone_dir / "energy_uj").read_text())
            max_range = int((zone_dir / "max_energy_range_uj").read_text())
        except PermissionError:
            unreadable.append(zone_dir.name)
            continue
        except (OSError, ValueError):
            continue
        zones.append(RaplZone(zone_dir, name, max_range, first))
    if zones:
        return zones, f"RAPL: {', '.join(f'{z.path.name} ({z.name})' for z in zones)}"
    if unreadable:
        return [], f"RAPL zones {', '.join(unreadable)} exist but energy_uj is not readable (root only since Linux 5.10)"
    return [], f"no RAPL package zone under {root}"
