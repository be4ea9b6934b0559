"""The web console against hostile tool texts, other principals, forged forms and odd URLs:
a real ``toolcat serve --http --tokens`` process, real HTTP."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("mcp")
pytest.importorskip("jinja2")

from tests.server.clients import MODERN, http_session, run, server_env
from tests.server.console.site import (
    ADMIN_TOKEN,
    MATH_TOKEN,
    RAW,
    console_server,
    make_catalog,
)
from tests.server.console.site import (
    login as signed_in,
)
from toolcat import Catalog

OPENED: list[httpx.Client] = []


def login(base: str, token: str) -> httpx.Client:
    OPENED.append(signed_in(base, token))
    return OPENED[-1]


def anonymous_client(base: str) -> httpx.Client:
    OPENED.append(httpx.Client(base_url=base))
    return OPENED[-1]


PAGES = [
    "/ui/",
    "/ui/?deferred=only",
    "/ui/toolkits",
    "/ui/tools/evil/pwn",
    "/ui/tools/evil/pwn?version=1.0.0",
    "/ui/tools/evil/pwn/diff?from=1.0.0&to=2.0.0",
    "/ui/search?q=click+rockets+factors&k=10",
    "/ui/search?q=%3Cscript%3Ealert(9)%3C%2Fscript%3E%22+onmouseover%3D%22x&k=5",
    "/ui/usage",
    "/ui/status",
]
CSP = (
    "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with console_server(tmp_path_factory.mktemp("console")) as found:
        yield found


def test_tool_texts_are_escaped_on_every_page(site: tuple[str, Path]) -> None:
    base, _db = site
    client = login(base, ADMIN_TOKEN)
    for page in PAGES:
        answer = client.get(page)
        assert answer.status_code == 200, (page, answer.text)
        html = answer.text
        for raw in RAW:
            assert raw not in html, (page, raw)
    tool = client.get("/ui/tools/evil/pwn").text
    assert "&lt;script&gt;" in tool and "&lt;img src=x onerror=" in tool
    assert "&#34; onmouseover=&#34;" in tool  # as text, not an attribute
    assert "&#34;&gt;&lt;script&gt;alert(3)" in tool  # a parameter's name
    # The only scripts and links are the console's own: no <script> at all, and every
    # href is a path of this site.
    assert "<script" not in tool
    for href in re.findall(r'href="([^"]*)"', tool):
        assert href.startswith(("/ui/", "#")), href


def test_a_principal_sees_only_its_scope_on_every_page(site: tuple[str, Path]) -> None:
    base, db = site
    with Catalog(db) as catalog:  # a use of the hidden tool, recorded for another principal
        catalog.record_use("launch the rockets", "secretkit.launch_rockets", principal="boss")
        catalog.record_use("prime factors", "math.prime_factors", principal="math-team")
    client = login(base, MATH_TOKEN)
    for page in [*PAGES, "/ui/search?q=launch+rockets&k=50", "/ui/?deferred=only&size=200"]:
        html = client.get(page).text
        for hidden in ("secretkit", "launch_rockets", "evil", "pwn", "boss"):
            assert hidden not in html, (page, hidden)
    assert "math.prime_factors" in client.get("/ui/usage").text
    for direct in [
        "/ui/tools/secretkit/launch_rockets",
        "/ui/tools/evil/pwn?version=1.0.0",
        "/ui/tools/secretkit/launch_rockets/diff?from=1.0.0&to=1.0.0",
        "/ui/?toolkit=secretkit",
        "/ui/?toolkit=secretki",  # no "did you mean secretkit"
    ]:
        answer = client.get(direct)
        assert answer.status_code == 404, direct
        assert "secretkit" not in answer.text and "launch" not in answer.text


def test_admin_forms_need_the_sessions_csrf_token_and_this_origin(
    site: tuple[str, Path],
) -> None:
    base, db = site
    admin = login(base, ADMIN_TOKEN)
    page = admin.get("/ui/toolkits").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    token = csrf.group(1)
    form = {"toolkit": "evil", "version": "1.0.0"}
    refused = [
        ({**form}, {"Origin": base}),  # no token
        ({**form, "csrf": token[:-2] + "xx"}, {"Origin": base}),  # a wrong one
        ({**form, "csrf": token}, {"Origin": "http://evil.example"}),  # another site
        ({**form, "csrf": token}, {}),  # no Origin
    ]
    for data, headers in refused:
        answer = admin.post("/ui/admin/deprecate", data=data, headers=headers)
        assert answer.status_code == 403, (data, headers)
    with Catalog(db) as catalog:
        assert not any(v.deprecated for v in catalog.versions("evil"))
    # Another principal's session cannot act, with its own token either.
    reader = login(base, MATH_TOKEN)
    theirs = reader.get("/ui/toolkits").text
    assert 'name="csrf"' not in theirs
    answer = reader.post(
        "/ui/admin/deprecate", data={**form, "csrf": token}, headers={"Origin": base}
    )
    assert answer.status_code == 403
    answer = admin.post(
        "/ui/admin/deprecate", data={**form, "csrf": token}, headers={"Origin": base}
    )
    assert answer.status_code == 303
    with Catalog(db) as catalog:
        assert [v.deprecated for v in catalog.versions("evil")] == [True, False]
    assert "Version deprecated." in admin.get("/ui/toolkits?done=deprecate").text
    assert (
        admin.get("/ui/admin/activate?toolkit=evil&version=1.0.0").status_code == 404
    )  # POST only


def test_every_answer_carries_the_security_headers(site: tuple[str, Path]) -> None:
    base, _db = site
    client = login(base, ADMIN_TOKEN)
    anonymous = anonymous_client(base)
    answers = [client.get(p) for p in PAGES]
    answers += [
        client.get("/ui/static/console.css"),
        client.get("/ui/no/such/page"),
        anonymous.get("/ui/login"),
        anonymous.get("/ui/"),
    ]
    for answer in answers:
        assert answer.headers["content-security-policy"] == CSP, answer.url
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "same-origin"


def test_unauthenticated_requests_learn_nothing_and_no_token_travels_in_a_url(
    site: tuple[str, Path],
) -> None:
    base, _db = site
    anonymous = anonymous_client(base)
    for page in PAGES:
        answer = anonymous.get(page)
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/login"
        assert answer.text == ""
    # A bearer header is not a console session, and /mcp's 401 is untouched.
    assert (
        httpx.get(f"{base}/ui/", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).status_code
        == 303
    )
    assert httpx.post(f"{base}/mcp", json={}).status_code == 401
    wrong = anonymous.post("/ui/login", data={"token": "nope-nope-nope"}, headers={"Origin": base})
    assert wrong.status_code == 401 and "not valid" in wrong.text
    foreign = anonymous.post(
        "/ui/login", data={"token": ADMIN_TOKEN}, headers={"Origin": "http://x.example"}
    )
    assert foreign.status_code == 403 and "set-cookie" not in foreign.headers
    login_page = anonymous.get("/ui/login").text
    assert 'method="post"' in login_page and 'type="password"' in login_page
    client = login(base, ADMIN_TOKEN)
    cookie = client.cookies.get("toolcat_console")
    assert cookie and ADMIN_TOKEN not in cookie
    for page in PAGES:
        html = client.get(page).text
        assert ADMIN_TOKEN not in html
        for url in re.findall(r'(?:href|action|src)="([^"]*)"', html):
            assert ADMIN_TOKEN not in url and "token" not in url.lower()


def test_forged_and_foreign_cookies_are_no_session(site: tuple[str, Path]) -> None:
    base, _db = site
    mine = login(base, MATH_TOKEN).cookies["toolcat_console"]
    payload, mac = mine.split(".")
    import base64

    boss = base64.urlsafe_b64encode(b"boss\n9999999999").rstrip(b"=").decode()
    for forged in [
        f"{boss}.{mac}",
        f"{payload}.{mac[:-3]}AAA",
        "x" * 600,
        "a.b.c",
        "%CE%A9.%CE%A9",
        "bG9jYWw.AAAA",
    ]:
        answer = httpx.get(f"{base}/ui/status", cookies={"toolcat_console": forged})
        assert answer.status_code == 303, forged


@pytest.mark.parametrize(
    "path",
    [
        "/ui/tools/..%2F..%2Fetc/passwd",
        "/ui/tools/%2e%2e/pwn",
        "/ui/tools/evil/%2e%2e",
        "/ui/tools/evil/pwn%00",
        "/ui/tools/%EF%BC%8E%EF%BC%8E/pwn",  # fullwidth dots
        "/ui/tools/EVIL/pwn",
        "/ui/tools/evil/" + "p" * 5000,
        "/ui/tools/evil/pwn?version=" + "9" * 500,
        "/ui/tools/evil/pwn/diff?from=1.0.0&to=..%2F2.0.0",
    ],
)
def test_odd_names_in_urls_are_404(site: tuple[str, Path], path: str) -> None:
    base, _db = site
    client = login(base, ADMIN_TOKEN)
    answer = client.get(path)
    assert answer.status_code == 404, answer.text
    assert "Traceback" not in answer.text and "passwd" not in answer.text


@pytest.mark.parametrize(
    "path",
    [
        "/ui/search?q=x&k=51",
        "/ui/search?q=x&k=-1",
        "/ui/search?q=x&k=1e9",
        "/ui/search?q=x&mode=sql",
        "/ui/search?k=5&q=" + "x" * 1001,
        "/ui/?size=100000",
        "/ui/?size=%C2%B2",  # "²": str.isdigit() holds, int() refuses it (was a 500)
        "/ui/search?q=x&k=%E2%91%A0",  # "①"
        "/ui/?cursor=not-a-cursor",
        "/ui/?deferred=maybe",
        "/ui/?" + "&".join(f"tag=t{i}" for i in range(21)),
        "/ui/tools/evil/pwn/diff?from=1.0.0",
    ],
)
def test_unbounded_or_malformed_parameters_are_a_one_line_400(
    site: tuple[str, Path], path: str
) -> None:
    base, _db = site
    answer = login(base, ADMIN_TOKEN).get(path)
    assert answer.status_code == 400, answer.text
    message = re.search(r'<p class="error" role="alert">([^<]*)</p>', answer.text)
    assert message is not None and "\n" not in message.group(1)


def test_usage_shows_calls_and_gaps_after_real_mcp_searches(site: tuple[str, Path]) -> None:
    base, _db = site

    async def searches() -> None:
        async with http_session(f"{base}/mcp", MATH_TOKEN, mode=MODERN) as session:
            await session.call("search_tools", {"query": "prime factors of a number", "k": 3})
            await session.call("call_tool", {"name": "prime_factors", "arguments": {"n": 12}})
            await session.call("search_tools", {"query": "zzqx frobnicate the <b>wombat</b>"})

    run(searches)
    html = login(base, MATH_TOKEN).get("/ui/usage").text
    assert "prime factors of a number" in html
    assert "zzqx frobnicate the &lt;b&gt;wombat&lt;/b&gt;" in html
    assert "launch the rockets" not in html  # boss's use, another principal's


def test_toolcat_ui_is_loopback_with_a_one_time_link(tmp_path: Path) -> None:
    db = make_catalog(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "toolcat.cli", "--db", str(db), "ui", "--no-browser"],
        env=server_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/ui/login\?secret=(\S+)", line)
        assert found, line
        base = f"http://127.0.0.1:{found.group(1)}"
        link = found.group(0)
        assert httpx.get(f"{base}/ui/").status_code == 303
        assert httpx.get(f"{base}/ui/login?secret=wrong").status_code == 401
        # A page of another name resolving here (DNS rebinding) is refused.
        assert httpx.get(link, headers={"Host": "evil.example"}).status_code == 421
        client = anonymous_client(base)
        first = client.get(link)
        assert first.status_code == 303 and first.headers["location"] == "/ui/"
        assert "HttpOnly" in first.headers["set-cookie"]
        assert "SameSite=strict" in first.headers["set-cookie"]
        assert found.group(2) not in first.headers["set-cookie"]
        assert httpx.get(link).status_code == 401  # spent
        page = client.get("/ui/toolkits").text
        assert "(admin)" in page and 'name="csrf"' in page
    finally:
        process.terminate()
        process.wait(10)
        if process.stderr is not None:
            process.stderr.close()


def test_admin_in_a_tokens_file_must_be_a_boolean(tmp_path: Path) -> None:
    from toolcat.server.tokens import TokensFileError, load_tokens

    path = tmp_path / "tokens.yaml"
    path.write_text("principals:\n  - name: a\n    token: aaaaaaaaaa\n    admin: 'yes'\n")
    with pytest.raises(TokensFileError, match="'admin' must be true or false"):
        load_tokens(path)
    path.write_text("principals:\n  - name: a\n    token: aaaaaaaaaa\n")
    assert load_tokens(path).named("a").admin is False  # type: ignore[union-attr]
