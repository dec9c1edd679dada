"""The page of `keras-selfattn serve` in a real browser: Debian's headless Chromium.

Selenium drives `chromium` through `chromedriver` (the Debian packages
`chromium` and `chromium-driver`). Without them the tests skip, with one line
in pytest's summary naming the install command; with
`KERAS_SELFATTN_REQUIRE_BROWSER=1` (which `.ci/run` sets) a missing browser
fails them instead; `.ci/run` installs them beside pip's install, and the
tests wait for that to end (KERAS_SELFATTN_BROWSER_INSTALL). The server
runs in a subprocess on a port of 127.0.0.1 that it picks itself
(`--port 0`), with the tiny model of `serving.py`.

The screenshots go to pytest's temporary folder, or to the folder named by
`KERAS_SELFATTN_SCREENSHOTS`; `KERAS_SELFATTN_BROWSER_MODEL` serves another
model instead of the tiny one. The docs' pictures were made with

    KERAS_SELFATTN_SCREENSHOTS=docs KERAS_SELFATTN_BROWSER_MODEL=imdb.keras \
        pytest -m browser

where `imdb.keras` comes from `keras-selfattn train` (the defaults).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import httpx2
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.helpers import png_size
from tests.imdb.serving import NEGATIVE, POSITIVE, running_server

pytestmark = [pytest.mark.browser, pytest.mark.tensorflow_only]

WAIT_S = 60  # the longest wait for the page to show an answer
GREEN, PURPLE = (44, 160, 44), (148, 103, 189)  # the page's full colours
MISSING = "no headless Chromium: apt-get install -y chromium chromium-driver"
REQUIRED = os.environ.get("KERAS_SELFATTN_REQUIRE_BROWSER") == "1"
# `.ci/run` installs the browser beside pip's install and names here the
# file that will hold apt-get's exit status once it ends.
INSTALLING = os.environ.get("KERAS_SELFATTN_BROWSER_INSTALL")
INSTALL_WAIT_S = 900  # the longest wait for that install to end


def _binaries() -> tuple[str | None, str | None]:
    """Chromium and its driver where they are found on PATH."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    return chromium, shutil.which("chromedriver")


if not all(_binaries()) and not REQUIRED:
    pytest.skip(MISSING, allow_module_level=True)  # one line for the module


def _installed_binaries() -> tuple[str | None, str | None]:
    """`_binaries()` once `.ci/run`'s install of the browser has ended."""
    if INSTALLING:
        status = Path(INSTALLING)
        deadline = time.monotonic() + INSTALL_WAIT_S
        while not status.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"the browser's install did not end in {INSTALL_WAIT_S} s")
            time.sleep(1)
        code = status.read_text().strip()
        if code != "0":
            log = status.with_name("apt.log")
            pytest.fail(f"apt-get exited with {code} installing the browser: {log}")
    return _binaries()


@pytest.fixture(scope="module")
def url(tiny_model, subprocess_env, tmp_path_factory):
    model = os.environ.get("KERAS_SELFATTN_BROWSER_MODEL") or tiny_model
    log = tmp_path_factory.mktemp("browser") / "serve.log"
    with running_server(Path(model), subprocess_env, log) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    chromium, driver = _installed_binaries()
    if not (chromium and driver):
        pytest.fail(f"{MISSING} (KERAS_SELFATTN_REQUIRE_BROWSER=1 requires it)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--window-size=1280,900",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    browser = webdriver.Chrome(options=options, service=Service(driver))
    browser.set_page_load_timeout(WAIT_S)
    browser.set_script_timeout(WAIT_S)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    folder = os.environ.get("KERAS_SELFATTN_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return Path(folder)
    return tmp_path_factory.mktemp("screenshots")


def _rgb(css: str) -> tuple[int, int, int]:
    return tuple(int(v) for v in re.findall(r"\d+", css)[:3])


def _shown_tokens(browser) -> list[dict]:
    return browser.execute_script(
        "return [...document.querySelectorAll('#tokens .token')].map(s => ({"
        "token: s.textContent, title: s.title,"
        "background: getComputedStyle(s).backgroundColor}));"
    )


def _wait_for(browser, url: str, text: str) -> dict:
    """The server's explanation of `text`, once the page shows it."""
    expected = httpx2.post(f"{url}/v1/explain", json={"text": text}, timeout=30)
    expected = expected.json()
    tokens = [t["token"] for t in expected["tokens"]]
    WebDriverWait(browser, WAIT_S).until(
        lambda b: [t["token"] for t in _shown_tokens(b)] == tokens,
        message=f"the page never showed the tokens of {text!r}",
    )
    return expected


def _shade(share: float, largest: float) -> tuple[int, ...]:
    """The background the page should give a share: white at 0, full at largest."""
    strength = min(1.0, abs(share) / largest) if largest > 0 else 0.0
    colour = GREEN if share >= 0 else PURPLE
    return tuple(round(255 + (c - 255) * strength) for c in colour)


def _check_page_shows(browser, expected: dict) -> None:
    label = browser.find_element(By.ID, "label")
    assert label.text == expected["label"]
    probability = browser.find_element(By.ID, "probability").text
    assert f"{expected['probability']:.3f}" in probability
    shown = _shown_tokens(browser)
    shares = [t["attribution"] for t in expected["tokens"]]  # the default view
    largest = max(abs(s) for s in shares)
    should = [_shade(share, largest) for share in shares]
    got = [_rgb(token["background"]) for token in shown]
    white = (255, 255, 255)
    assert sum(c != white for c in got) == sum(c != white for c in should) > 0
    for token, share, want, rgb in zip(shown, shares, should, got, strict=True):
        assert max(abs(a - b) for a, b in zip(rgb, want, strict=True)) <= 1, token
        r, g, b = rgb
        if share > largest / 10:  # visibly green
            assert g > r and g > b, token
        elif share < -largest / 10:  # visibly purple
            assert r > g and b > g, token
        assert "attribution " in token["title"] and "pooling share " in token["title"]


# Types `text` into the review box one character at a time, all within one
# script: the page's input handler sees every key, and no timer of its
# debounce can fire in between (a page runs one script at a time). Returns
# the requests made before, read in the same script.
_TYPE_EVERY_KEY = """
const [review, text] = arguments;
const before = window.requests;
review.value = "";
for (const c of text) {
  review.value += c;
  review.dispatchEvent(new Event("input", {bubbles: true}));
}
return before;
"""


def test_typing_reviews_shows_verdict_and_shares(browser, url):
    browser.set_window_size(1280, 900)
    browser.get(f"{url}/")
    # Count the page's requests.
    browser.execute_script(
        "window.requests = 0; const f = window.fetch;"
        "window.fetch = (...a) => { window.requests++; return f(...a); };"
    )
    review = browser.find_element(By.ID, "review")
    # Real keys, at Selenium's speed: the page answers the whole text.
    review.clear()
    review.send_keys(POSITIVE)
    expected = _wait_for(browser, url, POSITIVE)
    assert expected["label"] == "positive"
    _check_page_shows(browser, expected)
    # Every key an input event, faster than the debounce: one request.
    before = browser.execute_script(_TYPE_EVERY_KEY, review, NEGATIVE)
    expected = _wait_for(browser, url, NEGATIVE)
    assert expected["label"] == "negative"
    _check_page_shows(browser, expected)
    assert browser.execute_script("return window.requests") == before + 1

    first = browser.find_elements(By.CSS_SELECTOR, "#tokens .token")[0]
    ActionChains(browser).move_to_element(first).perform()
    detail = browser.find_element(By.ID, "detail").text
    assert detail.startswith(f"“{first.text}”: attribution ") and "share" in detail

    review.clear()
    review.send_keys(" ")  # only a space: the verdict clears, no error
    WebDriverWait(browser, WAIT_S).until(lambda b: not _shown_tokens(b))
    assert browser.find_element(By.ID, "error").text == ""


def test_examples_at_laptop_and_phone_width(browser, url, screenshots):
    for width, height, example in ((1280, 900, 0), (390, 1100, 1)):
        browser.set_window_size(width, height)
        browser.get(f"{url}/")
        menu = Select(browser.find_element(By.ID, "example"))
        assert len(menu.options) == 4  # the prompt and three reviews
        menu.select_by_index(example + 1)
        text = browser.find_element(By.ID, "review").get_property("value")
        assert len(text) > 100
        _check_page_shows(browser, _wait_for(browser, url, text))
        # Readable: nothing wider than the window.
        page_width = browser.execute_script(
            "return document.documentElement.scrollWidth"
        )
        assert page_width <= width
        path = screenshots / f"serve-{width}.png"
        assert browser.save_screenshot(str(path))
        assert png_size(path)[0] == width


def test_an_edited_example_comes_back_when_picked_again(browser, url):
    browser.set_window_size(1280, 900)
    browser.get(f"{url}/")
    menu = Select(browser.find_element(By.ID, "example"))
    review = browser.find_element(By.ID, "review")
    menu.select_by_index(1)
    original = review.get_property("value")
    review.send_keys(" Awful.")
    assert review.get_property("value") == original + " Awful."
    assert menu.first_selected_option.get_attribute("value") == ""  # the prompt
    menu.select_by_index(1)
    assert review.get_property("value") == original
    _wait_for(browser, url, original)


def _gaps(browser) -> list[int]:
    """Where the page's `[…]` marks stand among the tokens' spans."""
    return browser.execute_script(
        "return [...document.querySelectorAll('#tokens .token, #tokens .gap')]"
        ".flatMap((s, i) => s.classList.contains('gap') ? [i] : []);"
    )


def test_a_long_review_shows_where_words_were_skipped(browser, url):
    browser.set_window_size(1280, 900)
    browser.get(f"{url}/")
    review = browser.find_element(By.ID, "review")
    # 440 tokens: longer than the tiny model's max_len, and the default's (400).
    long = " ".join([POSITIVE] * 40)
    browser.execute_script(_TYPE_EVERY_KEY, review, long)
    expected = _wait_for(browser, url, long)
    n = len(expected["tokens"])
    if os.environ.get("KERAS_SELFATTN_BROWSER_MODEL"):  # another model: cut
        assert expected["gap_after"] is not None  # somewhere (the default's: 99)
    else:  # The tiny model keeps a long review's start (head_len=None).
        assert expected["gap_after"] == n - 1
    assert _gaps(browser) == [expected["gap_after"] + 1]
    # A model that keeps the end (head_len=0) answers -1: the mark comes first.
    browser.execute_script("render(arguments[0]);", {**expected, "gap_after": -1})
    assert _gaps(browser) == [0]
    browser.execute_script("render(arguments[0]);", {**expected, "gap_after": None})
    assert _gaps(browser) == []
