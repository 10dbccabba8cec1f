"""The console in a real browser: Debian's Chromium, headless, driven by Selenium through
Debian's chromium-driver (scripts/setup-system.sh installs both), against a real local
cluster. A person's steps: search by key, open a message, switch its body to hex, log in;
no script of a stored message runs; axe-core finds no serious accessibility violation.

The console is its own process (``msgstore console``) in front of the cluster, as users
run it. Screenshots of every page go to the test's directory, or to ``MSGSTORE_CONSOLE_SHOTS``
when set (docs/console/ holds the ones docs/CONSOLE.md shows)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from storage_node.client import Client
from tests.integration.console.chromium_driver import (
    By,
    WebDriverWait,
    chromium,
    needs_chromium,
    wait_for,
)
from tests.integration.console.conftest import ORDERS, TOKEN, XSS_KEY

AXE = Path(__file__).with_name("vendor") / "axe-core-4.14.1.min.js"
pytestmark = needs_chromium


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("MSGSTORE_CONSOLE_SHOTS")
    path = Path(target) if target else tmp_path_factory.mktemp("shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


@pytest.fixture(scope="module")
def billing(sample) -> str:
    """A consumer group with lag on one partition and none on another."""
    with Client(sample.endpoint) as client:
        spans = client.describe_topic(ORDERS)["partition_offsets"]
        busy = [i for i in spans if i["next_offset"] > 1]
        client.commit_offset("billing", ORDERS, busy[0]["partition"], busy[0]["next_offset"])
        client.commit_offset("billing", ORDERS, busy[1]["partition"], 1)
        # some traffic, so the charts of the screenshots have something to draw
        client.produce(ORDERS, [{"key": f"order-{n}", "value": "{}"} for n in range(300, 400)])
    return "billing"


def serious_violations(driver) -> list[str]:
    """axe-core's serious and critical findings on the page shown (injected by the test:
    WebDriver's scripts are not bound by the page's Content-Security-Policy)."""
    driver.execute_script(AXE.read_text(encoding="utf-8"))
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document).then(r => done(r.violations.map("
        "v => [v.impact, v.id, v.nodes.map(n => n.target.join(' ')).join(', ')])));"
    )
    return [
        f"{impact} {rule}: {where}"
        for impact, rule, where in result
        if impact in ("serious", "critical")
    ]


def test_search_by_key_then_the_message_then_hex(sample, browser, shots):
    browser.get(sample.console + "/search")
    wait_for(browser, "#key-search")
    browser.find_element(By.ID, "topic").send_keys(ORDERS)
    browser.find_element(By.ID, "key").send_keys("order-42")
    browser.find_element(By.CSS_SELECTOR, "#key-search button[type=submit]").click()
    wait_for(browser, "#summary")
    assert browser.find_element(By.ID, "summary").text.startswith("4 shown")
    tags = [
        r.find_elements(By.TAG_NAME, "td")[4].text
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.message-row")
    ]
    assert tags == ["shipped", "packed", "paid", "created"]  # newest first

    browser.find_elements(By.CSS_SELECTOR, "a.msg-link")[2].click()  # "paid"
    wait_for(browser, "#msg-id")
    assert browser.find_element(By.ID, "msg-id").text == sample.order42[1]["msg_id"]
    assert browser.find_element(By.ID, "tag").text == "paid"
    assert '"step": "paid"' in browser.find_element(By.ID, "body").text
    browser.save_screenshot(str(shots / "message.png"))

    browser.find_element(By.ID, "view-hex").click()
    wait_for(browser, "#body.body-hex")
    assert browser.find_element(By.ID, "view-current").text == "hex"
    assert browser.find_element(By.ID, "body").text.startswith("00000000  7b 22 6f 72 64 65 72 22")


def test_a_stored_script_never_runs(sample, browser, shots):
    browser.get(f"{sample.console}/search?topic={ORDERS}&key={quote(XSS_KEY)}")
    wait_for(browser, "#summary")
    assert browser.title != "pwned"
    assert browser.find_element(By.CSS_SELECTOR, "td.key").text == XSS_KEY
    browser.get(f"{sample.console}/messages/{sample.xss['msg_id']}?view=text")
    wait_for(browser, "#body")
    assert browser.find_element(By.ID, "body").text == "<script>x=1</script>"
    assert browser.execute_script("return typeof window.x") == "undefined"
    assert browser.find_elements(By.CSS_SELECTOR, "main img") == []


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("cluster", "/"),
        ("topics", "/topics"),
        ("topic", f"/topics/{ORDERS}"),
        ("search-key", f"/search?topic={ORDERS}&key=order-42"),
        ("search-offset", f"/search?topic={ORDERS}&partition=0&offset=0"),
        ("message", None),
        ("search-time", f"/search?topic={ORDERS}&from=0&limit=20"),
        ("groups", "/groups"),
        ("group", "/groups/billing"),
        ("replication", "/replication"),
        ("error", "/search?msg_id=not-an-id"),
    ],
)
def test_pages_have_no_serious_accessibility_violation(sample, billing, browser, shots, name, path):
    browser.get(sample.console + (path or f"/messages/{sample.order42[0]['msg_id']}"))
    wait_for(browser, "main h1")
    if name in ("cluster", "topic", "group"):  # charts drawn from scrapes with traffic
        with Client(sample.endpoint) as client:

            def traffic(d) -> bool:
                client.produce(ORDERS, [{"key": "order-500", "value": "{}"}] * 20)
                d.refresh()
                captions = [c.text for c in d.find_elements(By.CSS_SELECTOR, "figcaption")]
                return any("peak 0" not in c for c in captions) and bool(
                    d.find_elements(By.CSS_SELECTOR, "svg.chart polyline")
                )

            WebDriverWait(browser, 60, 1).until(traffic)
    browser.save_screenshot(str(shots / f"{name}.png"))
    assert serious_violations(browser) == []


def test_log_in_in_the_browser(secured, browser, shots):
    browser.delete_all_cookies()
    browser.get(f"{secured.console}/topics")
    wait_for(browser, "#login-form")
    assert "/login" in browser.current_url
    assert serious_violations(browser) == []
    browser.save_screenshot(str(shots / "login.png"))
    browser.find_element(By.ID, "token").send_keys("wrong")
    browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
    wait_for(browser, "#login-failed")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
    wait_for(browser, "#topics")
    assert browser.current_url == f"{secured.console}/topics"
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script sees it
    browser.get(f"{secured.console}/groups/billing")  # admin mode: the reset form
    wait_for(browser, "#reset-form")
    assert serious_violations(browser) == []
    browser.save_screenshot(str(shots / "group-admin.png"))
    browser.find_element(By.CSS_SELECTOR, "form[action='/logout'] button").click()
    wait_for(browser, "#login-form")


def test_the_accessibility_check_catches_a_planted_violation(sample, browser):
    """The check above can fail: light grey text on white and an unlabeled field are found."""
    browser.get(sample.console + "/topics")
    wait_for(browser, "main h1")
    browser.execute_script(
        "const p = document.createElement('p'); p.textContent = 'invisible';"
        "p.style.color = '#bbb'; p.style.background = '#fff';"
        "const i = document.createElement('input'); i.type = 'text';"
        "document.querySelector('main').append(p, i);"
    )
    found = " ".join(serious_violations(browser))
    assert "color-contrast" in found and "label" in found
