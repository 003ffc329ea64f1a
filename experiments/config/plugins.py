"""Plugins: packages that add decoders, strategies, metrics or tasks to atnat, found two ways.

- Installed packages declare entry points in the groups `atnat.decoders`, `atnat.strategies`,
  `atnat.metrics`, `atnat.tasks` (each registry loads its group the first time a name is missing).
- Any importable module can be named: `plugins: [my_package.half_mask]` in a run or grid file, or
  `--plugins my_package.half_mask` on any command. Importing it runs its `@register_...` decorators.
  Named modules are passed on to the processes a run starts (grid workers, cluster jobs) through the
  environment variable ATNAT_PLUGINS.

`installed_plugins()` names both kinds with their distributions' versions, for environment.json
and the report's "to reproduce" line.
"""
from __future__ import annotations

import importlib
import os
import sys
from importlib.metadata import PackageNotFoundError, entry_points, packages_distributions, version

from atnat.core.errors import AtnatError

GROUPS = ("atnat.decoders", "atnat.strategies", "atnat.metrics", "atnat.tasks")
ENV = "ATNAT_PLUGINS"  # comma-separated module names, inherited by the processes a run starts


class PluginError(AtnatError):
    """A named plugin module that cannot be imported."""


def load_plugins(modules, where: str = "--plugins") -> list[str]:
    """Import each named module (registering what it defines) and add it to ATNAT_PLUGINS, so that
    worker processes import it too; one PluginError naming `where` and the module otherwise."""
    names = [m.strip() for item in (modules or ()) for m in str(item).split(",") if m.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - any failure to import a plugin is the plugin's
            missing = isinstance(err, ModuleNotFoundError) and err.name is not None and \
                (name == err.name or name.startswith(err.name + "."))  # the plugin itself, not what it imports
            hint = "is it installed, or on PYTHONPATH?" if missing else "the module was found, and failed while importing"
            raise PluginError(f"{where}: cannot import plugin {name!r} ({type(err).__name__}: {err}); {hint}") from err
    known = [m for m in os.environ.get(ENV, "").split(",") if m]
    os.environ[ENV] = ",".join(dict.fromkeys(known + names))
    return names


def named_plugins() -> list[str]:
    """The plugin modules this process was given by name (--plugins, a config's plugins:, ATNAT_PLUGINS)."""
    return [m for m in os.environ.get(ENV, "").split(",") if m]


def load_env_plugins() -> list[str]:
    """The modules a parent process named (ATNAT_PLUGINS), imported here."""
    return load_plugins(os.environ.get(ENV, "").split(","), f"${ENV}")


def _distribution(module: str) -> tuple[str, str]:
    """(distribution, version) that installs a module, ("", "") when none does (a loose file)."""
    top = module.split(".")[0]
    for dist in packages_distributions().get(top, []):
        try:
            return dist, version(dist)
        except PackageNotFoundError:
            continue
    return "", ""


def installed_plugins() -> list[dict]:
    """Every plugin this process can see: entry points of atnat's groups and modules named by
    ATNAT_PLUGINS, each with its distribution and version."""
    found: dict[tuple[str, str], dict] = {}
    for group in GROUPS:
        for ep in entry_points(group=group):
            dist = getattr(ep, "dist", None)
            found[(group, ep.name)] = {"plugin": ep.name, "group": group, "module": ep.value,
                                       "distribution": dist.name if dist else "",
                                       "version": dist.version if dist else ""}
    for module in (m for m in os.environ.get(ENV, "").split(",") if m):
        dist, ver = _distribution(module)
        path = getattr(sys.modules.get(module), "__file__", "") or ""
        found[("module", module)] = {"plugin": module, "group": "module", "module": module, "distribution": dist,
                                     "version": ver, **({} if dist else {"file": path})}
    return list(found.values())


def describe_plugins(plugins: list[dict]) -> str:
    """`pkg 0.1.0 (half-mask, length-ratio)`, one entry per distribution (a loose module by name)."""
    by_dist: dict[str, list[str]] = {}
    for p in plugins:
        key = f"{p['distribution']} {p['version']}".strip() if p.get("distribution") else p["module"]
        by_dist.setdefault(key, []).append(p["plugin"])
    return "; ".join(f"{dist} ({', '.join(dict.fromkeys(names))})" for dist, names in by_dist.items())
