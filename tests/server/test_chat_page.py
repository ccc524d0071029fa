"""
The chat page at / works in a real browser: headless Chromium (Debian's chromium and chromium-driver,
driven by selenium) types a message into #input, clicks #send, and an .assistant element in #messages
fills with text; #stop ends a long answer early and the page takes the next message. Screenshots go to
the build directory (server-logs/chat-page*.png) for a person to look at.
"""
import os
import shutil
import time

import pytest

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(120)]


def find(*names):
    for n in names:
        path = shutil.which(n) or (n if os.path.exists(n) else None)
        if path:
            return path
    pytest.fail(f"none of {names} is installed (scripts/apt-install.sh chromium chromium-driver)")


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = find("chromium", "/usr/bin/chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1000,800", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(find("chromedriver", "/usr/bin/chromedriver")))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def assistant_texts(driver):
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#messages .assistant")]


def send(driver, text):
    box = driver.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()


def test_chat_page_sends_a_message_and_shows_the_answer(server, browser, logdir):
    browser.get(server.base + "/")
    WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "input").is_displayed())
    send(browser, "Tell me a story about a cat.")
    WebDriverWait(browser, 60).until(lambda d: any(t.strip() for t in assistant_texts(d)))
    # Let the answer finish, then keep a picture of it.
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "send").is_enabled())
    browser.save_screenshot(str(logdir / "chat-page.png"))
    assert assistant_texts(browser)[-1].strip()
    user = browser.find_elements(By.CSS_SELECTOR, "#messages .user")
    assert user and "cat" in user[-1].text


def test_stop_button_ends_a_long_answer_and_the_page_goes_on(server, browser, logdir):
    browser.get(server.base + "/")
    WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "input").is_displayed())
    # An answer long enough to be stopped: most of the context.
    browser.execute_script("document.getElementById('max-tokens').value = 1900;")
    cancelled = server.metrics()['kiln_requests_total{status="cancelled"}']
    # The bundled model writes thousands of tokens a second, faster than a WebDriver round trip: a click
    # made in the page itself, the moment the first words show, stands in for a quick user.
    browser.execute_script("""
        new MutationObserver((_, obs) => {
            const replies = document.querySelectorAll('#messages .assistant');
            const last = replies[replies.length - 1];
            if (last && last.textContent.trim()) { obs.disconnect(); document.getElementById('stop').click(); }
        }).observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true});
    """)
    send(browser, "Tell me a very long story about a dragon.")
    WebDriverWait(browser, 60).until(lambda d: any(t.strip() for t in assistant_texts(d)))
    WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "send").is_enabled())
    stopped = assistant_texts(browser)[-1]
    time.sleep(1.0)
    assert assistant_texts(browser)[-1] == stopped, "text kept coming after #stop"
    assert 0 < len(stopped.split()) < 1000, "the answer was not cut short"
    assert not browser.find_element(By.ID, "stop").is_enabled()
    # The server saw the client go and freed the sequence.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = server.metrics()
        if m['kiln_requests_total{status="cancelled"}'] > cancelled and m["kiln_running_sequences"] == 0:
            break
        time.sleep(0.1)
    assert m['kiln_requests_total{status="cancelled"}'] == cancelled + 1
    assert m["kiln_running_sequences"] == 0
    send(browser, "And then?")
    WebDriverWait(browser, 60).until(lambda d: len([t for t in assistant_texts(d) if t.strip()]) >= 2)
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "send").is_enabled())
    browser.save_screenshot(str(logdir / "chat-page-after-stop.png"))
