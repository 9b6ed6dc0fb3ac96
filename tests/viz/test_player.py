"""The HTML animation player, as a page and opened in a real headless browser (Chromium)."""

import os
import shutil
import time

import numpy as np
import pytest

from graphformer.viz.player import player_page
from graphformer.viz.plots import AttentionPicture, draw_frames

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
SECONDS_PER_FRAME = 0.1


def test_a_caption_cannot_end_the_players_script():
    page = player_page([b"x"], ["enc layer 1 of 1, head 0, epoch 1, label </script><script>alert(1)</script>"], "t")
    assert page.count("</script>") == 1  # the player's own


def _unavailable(reason: str):
    """Skip where there is no browser; in CI (``CI`` set) a missing browser is a failure."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the player in a browser, but {reason} (.ci/run installs chromium)")
    pytest.skip(f"{reason}: apt-get install chromium chromium-driver, and pip install selenium")


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium through chromedriver, keeping the console and network logs."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed")
    binary = next(filter(None, map(shutil.which, BROWSERS)), None)
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        _unavailable(f"no {'browser' if binary is None else 'chromedriver'} was found")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--proxy-server=127.0.0.1:9",
    ):  # a request to anywhere outside fails
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A player of three frames (real PNG pictures) with their captions, and the frames."""
    rng = np.random.default_rng(0)
    pictures = [
        AttentionPicture(
            rng.random((1, 3, 3)),
            ["a", "b", "</s>"],
            ["<s>", "a", "b"],
            ["head 0"],
            f"enc layer 1 of 1, head 0, epoch {epoch}",
        )
        for epoch in range(3)
    ]
    frames = draw_frames(pictures)
    path = tmp_path_factory.mktemp("player") / "player.html"
    path.write_text(player_page(frames, [p.title for p in pictures], "enc layer 1 of 1", SECONDS_PER_FRAME))
    return path, [p.title for p in pictures]


def _shown(driver):
    """The caption shown, the slider's value, and whether the image decoded."""
    return driver.execute_script("""
        const img = document.querySelector("img");
        return [document.querySelector(".caption").textContent, document.querySelector("input").value,
                img.complete && img.naturalWidth > 0];""")


def _requested_urls(driver):
    import json

    events = (json.loads(entry["message"])["message"] for entry in driver.get_log("performance"))
    return [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]


def test_the_player_steps_plays_and_slides_offline_in_a_browser(browser, page):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    path, captions = page
    browser.get(path.as_uri())
    assert browser.title == "enc layer 1 of 1"
    assert _shown(browser) == [captions[0], "0", True]
    previous, play, following = browser.find_elements(By.TAG_NAME, "button")
    following.click()
    assert _shown(browser) == [captions[1], "1", True]
    previous.click()
    previous.click()  # before the first frame comes the last
    assert _shown(browser) == [captions[2], "2", True]
    slider = browser.find_element(By.CSS_SELECTOR, "input[type=range]")
    slider.send_keys(Keys.HOME)
    assert _shown(browser) == [captions[0], "0", True]
    slider.send_keys(Keys.ARROW_RIGHT)
    assert _shown(browser) == [captions[1], "1", True]

    play.click()
    assert play.text == "pause"
    WebDriverWait(browser, 5, poll_frequency=0.02).until(lambda d: _shown(d)[0] == captions[2])
    WebDriverWait(browser, 5, poll_frequency=0.02).until(lambda d: _shown(d)[0] == captions[0])  # it loops
    play.click()
    assert play.text == "play"
    stopped = _shown(browser)
    time.sleep(3 * SECONDS_PER_FRAME)
    assert _shown(browser) == stopped and stopped[2]

    requested = _requested_urls(browser)
    assert path.as_uri() in requested  # the log sees the page's requests
    outside = [url for url in requested if not url.startswith(("file:", "data:"))]
    assert outside == [], "the page must load nothing from the network"
    errors = [entry for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
    assert errors == []
