"""Browser tests: Playwright (Python) driving Debian's Chromium, headless, against the real
product (daphne + Celery worker subprocesses, see tests/live.py).

Chromium comes from Debian's `chromium` package (`.ci/run` installs it); `playwright
install` is never used. Without it the tests fail loudly in CI and are skipped elsewhere
with the reason.
"""

import os
import shutil

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
