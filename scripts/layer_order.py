"""The layer order of src/wagate as the import-linter contracts in pyproject.toml declare it, for the
instruments in this folder (send_walk.py, import_drawing.py).

A module's place is the row of its top-level package in the first contract and, inside a package with
a layers contract of its own (the domains, dispatch, outbox, whatsapp, dashboard), the row of its
module there. Rows count from 1 at the top. A module is above another when its top-level row is
higher; in the same package, when its row inside the package is higher. Packages in one row are
siblings: they may import each other when the row joins them with ':', not when it joins them with '|'.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src"


class Direction(Enum):
    DOWN = "down"
    SAME = "same"  # the same package and row, or siblings of a ':' row: allowed
    ACROSS = "across"  # siblings of a '|' row: forbidden
    UP = "up"


@dataclass(frozen=True)
class Row:
    names: tuple[str, ...]
    independent: bool  # joined by '|'


@dataclass(frozen=True)
class Place:
    module: str
    package: str  # the top-level package under wagate, e.g. "messages"
    top: int  # 1-based row in the first contract
    sub: int | None  # 1-based row in the package's own contract, if it has one and lists the module
    part: str | None  # the name the package's contract knows the module by ("service", "repository")

    @property
    def row(self) -> str:
        return f"L{self.top}" + (f".{self.sub}" if self.sub is not None else "")

    @property
    def label(self) -> str:
        return f"{self.row} {self.package}" + (f":{self.part}" if self.sub is not None else "")


def _row(text: str) -> Row:
    independent = "|" in text
    parts = text.split("|" if independent else ":")
    return Row(tuple(p.strip().strip("()").removeprefix("wagate.") for p in parts), independent)


@dataclass(frozen=True)
class LayerOrder:
    top: tuple[Row, ...]
    inner: dict[str, tuple[Row, ...]]  # a package's own rows

    @classmethod
    def from_pyproject(cls, path: Path = ROOT / "pyproject.toml") -> LayerOrder:
        contracts: list[dict[str, Any]] = tomllib.loads(path.read_text())["tool"]["importlinter"]["contracts"]
        layered = [c for c in contracts if c["type"] == "layers"]
        top = tuple(_row(text) for text in layered[0]["layers"])
        inner: dict[str, tuple[Row, ...]] = {}
        for contract in layered[1:]:
            for container in contract.get("containers", []):
                inner[container.removeprefix("wagate.")] = tuple(_row(text) for text in contract["layers"])
        return cls(top, inner)

    def top_row(self, package: str) -> tuple[int, Row] | None:
        return next(((i, r) for i, r in enumerate(self.top, 1) if package in r.names), None)

    def place(self, module: str) -> Place | None:
        """None for what no contract orders (the simulator, migrations, `wagate` itself)."""
        parts = module.split(".")
        if len(parts) < 2 or parts[0] != "wagate" or (found := self.top_row(parts[1])) is None:
            return None
        top, _ = found
        part = parts[2] if len(parts) > 2 else None
        rows = self.inner.get(parts[1], ())
        sub = next((i for i, r in enumerate(rows, 1) if part in r.names), None)
        return Place(module, parts[1], top, sub, part if sub is not None else None)

    def direction(self, source: Place, target: Place) -> Direction:
        """Where `target` lies seen from `source` (an import or a call from source to target)."""
        if source.top != target.top:
            return Direction.DOWN if target.top > source.top else Direction.UP
        if source.package != target.package:
            found = self.top_row(source.package)
            return Direction.ACROSS if found and found[1].independent else Direction.SAME
        if source.sub is None or target.sub is None or source.module == target.module:
            return Direction.SAME
        if source.sub != target.sub:
            return Direction.DOWN if target.sub > source.sub else Direction.UP
        row = self.inner[source.package][source.sub - 1]
        return Direction.ACROSS if row.independent and source.part != target.part else Direction.SAME


def module_of(path: str | Path) -> str:
    """`wagate.messages.service` for .../src/wagate/messages/service.py (a package for its __init__)."""
    relative = Path(path).resolve().relative_to(SOURCE).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)
