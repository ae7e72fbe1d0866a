"""Each room answers only to its installed name, `airlock.<room>` (docs/layout.md says why).

The rooms live at the top of the repository and `airlock/<room>` links to each. With the
repository root on `sys.path`, `import server` would find `server/` too and run its files
a second time as other module objects (a second `Services` class that `isinstance` does
not know, second copies of module-level caches). Every room's `__init__` calls
`only_as_airlock` before anything else, so such an import fails at once, naming the fix.
"""

from __future__ import annotations


def only_as_airlock(name: str) -> None:
    """Refuse the import of a room's package under any name but `airlock.<room>`."""
    if name.partition(".")[0] != "airlock":
        raise ImportError(
            f"{name!r} is Airlock's room 'airlock.{name}' and must not be imported under "
            f"another name (its files would load twice); import 'airlock.{name}' from the "
            "installed package (`pip install -e .`) instead of putting the repository root "
            "on sys.path",
            name=name,
        )
