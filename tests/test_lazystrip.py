"""tui/lazystrip.py: a line drawn by the panel makes each of Textual's caches only when it first uses it, and
draws as Textual's own strips do."""

from __future__ import annotations

import pytest
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import Monochrome
from textual.strip import Strip

from tui import lazystrip

pytestmark = pytest.mark.unit

SEGMENTS = [
    Segment("hello ", Style(bold=True)),
    Segment("wide 界 world", Style(color="red")),
    Segment("!", Style(dim=True)),
]


def made(strip: Strip) -> set[str]:
    """The cache slots set on ``strip``, read through the slot itself (never ``__getattr__``, which makes one)."""
    out = set()
    for name in lazystrip.CACHES:
        try:
            Strip.__dict__[name].__get__(strip, Strip)
        except AttributeError:
            continue
        out.add(name)
    return out


def textual_strip() -> Strip:
    strip = Strip.__new__(Strip)
    lazystrip.TEXTUAL_INIT(strip, SEGMENTS)
    return strip


def drawn(result: Strip | list[Strip]) -> list:
    return [(list(s), s.cell_length) for s in (result if isinstance(result, list) else [result])]


def test_a_line_makes_a_cache_when_first_used_and_keeps_it():
    lazystrip.install()
    strip = Strip(SEGMENTS)
    assert made(strip) == set()
    cropped = strip.crop(2, 9)
    assert made(strip) == {"_crop_cache"} and strip.crop(2, 9) is cropped  # the second crop comes cached
    assert made(cropped) == set()
    with pytest.raises(AttributeError):
        strip.no_such_thing  # noqa: B018 (only the cache slots are made on demand)


def test_a_lazy_line_draws_as_textuals_own():
    lazystrip.install()
    ours, theirs = Strip(SEGMENTS), textual_strip()
    style = Style(italic=True)
    for op in (
        lambda s: s.crop(1, 12),
        lambda s: s.crop_extend(3, 30, style),
        lambda s: s.adjust_cell_length(30, style),
        lambda s: s.apply_style(style),
        lambda s: s.apply_filter(Monochrome(), Color(0, 0, 0)),
        lambda s: s.apply_offsets(2, 1),
        lambda s: s.divide([4, 10, 40]),
    ):
        for _ in range(2):  # made, then from the cache
            a, b = op(ours), op(theirs)
            assert drawn(a) == drawn(b)
    assert made(ours) == set(lazystrip.CACHES)
