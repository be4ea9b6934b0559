"""The console's routes: each reads its query parameters, asks ``views`` on a reader
catalog inside the viewer's scope, and renders a template with the security headers."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from ...definitions.names import TOOLKIT_NAME_RE
from ...definitions.printable import escape
from ...errors import CatalogDamagedError, ToolcatError
from ...search.modes import SEARCH_MODES
from ..tokens import Principal
from . import views
from .auth import COOKIE, SESSION_SECONDS, Sessions
from .source import HEADERS, HERE, PATH, Source

ADMIN_ACTIONS = ("deprecate", "activate", "reindex")
DONE = {  # fixed messages after an admin action: nothing from the request is echoed
    "deprecate": "Version deprecated.",
    "activate": "Version activated.",
    "reindex": "Reindexed.",
}
MAX_FORM_BYTES = 16 * 1024


def build(source: Source) -> Any:
    import jinja2
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
    env.filters["printable"] = lambda text: escape(text, 300, spaces=True)
    env.filters["query"] = lambda params: urlencode(
        [(k, v) for k, v in params if v not in (None, "")]
    )
    sessions: Sessions = source.sessions

    def secured(response: Response) -> Response:
        for key, value in HEADERS.items():
            response.headers[key] = value
        return response

    def page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        viewer: Principal | None = getattr(request.state, "viewer", None)
        cookie = request.cookies.get(COOKIE)
        html = env.get_template(template).render(
            base=PATH,
            viewer=viewer,
            csrf=sessions.csrf(cookie) if viewer is not None and viewer.admin else "",
            login=not sessions.open,
            **context,
        )
        return secured(HTMLResponse(html, status))

    def not_found(request: Request) -> Response:
        return page(request, "error.html", 404, message="Not found.")

    def host_ok(request: Request) -> bool:
        if not source.hosts:
            return True
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name.lower() in source.hosts

    def guarded(handler: Any, *, admin: bool = False) -> Any:
        async def endpoint(request: Request) -> Response:
            if not host_ok(request):
                return secured(Response("misdirected request", 421))
            viewer = sessions.principal(request.cookies.get(COOKIE))
            if viewer is None:
                return secured(RedirectResponse(f"{PATH}/login", 303))
            request.state.viewer = viewer
            if admin and not viewer.admin:
                return page(request, "error.html", 403, message="Admin actions need an admin.")
            try:
                response: Response = await handler(
                    request, viewer, source.scope.narrowed(viewer.scope)
                )
                return response
            except views.NotFound:
                return not_found(request)
            except views.BadRequest as e:
                return page(request, "error.html", 400, message=str(e))

        return endpoint

    async def browse(request: Request, viewer: Principal, scope: Any) -> Response:
        q = request.query_params
        toolkit = q.get("toolkit") or None
        tags = views.tag_filter(q.getlist("tag"), q.getlist("any_tag"), q.getlist("not_tag"))
        deferred = q.get("deferred", "yes")
        if deferred not in ("yes", "no", "only"):
            raise views.BadRequest("deferred must be yes, no or only")
        size = _int(q.get("size"), views.PAGE_SIZE, 1, views.MAX_PAGE_SIZE, "size")
        cursor = q.get("cursor") or None
        data = await source.run(
            lambda c: views.browse(
                c, scope, toolkit=toolkit, tags=tags, deferred=deferred, cursor=cursor, size=size
            )
        )
        filters = [
            ("toolkit", toolkit),
            *[("tag", t) for t in q.getlist("tag")],
            *[("any_tag", t) for t in q.getlist("any_tag")],
            *[("not_tag", t) for t in q.getlist("not_tag")],
            ("deferred", deferred if deferred != "yes" else None),
            ("size", size if size != views.PAGE_SIZE else None),
        ]
        return page(
            request,
            "browse.html",
            **data,
            filters=filters,
            toolkit=toolkit or "",
            tag=" ".join(q.getlist("tag")),
            any_tag=" ".join(q.getlist("any_tag")),
            not_tag=" ".join(q.getlist("not_tag")),
            deferred=deferred,
        )

    async def toolkits(request: Request, viewer: Principal, scope: Any) -> Response:
        after = request.query_params.get("after") or None
        data = await source.run(lambda c: views.toolkits(c, scope, after))
        done = DONE.get(request.query_params.get("done", ""))
        return page(request, "toolkits.html", **data, done=done)

    async def tool(request: Request, viewer: Principal, scope: Any) -> Response:
        p = request.path_params
        version = request.query_params.get("version") or None
        data = await source.run(lambda c: views.tool(c, scope, p["toolkit"], p["name"], version))
        return page(request, "tool.html", **data, definition=views.definition_text(data["tool"]))

    async def diff(request: Request, viewer: Principal, scope: Any) -> Response:
        p, q = request.path_params, request.query_params
        old, new = q.get("from"), q.get("to")
        if not old or not new:
            raise views.BadRequest("choose two versions: from and to")
        data = await source.run(lambda c: views.diff(c, scope, p["toolkit"], p["name"], old, new))
        return page(request, "diff.html", **data)

    async def search(request: Request, viewer: Principal, scope: Any) -> Response:
        q = request.query_params
        query = q.get("q", "")
        mode = q.get("mode") or None
        k = _int(q.get("k"), 10, 1, views.MAX_K, "k")
        result = None
        if query.strip():
            result = await source.run(lambda c: views.search(c, scope, query, mode, k))
        return page(
            request, "search.html", q=query, mode=mode or "", k=k, modes=SEARCH_MODES, result=result
        )

    async def usage(request: Request, viewer: Principal, scope: Any) -> Response:
        who = None if viewer.admin else viewer.name
        data = await source.run(lambda c: views.usage(c, scope, who, source.gaps()))
        return page(request, "usage.html", **data)

    async def status(request: Request, viewer: Principal, scope: Any) -> Response:
        info = await source.run(lambda c: c.status())
        health = source.health()
        if not viewer.admin:
            info.pop("path", None)  # where the file lies is the operator's business
        return page(
            request,
            "status.html",
            info=info,
            health=health,
            info_json=json.dumps(info, indent=2, sort_keys=True, default=str),
        )

    async def quality(request: Request, viewer: Principal, scope: Any) -> Response:
        from .charts import charts

        try:
            result = await source.run(lambda c: c.eval_result())
        except CatalogDamagedError as e:  # only this page needs it: the others still work
            why = f" ({e.reason})" if viewer.admin else ""
            damaged = (
                f"The saved eval result cannot be read{why}: run `toolcat eval BENCH --save` again."
            )
            return page(request, "quality.html", result=None, damaged=damaged)
        return page(
            request,
            "quality.html",
            result=result,
            damaged=None,
            charts=charts(result) if result is not None else [],
            baseline=result is not None and any(r.baseline for r in result.rows),
        )

    async def admin(request: Request, viewer: Principal, scope: Any) -> Response:
        import anyio

        action = request.path_params["action"]
        if action not in ADMIN_ACTIONS:
            raise views.NotFound
        form = await _form(request)
        if not sessions.form_ok(
            request.cookies.get(COOKIE),
            form.get("csrf", ""),
            request.headers.get("origin"),
            request.headers.get("host", ""),
        ):
            return page(request, "error.html", 403, message="This form is not from this page.")
        writer = source.writer
        try:
            if action == "reindex":
                await anyio.to_thread.run_sync(lambda: writer.reindex())
            else:
                toolkit, version = form.get("toolkit", ""), form.get("version", "")
                views.check_name(toolkit, TOOLKIT_NAME_RE)
                if not views.toolkit_in_scope(scope, toolkit) or not version:
                    raise views.NotFound
                verb = writer.deprecate if action == "deprecate" else writer.activate
                await anyio.to_thread.run_sync(lambda: verb(toolkit, version[:100]))
        except ToolcatError as e:
            return page(request, "error.html", 409, message=str(e))
        return secured(RedirectResponse(f"{PATH}/toolkits?done={action}", 303))

    async def login(request: Request) -> Response:
        if not host_ok(request):
            return secured(Response("misdirected request", 421))
        if sessions.open:
            return secured(RedirectResponse(f"{PATH}/", 303))
        principal = None
        if request.method == "POST":
            if not _same_origin(request):
                return page(request, "login.html", 403, failed=True, spent=False)
            try:
                form = await _form(request)
            except views.BadRequest as e:
                return page(request, "error.html", 400, message=str(e))
            principal = sessions.login_token(form.get("token", ""))
            if principal is None:
                return page(request, "login.html", 401, failed=True, spent=False)
        elif "secret" in request.query_params:  # toolcat ui's one-time link
            principal = sessions.login_secret(request.query_params["secret"])
            if principal is None:
                return page(request, "login.html", 401, failed=True, spent=True)
        if principal is None:
            return page(request, "login.html", failed=False, spent=False)
        response = RedirectResponse(f"{PATH}/", 303)
        response.set_cookie(
            COOKIE,
            sessions.cookie(principal),
            max_age=SESSION_SECONDS,
            path=PATH,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return secured(response)

    async def logout(request: Request) -> Response:
        response = RedirectResponse(f"{PATH}/login", 303)
        if _same_origin(request):
            response.delete_cookie(COOKIE, path=PATH)
        return secured(response)

    async def missing(request: Request, *_: Any) -> Response:
        raise views.NotFound

    def _same_origin(request: Request) -> bool:
        from .auth import same_origin

        return same_origin(request.headers.get("origin"), request.headers.get("host", ""))

    async def _form(request: Request) -> dict[str, str]:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise views.BadRequest("the form is too large")
        from urllib.parse import parse_qsl

        try:
            return dict(parse_qsl(body.decode("utf-8"), max_num_fields=20))
        except (UnicodeDecodeError, ValueError):
            raise views.BadRequest("the form cannot be read") from None

    routes = [
        Route("/", guarded(browse)),
        Route("/toolkits", guarded(toolkits)),
        Route("/tools/{toolkit}/{name}", guarded(tool)),
        Route("/tools/{toolkit}/{name}/diff", guarded(diff)),
        Route("/search", guarded(search)),
        Route("/usage", guarded(usage)),
        Route("/status", guarded(status)),
        Route("/quality", guarded(quality)),
        Route("/admin/{action}", guarded(admin, admin=True), methods=["POST"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static")),
        Route("/{rest:path}", guarded(missing)),
    ]
    app = Starlette(routes=routes)

    async def headers_on_everything(scope: Any, receive: Any, send: Any) -> None:
        async def send_secured(message: Any) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers") or []}
                extra = [
                    (k.encode(), v.encode()) for k, v in HEADERS.items() if k.encode() not in names
                ]
                message = {**message, "headers": [*(message.get("headers") or []), *extra]}
            await send(message)

        await app(scope, receive, send_secured)

    return headers_on_everything


def _int(value: str | None, default: int, low: int, high: int, field: str) -> int:
    if value in (None, ""):
        return default
    assert value is not None
    if not (value.isascii() and value.isdigit()) or len(value) > 6 or not low <= int(value) <= high:
        raise views.BadRequest(f"{field} must be a whole number from {low} to {high}")
    return int(value)
