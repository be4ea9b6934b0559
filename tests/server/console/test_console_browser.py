"""The console in a real browser: headless Chromium from Debian driven by selenium. Clicks
through browse → tool → version diff, runs a playground search, reads the usage page after
real MCP calls, shows that no injected script runs, and saves the screenshots that
docs/console.md shows (docs/img/console-*.png)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
pytest.importorskip("jinja2")
pytest.importorskip("selenium")

from tests.helpers import ROOT
from tests.server.clients import MODERN, http_session, run
from tests.server.console.site import (
    ADMIN_TOKEN,
    HOSTILE_SOURCES,
    MATH_TOKEN,
    console_server,
    hostile_bench,
    letters,
)
from toolcat import Catalog
from toolcat.quality import saved
from toolcat.quality.evaluate import evaluate

pytestmark = pytest.mark.slow
SHOTS = ROOT / "docs" / "img"
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="session")
def chromium() -> None:
    """Debian's chromium and chromium-driver, installed when missing (as root, as CI is)."""
    if os.path.exists(CHROMIUM) and os.path.exists(DRIVER):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("chromium and chromium-driver are not installed (apt-get install them)")
    subprocess.run(["apt-get", "update", "-qq"], check=True, timeout=600)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"],
        check=True,
        timeout=1200,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )


@pytest.fixture
def browser(chromium: None, tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def go(driver: Any, element: Any) -> None:
    """Click a link or submit button and wait for the next page."""
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element("tag name", "html")
    element.click()
    WebDriverWait(driver, 30).until(lambda d: d.find_element("tag name", "html") != old)


def sign_in(driver: Any, base: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/ui/")
    assert driver.current_url.endswith("/ui/login")  # no session: the login form
    driver.find_element(By.ID, "token").send_keys(token)
    go(driver, driver.find_element(By.CSS_SELECTOR, "form button[type=submit]"))
    assert driver.current_url == f"{base}/ui/"
    assert token not in driver.current_url


def shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"console-{name}.png"))


def test_browse_tool_diff_search_usage_in_a_browser(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with console_server(tmp_path) as (base, _db):

        async def agent() -> None:  # a real MCP client searches and calls, then misses
            async with http_session(f"{base}/mcp", MATH_TOKEN, mode=MODERN) as session:
                await session.call("search_tools", {"query": "prime factors of 360", "k": 3})
                await session.call("call_tool", {"name": "prime_factors", "arguments": {"n": 360}})
                await session.call("search_tools", {"query": "book a table for two tonight"})

        run(agent)
        sign_in(browser, base, ADMIN_TOKEN)
        title = browser.title
        assert title == "Browse · toolcat console"
        shot(browser, "browse")

        go(browser, browser.find_element(By.LINK_TEXT, "evil.pwn"))
        assert browser.current_url == f"{base}/ui/tools/evil/pwn"
        assert browser.title == "evil.pwn · toolcat console"  # the injected script never ran
        assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
        description = browser.find_element(By.CSS_SELECTOR, "p.description").text
        assert "<script>document.title='pwned'</script>" in description  # shown as text
        Select(browser.find_element(By.ID, "d-from")).select_by_visible_text("1.0.0")
        Select(browser.find_element(By.ID, "d-to")).select_by_visible_text("2.0.0")
        go(browser, browser.find_element(By.CSS_SELECTOR, "main form button[type=submit]"))
        assert "/ui/tools/evil/pwn/diff?" in browser.current_url
        added = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "pre.diff .add")]
        assert any("(second)" in line for line in added), added
        assert "pwned" not in browser.title
        shot(browser, "diff")

        go(browser, browser.find_element(By.LINK_TEXT, "Back to the tool"))
        shot(browser, "tool")

        go(browser, browser.find_element(By.LINK_TEXT, "Search"))
        query = browser.find_element(By.ID, "s-q")
        query.send_keys("prime factors of a number")
        Select(browser.find_element(By.ID, "s-mode")).select_by_visible_text("bm25")
        go(browser, browser.find_element(By.CSS_SELECTOR, "main form button[type=submit]"))
        first = browser.find_element(By.CSS_SELECTOR, "main table tbody tr")
        assert "math.prime_factors" in first.text and "strong" in first.text
        cli = browser.find_elements(By.CSS_SELECTOR, "main pre code")[0].text
        assert cli == "toolcat search 'prime factors of a number' --mode bm25 -k 10"
        shot(browser, "search")

        go(browser, browser.find_element(By.LINK_TEXT, "Usage"))
        page = browser.find_element(By.TAG_NAME, "main").text
        assert "prime factors of 360" in page and "math-team" in page
        assert "book a table for two tonight" in page  # a gap: nothing fitted
        shot(browser, "usage")

        go(browser, browser.find_element(By.LINK_TEXT, "Toolkits"))
        assert "pwned" not in browser.title
        shot(browser, "toolkits")
        go(browser, browser.find_element(By.LINK_TEXT, "Status"))
        assert "primary" in browser.find_element(By.TAG_NAME, "main").text
        shot(browser, "status")


def test_quality_page_in_a_browser(browser: Any, tmp_path: Path) -> None:
    """A saved eval whose source names carry markup: drawn as bars, no script runs."""
    from selenium.webdriver.common.by import By

    with console_server(tmp_path) as (base, db):
        sign_in(browser, base, ADMIN_TOKEN)
        go(browser, browser.find_element(By.LINK_TEXT, "Quality"))
        assert "No eval saved yet" in browser.find_element(By.TAG_NAME, "main").text
        rows = evaluate(
            hostile_bench(tmp_path),
            modes=["bm25", "hybrid"],
            baseline=True,
            baseline_encoder=letters,
        )
        with Catalog(db) as catalog:
            saved.save(catalog, rows, model=catalog.status()["embedding_model"])
        browser.refresh()
        assert browser.title == "Quality · toolcat console"  # the injected handler never ran
        assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
        charts = browser.find_elements(By.CSS_SELECTOR, "main figure.chart svg")
        assert len(charts) == 3
        bars = charts[1].find_elements(By.CSS_SELECTOR, "rect.bar title")
        assert len(bars) == len(rows)
        heads = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "main tbody th")]
        assert HOSTILE_SOURCES[0] in heads  # shown as text
        shot(browser, "quality")


def test_keyboard_reaches_every_nav_link_and_form_control(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    with console_server(tmp_path) as (base, _db):
        sign_in(browser, base, ADMIN_TOKEN)
        body = browser.find_element(By.TAG_NAME, "body")
        body.send_keys(Keys.TAB)
        reached = []
        for _ in range(20):
            active = browser.switch_to.active_element
            reached.append(active.get_attribute("id") or active.text or active.tag_name)
            active.send_keys(Keys.TAB)
        for wanted in (
            "Skip to content",
            "Browse",
            "Toolkits",
            "Search",
            "Usage",
            "Status",
            "Quality",
        ):
            assert wanted in reached, reached
        for control in ("f-toolkit", "f-tag", "f-any", "f-not", "f-deferred"):
            assert control in reached, reached
            label = browser.find_element(By.CSS_SELECTOR, f"label[for={control}]")
            assert label.text
