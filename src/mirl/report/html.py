"""A self-contained HTML page: inline CSS, images as base64 PNG data URIs, no script, no external resource.

Every piece of text that reaches the page goes through :func:`esc` (``html.escape`` with quotes), because run
names, config values and above all model output are untrusted. ``Section.body`` is the only raw-HTML slot and
is filled only by functions of this package that escape what they insert.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0 auto; max-width: 1180px;
       padding: 0 1.2rem 3rem; color: #1d1d1f; line-height: 1.45; }
h1 { margin-bottom: 0.2rem; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; margin-top: 2.2rem; }
nav a { margin-right: 0.9rem; font-size: 0.9rem; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f4f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 0.8rem 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85rem; color: #555; }
.missing { background: #fff4e5; border-left: 4px solid #f0a020; padding: 0.35rem 0.7rem; margin: 0.4rem 0; }
.banner { background: #e8f1ff; border-left: 4px solid #3b7ddd; padding: 0.5rem 0.8rem; }
.intro { color: #444; }
.episode { border: 1px solid #ddd; border-radius: 6px; padding: 0.5rem 0.8rem; margin: 1rem 0; }
.episode h4 { margin: 0.2rem 0 0.5rem; } .turn { border-top: 1px dashed #ccc; padding: 0.4rem 0; }
pre { white-space: pre-wrap; word-break: break-word; background: #f7f7f9; padding: 0.4rem 0.6rem;
      margin: 0.3rem 0; font-size: 0.82rem; }
.obs { display: flex; flex-wrap: wrap; gap: 0.6rem; align-items: flex-start; } .obs pre { flex: 1 1 18rem; }
.boards img { image-rendering: pixelated; border: 1px solid #ccc; margin: 0.3rem 0.3rem 0 0; }
.think { background: #eef6ff; border-left: 3px solid #3b7ddd; }
.answer { background: #eafbea; border-left: 3px solid #2e9e44; font-weight: 600; }
.label { font-size: 0.78rem; color: #666; text-transform: uppercase; letter-spacing: 0.04em; }
.ok { color: #2e7d32; } .bad { color: #c62828; }
.strip { display: flex; flex-wrap: wrap; gap: 0.45rem; align-items: stretch; margin: 0.5rem 0; }
.strip .health { font-size: 1.25rem; font-weight: 700; padding: 0.4rem 0.9rem; border-radius: 6px; color: #fff;
                 background: #6b7280; text-transform: uppercase; flex: 0 0 auto; }
.strip .health .state { font-size: 0.78rem; font-weight: 400; text-transform: none; }
.strip .health.healthy { background: #2e7d32; } .strip .health.check { background: #b26a00; }
.strip .health.unhealthy { background: #c62828; }
.card { border: 1px solid #ddd; border-left-width: 4px; border-radius: 6px; padding: 0.3rem 0.6rem;
        flex: 1 1 13rem; background: #fafafb; } .card.wide { flex: 2 1 26rem; }
.card.ok { border-left-color: #2e7d32; } .card.warn { border-left-color: #f0a020; }
.card.bad { border-left-color: #c62828; } .card.plain { border-left-color: #9aa0a6; }
.card .label { font-size: 0.72rem; color: #666; text-transform: uppercase; letter-spacing: 0.04em; }
.card .value { font-weight: 600; } .card .detail { font-size: 0.78rem; color: #555; line-height: 1.3; }
#sec-verdict h2, #sec-key h2 { margin-top: 0.8rem; }
ul.warnings { background: #fff4e5; border-left: 4px solid #f0a020; padding: 0.35rem 0.7rem 0.35rem 2rem;
              margin: 0.4rem 0; }
ul.notes { background: #f4f4f6; border-left: 4px solid #9aa0a6; padding: 0.3rem 0.7rem 0.3rem 2rem; margin: 0.4rem 0;
           font-size: 0.85rem; color: #444; }
details summary { cursor: pointer; color: #3b7ddd; }
"""


def esc(value: object) -> str:
    """HTML-escaped text of any value.

    >>> esc('<think>a & "b"</think>')
    '&lt;think&gt;a &amp; &quot;b&quot;&lt;/think&gt;'
    """
    return html.escape(str(value), quote=True)


@dataclass(frozen=True)
class Image:
    """A PNG shown inline and also written beside the HTML as ``<name>.png``."""

    name: str
    png: bytes
    caption: str


@dataclass(frozen=True)
class Section:
    """One titled part of a report; ``missing`` notes are shown as visible warnings."""

    id: str
    title: str
    intro: str = ""
    images: tuple[Image, ...] = ()
    missing: tuple[str, ...] = ()
    body: str = ""  # trusted HTML built by this package (every inserted value escaped)


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def table(header: Sequence[str], rows: Iterable[Sequence[object]], numeric: Sequence[bool] = ()) -> str:
    """An escaped HTML table; columns flagged in ``numeric`` are right-aligned."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{esc(v)}</td>' if i < len(numeric) and numeric[i] else f"<td>{esc(v)}</td>"
            for i, v in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _section(section: Section) -> str:
    parts = [f'<section id="{esc(section.id)}">', f"<h2>{esc(section.title)}</h2>"]
    if section.intro:
        parts.append(f'<p class="intro">{esc(section.intro)}</p>')
    parts += [f'<p class="missing">Missing: {esc(note)}</p>' for note in section.missing]
    for image in section.images:
        parts.append(
            f'<figure><img src="{data_uri(image.png)}" alt="{esc(image.caption)}" data-file="{esc(image.name)}.png">'
            f"<figcaption>{esc(image.caption)}</figcaption></figure>"
        )
    parts += [section.body, "</section>"]
    return "\n".join(part for part in parts if part)


def render_page(title: str, subtitle: str, sections: Sequence[Section], banner: str = "") -> str:
    """The whole page: title, optional banner, a table of contents, then the sections in order."""
    toc = " ".join(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>' for s in sections)
    head = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>{esc(title)}</title><style>{STYLE}</style></head>'
    )
    top = [f"<body><h1>{esc(title)}</h1>", f'<p class="intro">{esc(subtitle)}</p>']
    if banner:
        top.append(f'<p class="banner">{esc(banner)}</p>')
    top.append(f"<nav>{toc}</nav>")
    return head + "\n".join(top + [_section(s) for s in sections]) + "\n</body></html>\n"
