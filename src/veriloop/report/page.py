"""The run browser's page: one HTML file holding its data, its script and the plotting library.

Self-contained (it opens from ``file://`` with no network): the charts are Plotly's, whose JavaScript bundle
comes with the ``plotly`` package from PyPI and is copied into the page; ``app.js`` and ``app.css`` beside this
file are the browser's own.  The same page, with ``served`` set in its data, is what ``veriloop report --serve``
sends: it then asks the local server for records instead of carrying them.
"""

from __future__ import annotations

import html
import json
from functools import cache
from importlib import resources


@cache
def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _asset(name: str) -> str:
    return resources.files("veriloop.report").joinpath(name).read_text(encoding="utf-8")


def _script_json(data) -> str:
    # inside <script>, "</" would end the element: JSON allows "\/" for "/"
    return json.dumps(data, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")


def render(data: dict, title: str) -> str:
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)} - veriloop</title>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<style>{_asset('app.css')}</style>"
        f"<script>{plotly_js()}</script>"
        "</head><body><div id='app'></div>"
        f"<script type='application/json' id='run-data'>{_script_json(data)}</script>"
        f"<script>{_asset('app.js')}</script></body></html>"
    )
