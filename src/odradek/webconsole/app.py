"""The web console's pages and JSON endpoints (Starlette, Jinja2 templates).

How it works: every page handler runs the blocking cluster calls of
:class:`~odradek.webconsole.cluster.ClusterClient` in Starlette's thread pool and renders a
Jinja2 template with autoescaping on, so record keys, values, headers, topic and group names
are always HTML-escaped. Forms post and redirect back (post/redirect/get) with a message
in the query string. The live parts (message tail, lag chart, metrics charts) poll small
JSON endpoints from the page's script, which writes text with ``textContent`` only; the
charts use Chart.js, served from the package's static directory (no CDN). The app's
lifespan closes the cluster client it made (its librdkafka log polling thread) on shutdown.

Who may use it (login, the Host and Origin checks, CSRF tokens, read-only mode) is
:mod:`odradek.webconsole.guard`: its middleware runs before every route, and every
state-changing route is wrapped here by ``state_changing`` (read-only refusal, CSRF token).
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from odradek.text import plural
from odradek.webconsole.cluster import ClusterClient, ConsoleError, parse_time, render_bytes
from odradek.webconsole.guard import Guard, GuardMiddleware, local_path
from odradek.webconsole.metrics import MetricsReader

HERE = Path(__file__).resolve().parent
#: Records one page of the message browser shows at most.
MAX_RECORDS = 500
FORMATS = ("text", "json", "hex")
Handler = Callable[[Request], Awaitable[Response]]


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(["html"], default=True))
    env.filters["urlpart"] = lambda s: quote(str(s), safe="")
    env.filters["when"] = record_time
    return env


def record_time(timestamp_ms: int) -> str:
    """A record's timestamp as a UTC date to the millisecond (-1, none, as "-")."""
    if timestamp_ms < 0:
        return "-"
    try:
        when = datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(timestamp_ms)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{timestamp_ms % 1000:03d} UTC"


def create_app(bootstrap: str, metrics_urls: list[str] | None = None,
               client: ClusterClient | None = None, *, guard: Guard) -> Starlette:
    """The console's app; ``guard`` says who may use it (there is no unguarded default)."""
    cluster = client or ClusterClient(bootstrap)
    metrics = MetricsReader(list(metrics_urls or []))
    env = _env()

    def page(name: str, request: Request, status: int = 200, **ctx: Any) -> HTMLResponse:
        sid = guard.session_of(request)
        html = env.get_template(name).render(
            bootstrap=bootstrap, message=request.query_params.get("msg"),
            error=request.query_params.get("err"), has_metrics=bool(metrics.urls),
            signed_in=sid is not None, login=guard.login_required, csrf=guard.csrf_for(sid),
            read_only=guard.read_only, **ctx)
        return HTMLResponse(html, status_code=status)

    def state_changing(handler: Handler, *, in_read_only: bool = False) -> Handler:
        """``handler`` behind the read-only refusal and the CSRF token check."""
        async def guarded(request: Request) -> Response:
            if guard.read_only and not in_read_only:
                return page("error.html", request, 403,
                            failure="refused: the console is read-only (--read-only)")
            form = await request.form()
            if not guard.csrf_ok(guard.session_of(request), str(form.get("csrf_token", ""))):
                return page("error.html", request, 403,
                            failure="refused: the form's CSRF token is missing or wrong "
                                    "(reload the page and try again)")
            return await handler(request)
        return guarded

    async def login_page(request: Request) -> Response:
        target = local_path(request.query_params.get("next", "/"))
        if guard.session_of(request) is not None:
            return RedirectResponse(target, status_code=303)
        return page("login.html", request, target=target)

    async def login(request: Request) -> Response:
        form = await request.form()
        target = local_path(str(form.get("next", "/")))
        if not guard.login_required:
            return RedirectResponse(target, status_code=303)
        if not guard.password_matches(str(form.get("password", ""))):
            await guard.refuse_login()
            return page("login.html", request, 401, target=target, failure="wrong password")
        response = RedirectResponse(target, status_code=303)
        guard.set_cookie(request, response, guard.open_session())
        return response

    async def logout(request: Request) -> Response:
        guard.close_session(guard.session_of(request))
        response = RedirectResponse("/login" if guard.login_required else "/", status_code=303)
        guard.clear_cookie(request, response)
        return response

    def back(path: str, **params: str) -> RedirectResponse:
        return RedirectResponse(f"{path}?{urlencode(params)}" if params else path,
                                status_code=303)

    async def overview(request: Request) -> Response:
        ov = await run_in_threadpool(cluster.overview)
        return page("overview.html", request, ov=ov)

    async def topics(request: Request) -> Response:
        ov = await run_in_threadpool(cluster.overview)
        show_internal = request.query_params.get("internal") == "1"
        shown = [t for t in ov.topics if show_internal or not t.internal]
        return page("topics.html", request, ov=ov, topics=shown, show_internal=show_internal)

    async def create_topic(request: Request) -> Response:
        form = await request.form()
        name = str(form.get("name", "")).strip()
        try:
            partitions = int(str(form.get("partitions", "1")))
            rf = int(str(form.get("replication_factor", "1")))
            configs = _parse_configs(str(form.get("configs", "")))
            await run_in_threadpool(cluster.create_topic, name, partitions, rf, configs)
        except (ConsoleError, ValueError) as exc:
            return back("/topics", err=str(exc))
        return back(f"/topics/{quote(name, safe='')}", msg=f"created topic {name}")

    async def topic(request: Request) -> Response:
        name = request.path_params["name"]
        t = await run_in_threadpool(cluster.topic, name)
        configs = await run_in_threadpool(cluster.configs, name)
        return page("topic.html", request, t=t, configs=configs)

    async def topic_partitions(request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        try:
            await run_in_threadpool(cluster.add_partitions, name, int(str(form.get("count"))))
        except (ConsoleError, ValueError) as exc:
            return back(f"/topics/{quote(name, safe='')}", err=str(exc))
        return back(f"/topics/{quote(name, safe='')}", msg="partitions added")

    async def topic_config(request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        key = str(form.get("key", "")).strip()
        value = None if form.get("reset") else str(form.get("value", ""))
        try:
            await run_in_threadpool(cluster.alter_config, name, key, value)
        except ConsoleError as exc:
            return back(f"/topics/{quote(name, safe='')}", err=str(exc))
        return back(f"/topics/{quote(name, safe='')}", msg=f"{key} updated")

    async def topic_delete(request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        if str(form.get("confirm", "")) != name:
            return back(f"/topics/{quote(name, safe='')}",
                        err="type the topic's name to confirm its deletion")
        try:
            await run_in_threadpool(cluster.delete_topic, name)
        except ConsoleError as exc:
            return back(f"/topics/{quote(name, safe='')}", err=str(exc))
        return back("/topics", msg=f"deleted topic {name}")

    async def messages(request: Request) -> Response:
        name = request.path_params["name"]
        q = request.query_params
        fmt = q.get("format", "text") if q.get("format") in FORMATS else "text"
        t = await run_in_threadpool(cluster.topic, name, False)
        try:
            partition = int(q.get("partition", "0"))
            limit = min(max(int(q.get("limit", "50")), 1), MAX_RECORDS)
            if partition not in {p.id for p in t.partitions}:
                raise ConsoleError(f"{name} has no partition {partition}")
            earliest, latest = await run_in_threadpool(
                cluster.log_range, name, partition)
            if q.get("timestamp"):
                offset = await run_in_threadpool(cluster.offset_for_time, name, partition,
                                                 parse_time(q["timestamp"]))
            elif q.get("offset", "") != "":
                offset = int(q["offset"])
            else:
                offset = max(earliest, latest - limit)
            records = await run_in_threadpool(cluster.read, name, partition, offset, limit)
        except (ConsoleError, ValueError) as exc:
            return page("messages.html", request, 400, t=t, records=[], fmt=fmt, partition=0,
                        offset=0, limit=50, timestamp="", failure=str(exc), render=render_bytes,
                        log_range=None)
        return page("messages.html", request, t=t, records=records, fmt=fmt,
                    partition=partition, offset=offset, limit=limit,
                    log_range=(earliest, latest),
                    timestamp=q.get("timestamp", ""), failure=None, render=render_bytes)

    async def api_messages(request: Request) -> Response:
        name = request.path_params["name"]
        q = request.query_params
        fmt = q.get("format", "text") if q.get("format") in FORMATS else "text"
        try:
            partition, offset = int(q["partition"]), int(q["offset"])
            limit = min(max(int(q.get("limit", "100")), 1), MAX_RECORDS)
            records = await run_in_threadpool(cluster.read, name, partition, offset, limit)
        except (ConsoleError, ValueError, KeyError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse({"records": [
            {"partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
             "key": render_bytes(r.key, fmt), "value": render_bytes(r.value, fmt),
             "headers": [[k, render_bytes(v, fmt)] for k, v in r.headers]}
            for r in records]})

    async def groups(request: Request) -> Response:
        listing = await run_in_threadpool(cluster.groups)
        return page("groups.html", request, groups=listing)

    async def group(request: Request) -> Response:
        detail = await run_in_threadpool(cluster.group, request.path_params["group"])
        return page("group.html", request, g=detail)

    async def group_reset(request: Request) -> Response:
        group_id = request.path_params["group"]
        form = await request.form()
        try:
            plan = await run_in_threadpool(cluster.reset_offsets, group_id,
                                           str(form.get("how", "")), str(form.get("value", "")))
        except ConsoleError as exc:
            return back(f"/groups/{quote(group_id, safe='')}", err=str(exc))
        return back(f"/groups/{quote(group_id, safe='')}",
                    msg=f"committed new offsets for {plural(len(plan), 'partition')}")

    async def api_lag(request: Request) -> Response:
        group_id = request.path_params["group"]
        try:
            detail = await run_in_threadpool(cluster.group, group_id)
        except ConsoleError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse({"total": detail.total_lag, "state": detail.state,
                             "history": cluster.lag_history.get(group_id)})

    async def metrics_page(request: Request) -> Response:
        return page("metrics.html", request, urls=metrics.urls)

    async def api_metrics(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(metrics.scrape))

    async def on_console_error(request: Request, exc: Exception) -> Response:
        return page("error.html", request, 400, failure=str(exc))

    routes = [
        Route("/login", login_page),
        Route("/login", login, methods=["POST"]),
        Route("/logout", state_changing(logout, in_read_only=True), methods=["POST"]),
        Route("/", overview),
        Route("/topics", topics),
        Route("/topics", state_changing(create_topic), methods=["POST"]),
        Route("/topics/{name}", topic),
        Route("/topics/{name}/partitions", state_changing(topic_partitions), methods=["POST"]),
        Route("/topics/{name}/config", state_changing(topic_config), methods=["POST"]),
        Route("/topics/{name}/delete", state_changing(topic_delete), methods=["POST"]),
        Route("/topics/{name}/messages", messages),
        Route("/api/topics/{name}/messages", api_messages),
        Route("/groups", groups),
        Route("/groups/{group}", group),
        Route("/groups/{group}/reset", state_changing(group_reset), methods=["POST"]),
        Route("/api/groups/{group}/lag", api_lag),
        Route("/metrics", metrics_page),
        Route("/api/metrics", api_metrics),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if client is None:  # a client handed in belongs to the caller
                cluster.close()

    return Starlette(routes=routes, exception_handlers={ConsoleError: on_console_error},
                     middleware=[Middleware(GuardMiddleware, guard=guard)], lifespan=lifespan)


def _parse_configs(text: str) -> dict[str, str]:
    """``key=value`` pairs, one a line or comma-separated."""
    out: dict[str, str] = {}
    for item in text.replace(",", "\n").splitlines():
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConsoleError(f"a config is key=value, not {item.strip()!r}")
        out[key.strip()] = value.strip()
    return out
