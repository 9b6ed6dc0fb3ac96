"""Extension points: one `Registry` per kind of thing graphformer lets you add.

An `Entry` says what one choice is without importing it (no torch, no DGL), so that the command
line lists, checks and explains the choices before anything heavy loads:

    name           what users write (``--attention-backend padded``, ``window:8``, ``--task copy``)
    summary        one line for ``--help`` and the docs' tables
    capabilities   words from the registry's own vocabulary (``classifies``, ``trains-cuda``...)
    details        what else the registry's readers need (a pattern's arguments, ...)
    target         ``"module:attribute"``, imported on first use, or the object itself

A registry is a mapping from name to the loaded object (``PATTERNS["window"]`` is the function
`graphformer.graphs.patterns.window`), so code that runs a choice reads it like a dict. The
package's own entries are registered in `graphformer.catalog`; a plugin registers its own the
same way (``docs/howto/extend.md``), and the command line imports plugins named by ``--plugin
MODULE`` or installed under the entry-point group ``graphformer.plugins`` (`load_plugins`).

This module imports nothing of graphformer but its errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any

from graphformer.errors import UserError

ENTRY_POINT_GROUP = "graphformer.plugins"


@dataclass(frozen=True)
class Entry:
    """One choice of an extension point (see the module's docstring)."""

    name: str
    summary: str
    target: Any  # "module:attribute", or the object itself
    capabilities: frozenset = frozenset()
    details: dict = field(default_factory=dict)

    def can(self, capability: str) -> bool:
        return capability in self.capabilities

    def load(self):
        """The object ``target`` names (imported now if it is a ``"module:attribute"`` path)."""
        if not isinstance(self.target, str):
            return self.target
        module, _, attribute = self.target.partition(":")
        return getattr(import_module(module), attribute)


class Names:
    """The names of a registry's entries that have a capability (all of them for None), read
    afresh on every use: a plugin registered later is in them. Works as ``choices``."""

    def __init__(self, registry: Registry, capability: str | None = None, ordered: bool = False):
        self.registry, self.capability, self.ordered = registry, capability, ordered

    def _names(self) -> list[str]:
        names = [e.name for e in self.registry.entries() if self.capability is None or e.can(self.capability)]
        return sorted(names) if self.ordered else names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name) -> bool:
        return name in self._names()

    def __len__(self) -> int:
        return len(self._names())

    def __getitem__(self, index):
        return self._names()[index]

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def __repr__(self) -> str:
        return repr(tuple(self))


class Details(Mapping):
    """Name -> ``details[key]`` of the entries of a registry that have ``key``, read afresh on every use."""

    def __init__(self, registry: Registry, key: str):
        self.registry, self.key = registry, key

    def _items(self) -> dict:
        return {e.name: e.details[self.key] for e in self.registry.entries() if self.key in e.details}

    def __getitem__(self, name: str):
        return self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())


class Registry(MutableMapping):
    """The entries of one extension point, by name, in the order they were registered.

    ``registry[name]`` is the loaded object, kept once loaded; setting ``registry[name] = obj``
    replaces the object of an existing entry (tests swap a backend this way); `register` adds one.
    An entry is never removed (``del`` is a TypeError): re-register it with ``replace=True``.

    What the registry's readers rely on is checked when an entry is registered: ``requires``
    (capability -> the details an entry with it must give, e.g. ``{"derived": ("serves", "fails")}``)
    and ``one_of`` (capabilities of which each entry has exactly one, e.g. ``("derived", "given")``).
    """

    def __init__(
        self, what: str, capabilities: dict[str, str], requires: dict[str, tuple] | None = None, one_of: tuple = ()
    ):
        self.what = what  # "attention backend": how errors name one entry
        self.capabilities = capabilities  # the vocabulary: word -> what it means
        self.requires, self.one_of = requires or {}, one_of
        self._entries: dict[str, Entry] = {}
        self._loaded: dict[str, Any] = {}

    def register(self, name: str, summary: str, target, capabilities=(), replace: bool = False, **details) -> Entry:
        """Add the entry ``name`` (see `Entry`); a name taken already is a UserError unless ``replace``,
        and so is an entry that breaks the registry's vocabulary, ``requires`` or ``one_of``."""
        if not name or any(c.isspace() or c in "+:," for c in name):
            raise UserError(f"{self.what} name {name!r} must be non-empty, without spaces, '+', ':' or ','")
        if name in self._entries and not replace:
            raise UserError(f"{self.what} {name!r} is registered already; pick another name (or pass replace=True)")
        self._check_capabilities(name, capabilities, details)
        entry = Entry(name, summary, target, frozenset(capabilities), details)
        self._entries[name] = entry
        self._loaded.pop(name, None)
        return entry

    def _check_capabilities(self, name: str, capabilities: Iterable[str], details: dict) -> None:
        """A UserError for a capability outside the vocabulary, a missing ``one_of`` or a missing detail."""
        capabilities = set(capabilities)
        unknown = sorted(capabilities - set(self.capabilities))
        if unknown:
            raise UserError(
                f"{self.what} {name!r}: unknown capability {unknown[0]!r}; known: {', '.join(self.capabilities)}"
            )
        if self.one_of and len(capabilities & set(self.one_of)) != 1:
            raise UserError(
                f"{self.what} {name!r} must have exactly one of the capabilities {', '.join(self.one_of)}; "
                f"it has {', '.join(sorted(capabilities & set(self.one_of))) or 'none'}"
            )
        for capability in sorted(capabilities & set(self.requires)):
            missing = [key for key in self.requires[capability] if key not in details]
            if missing:
                raise UserError(
                    f"{self.what} {name!r} is {capability!r} but gives no {', '.join(missing)}; pass "
                    f"{', '.join(f'{key}=...' for key in missing)} to register (see docs/howto/extend.md)"
                )

    def entry(self, name: str) -> Entry:
        if name not in self._entries:
            raise KeyError(name)
        return self._entries[name]

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def names(self, capability: str | None = None, ordered: bool = False) -> Names:
        """The entries' names (those with ``capability``), live: see `Names`."""
        return Names(self, capability, ordered)

    def detail(self, key: str) -> Details:
        """Each entry's ``details[key]``, by name, for the entries that have one (live: see `Details`)."""
        return Details(self, key)

    def __getitem__(self, name: str):
        if name not in self._loaded:
            self._loaded[name] = self.entry(name).load()
        return self._loaded[name]

    def __setitem__(self, name: str, obj) -> None:
        self.entry(name)  # only an existing entry's object may be swapped
        self._loaded[name] = obj

    def __delitem__(self, name: str) -> None:
        # MutableMapping's pop, popitem and clear go through here: none of them may seem to work.
        raise TypeError(f"{self.what} entries cannot be removed; use register(..., replace=True)")

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name) -> bool:
        return name in self._entries


def load_plugins(modules=(), installed: bool = False, source: str = "--plugin") -> list[str]:
    """Import each plugin module of ``modules`` (and, with ``installed``, every one installed under
    the entry-point group ``graphformer.plugins``): importing one registers its entries. Returns
    the modules named; one that fails to import is a one-line UserError that names where it was
    named (``source``: ``--plugin``, or a run's or a file's ``plugins``)."""
    named = [m for m in modules if m]
    for module in named:
        try:
            import_module(module)
        except Exception as err:  # noqa: BLE001 - any failure of a user's module is reported in one line
            why = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            raise UserError(
                f"{source} {module}: cannot import it ({why}); give an importable module (on PYTHONPATH) "
                "that registers graphformer extensions"
            ) from None
    if installed:
        for point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                point.load()
            except Exception as err:  # noqa: BLE001
                raise UserError(
                    f"plugin {point.name} ({point.value}, entry point {ENTRY_POINT_GROUP}) fails to load "
                    f"({type(err).__name__}); fix or uninstall its package"
                ) from None
    return named
