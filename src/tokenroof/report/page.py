"""The page: a small HTML template, plotly.js inlined once in the head, each figure a <div> that draws itself."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from tokenroof.report.figures import HEIGHT_PX

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1280px;
       padding: 0 24px 48px; color: #222; }
h1 { font-size: 1.6em; margin: 24px 0 4px; }
h2 { border-bottom: 2px solid #ddd; padding-bottom: 4px; margin-top: 36px; }
nav a { margin-right: 14px; } .subtitle { color: #666; margin: 0 0 12px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } table.wide { width: 100%; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; }
ul.flags { margin: 0; padding-left: 18px; } code { background: #f4f4f4; padding: 0 4px; border-radius: 3px; }
.note { color: #8a5a00; margin: 4px 0; } .bad { color: #b00020; font-weight: 600; } .ok { color: #1b7a1b; }
.figure { width: 100%; min-height: HEIGHTpx; break-inside: avoid; page-break-inside: avoid; }
@media print {
  body { max-width: none; padding: 0; font-size: 11px; }
  nav, .modebar-container { display: none !important; }
  section { break-inside: auto; } h2, h3 { break-after: avoid; page-break-after: avoid; }
  table, dl.facts { break-inside: avoid; page-break-inside: avoid; }
  .figure { width: 100% !important; }
  a { color: inherit; text-decoration: none; }
}
""".replace("HEIGHT", str(HEIGHT_PX))

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="data:,">
<style>{style}</style>
<script type="text/javascript">{plotly_js}</script>
<script>performance.mark("plotly-ready")</script>
</head><body>
<h1>{title}</h1>
<p class="subtitle">{subtitle}</p>
<nav>{nav}</nav>
{sections}
</body></html>
"""


def plotly_js() -> str:
    """plotly.js as the installed plotly package ships it (no network at build or view time)."""
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


@dataclass
class Page:
    """Sections in order; figures numbered as they are added."""

    title: str
    subtitle: str = ""
    sections: list[tuple[str, str, str]] = field(default_factory=list)  # (anchor, heading, html)
    figures: int = 0

    def figure(self, fig: Any) -> str:
        """One figure as a <div> plus the script that draws it (plotly.js itself is in the head)."""
        self.figures += 1
        body = fig.to_html(
            include_plotlyjs=False,
            full_html=False,
            div_id=f"figure-{self.figures}",
            default_width="100%",
            default_height=f"{HEIGHT_PX}px",
            config={"displaylogo": False, "responsive": True},
        )
        return f'<div class="figure">{body}</div>'

    def add(self, anchor: str, heading: str, body: str) -> None:
        if body:
            self.sections.append((anchor, heading, body))

    def render(self) -> str:
        nav = "".join(f'<a href="#{a}">{html.escape(h)}</a>' for a, h, _ in self.sections)
        sections = "\n".join(
            f'<section id="{a}"><h2>{html.escape(h)}</h2>\n{body}</section>' for a, h, body in self.sections
        )
        return TEMPLATE.format(
            title=html.escape(self.title),
            subtitle=html.escape(self.subtitle),
            style=STYLE,
            plotly_js=plotly_js(),
            nav=nav,
            sections=sections,
        )
