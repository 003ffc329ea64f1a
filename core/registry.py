"""Name -> class registries (decoders, strategies, tasks, metrics), with entry-point plugins."""
from __future__ import annotations

from importlib.metadata import entry_points
from typing import Callable, Generic, TypeVar

from atnat.core.errors import AtnatError

T = TypeVar("T")


class RegistryError(AtnatError):
    """Duplicate name, wrong base class, or unknown name."""


class Registry(Generic[T]):
    """A small registry of classes of one kind, keyed by a short name.

    `@REG.register("name")` adds a class; `REG.get("name")` returns it. Third-party packages add
    entries through the entry-point group `entry_point_group` (loaded lazily, once).
    """

    def __init__(self, kind: str, base: type, entry_point_group: str | None = None,
                 check: Callable[[type], str | None] | None = None):
        self.kind = kind
        self.check = check  # the kind's own contract: why a class cannot be one (None when it can)
        self.plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
        self.base = base
        self.entry_point_group = entry_point_group
        self._items: dict[str, type] = {}
        self._plugins_loaded = entry_point_group is None
        self.plugin_errors: dict[str, str] = {}  # entry-point name -> why it failed to load

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def add(cls: type[T]) -> type[T]:
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise RegistryError(
                    f"cannot register {cls!r} as {self.kind} {name!r}: "
                    f"it must be a subclass of {self.base.__name__}"
                )
            abstract = sorted(getattr(cls, "__abstractmethods__", ()))
            problem = (f"it does not define {', '.join(abstract)} (abstract in {self.base.__name__})" if abstract else
                       self.check(cls) if self.check else None)
            if problem:
                raise RegistryError(f"cannot register {cls.__module__}.{cls.__qualname__} as {self.kind} {name!r}: "
                                    f"{problem}")
            if name in self._items and self._items[name] is not cls:
                raise RegistryError(
                    f"{self.kind} {name!r} is already registered "
                    f"(by {self._items[name].__module__}.{self._items[name].__qualname__})"
                )
            self._items[name] = cls
            cls.registered_name = name  # type: ignore[attr-defined]
            return cls

        return add

    def unregister(self, name: str) -> None:
        """Remove an entry (tests and interactive sessions that re-define a class)."""
        self._items.pop(name, None)

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self.entry_point_group):
            try:
                ep.load()  # importing the module runs its @register decorators
            except Exception as err:  # noqa: BLE001  (a broken plugin must not hide the built-in entries)
                self.plugin_errors[ep.name] = (f"plugin {ep.name!r} of entry-point group {self.entry_point_group!r} "
                                               f"failed to load ({ep.value}): {type(err).__name__}: {err}")

    def get(self, name: str) -> type[T]:
        if name not in self._items:
            self._load_plugins()
        if name not in self._items:
            if name in self.plugin_errors:
                raise RegistryError(self.plugin_errors[name])
            broken = f" (plugins that failed to load: {', '.join(self.plugin_errors)})" if self.plugin_errors else ""
            raise RegistryError(
                f"unknown {self.kind} {name!r}; known {self.plural}: {', '.join(self.names()) or '(none)'}{broken}"
            )
        return self._items[name]

    def loaded(self) -> dict[str, type]:
        """The entries registered so far, without loading entry-point plugins (a check run while one registers)."""
        return dict(self._items)

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._items)

    def in_order(self) -> list[str]:
        """Names in registration order (built-ins first, then plugins)."""
        self._load_plugins()
        return list(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items or name in self.names()


def import_package_modules(package: str, path) -> list[str]:
    """Import every module of a package (its `__name__` and `__path__`), in name order: a built-in
    decoder or strategy registers itself when its module is imported, so a new file in
    models/decoders/ or decoding/ is found without an import line elsewhere. -> the names imported."""
    import importlib
    import pkgutil

    names = sorted(m.name for m in pkgutil.iter_modules(path)  # `beam copy.py`, an editor's copy: not a module
                   if not m.name.startswith("_") and m.name.isidentifier())
    for name in names:
        importlib.import_module(f"{package}.{name}")
    return names
