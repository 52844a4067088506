"""One registry pattern for algorithms, datasets, models and partitions.

Every entry carries a one-line description (shown by ``fedbench list``) and a pydantic
model of its parameters, so a scenario's ``params`` block is validated before any training
with errors that name the YAML path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")


class NoParams(BaseModel):
    """Parameters of an entry that takes none."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """A registered object with its name, description and parameter schema."""

    name: str
    obj: T
    description: str
    params: type[BaseModel] = NoParams
    tags: frozenset[str] = frozenset()  # e.g. "offline": a dataset that needs no download


class UnknownNameError(KeyError):
    """Raised for a name that no entry of a registry carries."""

    def __init__(self, kind: str, name: str, known: list[str]):
        self.kind, self.name, self.known = kind, name, known
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(sorted(known))}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class Registry(Generic[T]):
    """Name → entry map filled by the :meth:`register` decorator."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self, name: str, description: str, params: type[BaseModel] = NoParams, tags: tuple[str, ...] = ()
    ) -> Callable[[T], T]:
        """Decorator adding ``obj`` under ``name`` (``tags``: plain labels such as ``offline``)."""

        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = Entry(name, obj, description, params, frozenset(tags))
            return obj

        return add

    def get(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, list(self._entries)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def names(self) -> list[str]:
        return sorted(self._entries)
