"""Browser tests: Playwright (Python) driving Debian's Chromium, headless, against the real
product (daphne + Celery worker subprocesses, see tests/live.py).

Chromium comes from Debian's `chromium` package (`.ci/run` installs it); `playwright
install` is never used. Without it the tests fail loudly in CI and are skipped elsewhere
with the reason.
"""

import os
import shutil
import time

import pytest

CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# A bound on each page action and wait (Playwright's default is 30 s): under `make test`'s
# parallel workers on 2 cores a page load can take many times what it takes alone.
BROWSER_TIMEOUT_MS = 90_000


@pytest.fixture(scope="module")
def chromium_browser():
    if not os.path.exists(CHROMIUM):
        message = f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own database
    # calls are still synchronous, so Django's async-safety check must stand aside while
    # the browser is up (restored afterwards for the rest of the suite).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page_for(chromium_browser, live_stack):
    """`page_for(person)`: a fresh browser context logged in as `person` through the form."""
    contexts = []

    def make(person, password=None):
        context = chromium_browser.new_context(base_url=live_stack.url)
        context.set_default_timeout(BROWSER_TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.goto("/accounts/login/")
        page.fill("#id_username", person.get_username())
        page.fill("#id_password", password or f"pw-{person.get_username()}-123!")
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_stack.url}/")
        return page

    yield make
    for context in contexts:
        context.close()


def composer_fill(page, text: str) -> None:
    """Type `text` into the chat's composer once its script has bound Enter to sending
    (chat.js marks the form): typed earlier, on a loaded machine, Enter only added a line."""
    page.wait_for_selector("#composer[data-ready]", state="attached")
    page.fill("#composer-text", text)


class RequestsInFlight:
    """The page's requests still open, so a test can wait until every request a page makes
    after loading (htmx fragments, scripts, styles) is done: Playwright's "networkidle" waits
    for a browser lifecycle event that, on a loaded machine, once never came within 90 s
    while nothing was open; this names what is still open when it really hangs."""

    QUIET_SECONDS = 0.5

    def __init__(self, page):
        self.page = page
        self.open: dict[int, str] = {}
        self.last_change = time.monotonic()
        page.on("request", self._opened)
        page.on("requestfinished", self._closed)
        page.on("requestfailed", self._closed)

    def _opened(self, request) -> None:
        self.open[id(request)] = request.url
        self.last_change = time.monotonic()

    def _closed(self, request) -> None:
        self.open.pop(id(request), None)
        self.last_change = time.monotonic()

    def wait_quiet(self, path: str) -> None:
        deadline = time.monotonic() + BROWSER_TIMEOUT_MS / 1000
        while self.open or time.monotonic() - self.last_change < self.QUIET_SECONDS:
            assert time.monotonic() < deadline, f"{path}: requests still open: {self.open}"
            self.page.wait_for_timeout(100)  # lets Playwright deliver the page's events
