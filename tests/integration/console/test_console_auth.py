"""With a node token the console needs a login: no page without a session, a wrong token
refused, the login and logout forms refused without their CSRF token or from another site,
and a session cookie that scripts cannot read and other sites cannot send."""

from __future__ import annotations

import re

import requests

from tests.integration.console.conftest import ORDERS, READ_TOKEN, TOKEN, get, rows

PAGES = ["/", "/topics", f"/topics/{ORDERS}", "/groups", f"/search?topic={ORDERS}&key=order-42"]


def login_form(base: str, session: requests.Session, target: str = "/") -> str:
    """The login form's CSRF token (the form binds it to this browser's cookie)."""
    page = session.get(f"{base}/login", params={"next": target}, timeout=30)
    assert page.status_code == 200
    return re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)


def logged_in(base: str, token: str = TOKEN) -> requests.Session:
    s = requests.Session()
    csrf = login_form(base, s)
    answer = s.post(
        f"{base}/login", data={"token": token, "csrf": csrf, "next": "/"}, allow_redirects=False
    )
    assert answer.status_code == 303, answer.text[:300]
    return s


def test_every_page_redirects_to_login_without_a_session(secured):
    for path in PAGES + ["/messages/orders-7f000001-1-1", "/messages/orders-7f000001-1-1/raw"]:
        page = get(secured.console, path)
        assert page.status_code == 303, path
        assert page.headers["Location"].startswith("/login?next="), path
    forged = get(secured.console, "/", cookies={"msgstore_session": "9999999999.abcd.ffff"})
    assert forged.status_code == 303


def test_login_with_the_token_sets_a_strict_httponly_cookie(secured):
    s = requests.Session()
    csrf = login_form(secured.console, s, f"/search?topic={ORDERS}&key=order-42")
    wrong = s.post(
        f"{secured.console}/login", data={"token": "nope", "csrf": csrf}, allow_redirects=False
    )
    assert wrong.status_code == 401 and "not valid" in wrong.text
    assert "msgstore_session" not in s.cookies
    answer = s.post(
        f"{secured.console}/login",
        data={"token": TOKEN, "csrf": csrf, "next": f"/search?topic={ORDERS}&key=order-42"},
        allow_redirects=False,
    )
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"/search?topic={ORDERS}&key=order-42"
    cookie = answer.headers["Set-Cookie"]
    assert "msgstore_session=" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert TOKEN not in cookie
    for path in PAGES:
        assert s.get(secured.console + path, timeout=30).status_code == 200, path
    found = s.get(f"{secured.console}/search?topic={ORDERS}&key=order-42", timeout=30)
    assert [r[3] for r in rows(found.text)] == ["order-42"] * 3


def test_login_refuses_a_post_without_csrf_or_from_another_site(secured):
    s = requests.Session()
    csrf = login_form(secured.console, s)
    no_csrf = s.post(f"{secured.console}/login", data={"token": TOKEN}, allow_redirects=False)
    assert no_csrf.status_code == 403
    other_browser = requests.post(
        f"{secured.console}/login", data={"token": TOKEN, "csrf": csrf}, allow_redirects=False
    )  # the form's token without the cookie it is bound to
    assert other_browser.status_code == 403
    cross_site = s.post(
        f"{secured.console}/login",
        data={"token": TOKEN, "csrf": csrf},
        headers={"Origin": "http://evil.example"},
        allow_redirects=False,
    )
    assert cross_site.status_code == 403
    for refused in (no_csrf, other_browser, cross_site):
        assert "msgstore_session" not in refused.headers.get("Set-Cookie", "")
    assert "msgstore_session" not in s.cookies


def test_login_never_redirects_off_the_console(secured):
    s = requests.Session()
    csrf = login_form(secured.console, s)
    answer = s.post(
        f"{secured.console}/login",
        data={"token": TOKEN, "csrf": csrf, "next": "//evil.example/x"},
        allow_redirects=False,
    )
    assert answer.status_code == 303 and answer.headers["Location"] == "/"


def test_logout_needs_the_session_csrf_token(secured):
    s = logged_in(secured.console)
    page = s.get(f"{secured.console}/topics", timeout=30)
    csrf = re.search(r'action="/logout".*?name="csrf" value="([0-9a-f]+)"', page.text, re.S)
    refused = s.post(f"{secured.console}/logout", data={}, allow_redirects=False)
    assert refused.status_code == 403
    assert s.get(f"{secured.console}/topics", timeout=30, allow_redirects=False).status_code == 200
    out = s.post(f"{secured.console}/logout", data={"csrf": csrf.group(1)}, allow_redirects=False)
    assert out.status_code == 303
    assert s.get(f"{secured.console}/topics", timeout=30, allow_redirects=False).status_code == 303


def test_a_console_session_is_no_api_credential_and_holds_no_token(secured):
    s = logged_in(secured.console)
    assert s.get(f"{secured.console}/v1/topics", timeout=30).status_code == 404  # no API here
    cookies = {c.name: c.value for c in s.cookies}
    assert (
        requests.get(f"{secured.endpoint}/v1/topics", cookies=cookies, timeout=30).status_code
        == 401
    )
    assert all(TOKEN not in v for v in cookies.values())
    page = s.get(f"{secured.console}/groups/billing", timeout=30)
    assert TOKEN not in page.text and READ_TOKEN not in page.text
