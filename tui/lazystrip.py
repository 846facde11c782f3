"""Textual's ``Strip`` (one rendered line) with its seven caches made when first used, not with every line.

Textual 8.2.8 gives each ``Strip`` seven ``FIFOCache`` objects in ``__init__`` (crop, style, filter, divide,
…), ~0.9 KB a line before anything is cached; most lines never use most of them. An idle Live tab keeps
~3,500 strips in the render caches of its widgets (every container caches its lines, and each line its
filtered and cropped forms), so the empty caches alone held ~3 MB. Here a cache slot stays unset until the
line first asks for it: ``__getattr__`` runs only for an unset slot, makes that cache with Textual's size and
keeps it. Textual's ``Content`` makes its cache the same way. tests/test_lazystrip.py fails if Textual's
strips change which caches they make or their sizes.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.segment import Segment
from textual.cache import FIFOCache
from textual.strip import Strip

# Each cache slot of Textual's Strip and its size, as Textual 8.2.8's Strip.__init__ makes them.
CACHES = {
    "_divide_cache": 4,
    "_crop_cache": 16,
    "_style_cache": 16,
    "_filter_cache": 4,
    "_line_length_cache": 4,
    "_crop_extend_cache": 4,
    "_offsets_cache": 4,
}
TEXTUAL_INIT = Strip.__init__


def _init(self: Strip, segments: Iterable[Segment], cell_length: int | None = None) -> None:
    self._segments = list(segments)
    self._cell_length = cell_length
    self._render_cache = None
    self._link_ids = None
    self._cell_count = None


def _cache(self: Strip, name: str) -> FIFOCache:
    size = CACHES.get(name)
    if size is None:
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    cache: FIFOCache = FIFOCache(size)
    setattr(self, name, cache)
    return cache


def install() -> None:
    """Make every ``Strip`` built from now on start without its caches (once; strips built before keep theirs)."""
    Strip.__init__ = _init  # type: ignore[method-assign]
    Strip.__getattr__ = _cache  # type: ignore[attr-defined]
