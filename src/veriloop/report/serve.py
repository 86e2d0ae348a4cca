"""``veriloop report --serve RUN_DIR``: the run browser of a long run, its records read on demand.

The page is the one ``veriloop report`` writes, without records inlined; the page asks this server for them:

* ``GET /api/records?step=&problem=&group=&reward_min=&reward_max=&outcome=&truncated=&tools=&limit=&offset=``:
  ``{"total": n, "rows": [...]}`` from ``rollouts/index.sqlite`` (rollout/index.py), never the step files;
* ``GET /api/record?id=STEP:I``: one record with its tokens and token values (its step file, read then);
* ``GET /api/marks`` / ``POST /api/marks`` ``{"id", "mark": {"mark": fine|suspicious, "note"} | null}``: the
  spot-check marks, saved to ``spot_check.json`` in the run directory at once.

It binds to 127.0.0.1 only (a run's prompts and completions are not for the network); port 0 picks a free one.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from veriloop.errors import InputError
from veriloop.io import atomic_write_json
from veriloop.report.data import MARKS, MARKS_FILE, RunRecords, config_of, page_data, read_marks
from veriloop.report.page import render
from veriloop.rollout.index import NAMES

LIST_LIMIT = 500
PAGE_FRESH_S = 10.0  # a page made this recently is served again as it is


def _int(q: dict, name: str, default: int) -> int:
    try:
        return int(q.get(name, default))
    except ValueError:
        raise InputError(f"query parameter {name!r} must be an integer, got {q[name]!r}") from None


def record_query(q: dict) -> tuple[str, list]:
    """The WHERE clause and parameters of a filter (the page's names; unknown ones are refused)."""
    known = {"step", "problem", "group", "reward_min", "reward_max", "outcome", "truncated", "tools", "limit", "offset"}
    unknown = sorted(set(q) - known)
    if unknown:
        raise InputError(f"unknown filter {unknown[0]!r} (known: {', '.join(sorted(known))})")
    where, args = [], []
    if "step" in q:
        lo, _, hi = str(q["step"]).partition("-")
        try:
            lo_i, hi_i = int(lo), int(hi or lo)
        except ValueError:
            raise InputError(f"step filter must be N or A-B, got {q['step']!r}") from None
        where.append("step BETWEEN ? AND ?")
        args += [lo_i, hi_i]
    if "problem" in q:
        where.append("instr(problem_id, ?) > 0")
        args.append(q["problem"])
    for name, column in (("group", "group_id"), ("outcome", "outcome")):
        if name in q:
            where.append(f"{column} = ?")
            args.append(q[name])
    for name, op in (("reward_min", ">="), ("reward_max", "<=")):
        if name in q:
            try:
                args.append(float(q[name]))
            except ValueError:
                raise InputError(f"{name} must be a number, got {q[name]!r}") from None
            where.append(f"reward {op} ?")
    truncated = {"yes": "finish_reason = 'length'", "no": "finish_reason != 'length'"}
    tools = {"with": "tool_calls > 0", "without": "tool_calls = 0", "failed": "failed_tool_calls > 0"}
    for name, options in (("truncated", truncated), ("tools", tools)):
        if name in q:
            if q[name] not in options:
                raise InputError(f"{name} must be one of {sorted(options)}, got {q[name]!r}")
            where.append(options[q[name]])
    return (" WHERE " + " AND ".join(where)) if where else "", args


class RunServer:
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        if not self.run_dir.is_dir():
            raise InputError(f"run directory {str(self.run_dir)!r} does not exist")
        self.records = RunRecords(self.run_dir, config_of(self.run_dir)[1])
        self.lock = threading.Lock()
        self._page: tuple[float, str] = (0.0, "")
        self.page_lock = threading.Lock()
        # a run without an index (or one that lacks steps) is caught up now, in the background
        self.db = self.records.index.connect()
        self.catching_up = threading.Thread(target=self._prepare, daemon=True)
        self.catching_up.start()

    def _prepare(self) -> None:
        self.records.index.catch_up(self.records.store)
        self.page()  # made while the browser starts: the first request finds it ready
        self.records.text  # noqa: B018  (the tokenizer loads now, not at the first record asked for)

    def page(self) -> str:
        """The page, made again when the one at hand is older than ``PAGE_FRESH_S`` (a run still going)."""
        with self.page_lock:  # one maker at a time: a request during the first one waits for it
            return self._fresh_page()

    def _fresh_page(self) -> str:
        made, page = self._page
        if time.time() - made > PAGE_FRESH_S:
            data = page_data(self.run_dir, served=True)
            with self.lock:
                outcomes = self.db.execute("SELECT DISTINCT outcome FROM records ORDER BY outcome").fetchall()
            data["outcomes"] = [o for (o,) in outcomes]
            made, page = time.time(), render(data, data["title"])
            self._page = made, page
        return page

    def find(self, q: dict) -> dict:
        where, args = record_query(q)
        limit, offset = min(_int(q, "limit", 100), LIST_LIMIT), _int(q, "offset", 0)
        with self.lock:
            total = self.db.execute(f"SELECT COUNT(*) FROM records{where}", args).fetchone()[0]
            rows = self.db.execute(
                f"SELECT {', '.join(NAMES)} FROM records{where} ORDER BY step, i LIMIT ? OFFSET ?",
                [*args, limit, offset],
            ).fetchall()
        out = [dict(zip(NAMES, r)) for r in rows]
        for r in out:
            r["id"] = f"{r['step']}:{r['i']}"
        return {"total": total, "rows": out}

    def record(self, rid: str) -> dict:
        try:
            step, i = (int(x) for x in rid.split(":"))
        except ValueError:
            raise InputError(f"record id must be STEP:I, got {rid!r}") from None
        if not self.records.store.path(step).is_file():
            raise InputError(f"no record {rid!r} in {self.run_dir} (no step {step})")
        with self.lock:
            views = self.records.views(step, [i])
        if not views:
            raise InputError(f"no record {rid!r} in {self.run_dir}")
        return views[0]

    def mark(self, body: dict) -> dict:
        rid, mark = body.get("id"), body.get("mark")
        if not isinstance(rid, str) or not (mark is None or (isinstance(mark, dict) and mark.get("mark") in MARKS)):
            raise InputError(
                "a mark is {'id': 'STEP:I', 'mark': {'mark': 'fine'|'suspicious', 'note': ''} | null}, "
                f"got {body!r}"
            )
        with self.lock:
            marks = read_marks(self.run_dir)["marks"]
            if mark is None:
                marks.pop(rid, None)
            else:
                marks[rid] = {"mark": mark["mark"], "note": str(mark.get("note", ""))}
            atomic_write_json(self.run_dir / MARKS_FILE, {"marks": marks})
        return {"marks": marks}

    def handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: the page's requests are not the user's business
                pass

            def _send(self, code: int, body: bytes, kind: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def _json(self, fn) -> None:
                try:
                    self._send(200, json.dumps(fn()).encode(), "application/json")
                except InputError as e:
                    self._send(400, str(e).encode(), "text/plain; charset=utf-8")

            def do_GET(self):
                url = urlparse(self.path)
                q = {k: v[-1] for k, v in parse_qs(url.query).items()}
                if url.path in ("/", "/index.html"):
                    self._send(200, server.page().encode(), "text/html; charset=utf-8")
                elif url.path == "/api/records":
                    self._json(lambda: server.find(q))
                elif url.path == "/api/record":
                    self._json(lambda: server.record(q.get("id", "")))
                elif url.path == "/api/marks":
                    self._json(lambda: read_marks(server.run_dir))
                else:
                    self._send(404, b"not found", "text/plain")

            def do_POST(self):
                if urlparse(self.path).path != "/api/marks":
                    return self._send(404, b"not found", "text/plain")
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError as e:
                    return self._send(400, f"not JSON: {e}".encode(), "text/plain")
                self._json(lambda: server.mark(body if isinstance(body, dict) else {}))

        return Handler


def start_server(run_dir: str | Path, port: int = 0) -> tuple[ThreadingHTTPServer, RunServer]:
    """A server for ``run_dir`` on 127.0.0.1 (``port`` 0: a free one), serving in a daemon thread."""
    run = RunServer(run_dir)
    httpd = ThreadingHTTPServer(("127.0.0.1", port), run.handler())
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True, name="veriloop-report").start()
    return httpd, run
