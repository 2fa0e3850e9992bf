"""The console at /ui in a real headless browser (Debian's chromium, driven by
chromedriver through Selenium): the page loads with nothing from another origin, a
token logs in, a query fills the table and draws one chart line per series, a zoom
narrows the chart, a bad query shows the node's error, the cluster and storage pages
show the node, and the header shows live rates from /metrics.

Screenshots are kept as test artefacts in `$CARGO_TARGET_DIR/artefacts/` (or
`CONSOLE_ARTEFACTS`).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import TOKEN

#: Longest any one thing the page does may take to show.
DEADLINE_S = 30.0
HOSTS = ["a", "b", "c"]
POINTS = 30


def artefacts_dir() -> Path:
    explicit = os.environ.get("CONSOLE_ARTEFACTS")
    if explicit:
        path = Path(explicit)
    else:
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/quiver-target")
        path = Path(target) / "artefacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


def wait_until(what: str, check, deadline_s: float = DEADLINE_S):
    """Polls `check()` until it returns something truthy; fails naming `what` at the deadline."""
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except WebDriverException as e:  # an element replaced while read
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what}: not seen within {deadline_s}s (last: {last!r})")


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.fail("chromium and chromedriver are needed (Debian: chromium chromium-driver)")
    # Selenium Manager must not try to download a browser or driver: both are given.
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--no-first-run",
        "--disable-extensions",
    ]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def severe_console_messages(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_console_queries_charts_and_shows_the_cluster(node, db, browser):
    # Three hosts, POINTS points each, one second apart, ending now.
    now_ns = time.time_ns() // 1_000_000_000 * 1_000_000_000
    lines = [
        f"cpu,host={h} usage={10 * (i + 1) + j}.5 {now_ns - (POINTS - j) * 1_000_000_000}"
        for i, h in enumerate(HOSTS)
        for j in range(POINTS)
    ]
    node.write_lines(db, lines)
    driver = browser
    find = driver.find_element

    driver.get(node.url + "/ui")
    wait_until("the login form", lambda: find(By.ID, "login-form").is_displayed())
    assert not find(By.ID, "query-page").is_displayed()

    # A wrong token is refused and stays out.
    find(By.ID, "token").send_keys("not-the-token", Keys.ENTER)
    error = wait_until("the login error", lambda: find(By.ID, "login-error").text)
    assert "does not know this token" in error

    wait_until("the token field emptied", lambda: find(By.ID, "token").get_attribute("value") == "")
    find(By.ID, "token").send_keys(TOKEN, Keys.ENTER)
    wait_until("the query page", lambda: find(By.ID, "query-page").is_displayed())
    # The token is in this tab's session storage only.
    assert driver.execute_script("return sessionStorage.getItem('quiver.token')") == TOKEN
    assert driver.execute_script(
        "return Object.keys(localStorage).filter(k => localStorage.getItem(k).includes(arguments[0]))",
        TOKEN,
    ) == []

    database = find(By.ID, "database")
    wait_until(
        "the database picker lists the database",
        lambda: db in driver.execute_script(
            "return [...document.querySelectorAll('#databases option')].map(o => o.value)"
        ),
    )
    database.clear()
    database.send_keys(db)
    sql = find(By.ID, "sql")
    sql.send_keys("SELECT time, host, usage FROM cpu ORDER BY time, host")
    find(By.ID, "run").click()

    rows = wait_until(
        "the result table",
        lambda: len(driver.find_elements(By.CSS_SELECTOR, "#result-table tbody tr")) == len(lines)
        and driver.find_elements(By.CSS_SELECTOR, "#result-table tbody tr"),
    )
    assert [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#result-table thead th")] == [
        "time",
        "host",
        "usage",
    ]
    assert rows[0].find_elements(By.TAG_NAME, "td")[1].text == "a"
    paths = wait_until(
        "one chart line per host",
        lambda: len(driver.find_elements(By.CSS_SELECTOR, "#chart svg path.series")) == len(HOSTS)
        and driver.find_elements(By.CSS_SELECTOR, "#chart svg path.series"),
    )
    assert sorted(p.get_attribute("data-name") for p in paths) == [f"host={h}" for h in HOSTS]
    for p in paths:
        # POINTS points: one move and POINTS - 1 lines.
        assert p.get_attribute("d").count("L") == POINTS - 1, p.get_attribute("d")
    assert "rows in" in find(By.ID, "query-status").text
    driver.save_screenshot(str(artefacts_dir() / "console-query.png"))

    # Zoom: drag across the middle half of the plot; the time range narrows.
    svg = find(By.CSS_SELECTOR, "#chart svg")
    full = (float(svg.get_attribute("data-x-min")), float(svg.get_attribute("data-x-max")))
    overlay = find(By.CSS_SELECTOR, "#chart svg rect.overlay")
    width = overlay.size["width"]
    ActionChains(driver).move_to_element_with_offset(overlay, -width // 4, 0).click_and_hold().move_by_offset(
        width // 2, 0
    ).release().perform()
    zoomed = wait_until(
        "a narrower chart",
        lambda: (
            float(find(By.CSS_SELECTOR, "#chart svg").get_attribute("data-x-min")),
            float(find(By.CSS_SELECTOR, "#chart svg").get_attribute("data-x-max")),
        )
        != full
        and find(By.CSS_SELECTOR, "#chart svg"),
    )
    span = float(zoomed.get_attribute("data-x-max")) - float(zoomed.get_attribute("data-x-min"))
    assert span < (full[1] - full[0]) * 0.75, (span, full)
    reset = find(By.ID, "zoom-reset")
    assert reset.is_displayed()
    driver.save_screenshot(str(artefacts_dir() / "console-zoomed.png"))
    reset.click()
    wait_until(
        "the full range again",
        lambda: float(find(By.CSS_SELECTOR, "#chart svg").get_attribute("data-x-min")) == full[0],
    )

    # A bad query shows the node's error, and no stale result.
    sql.clear()
    sql.send_keys("SELECT * FROM no_such_table")
    sql.send_keys(Keys.CONTROL, Keys.ENTER)
    error = wait_until(
        "the query error", lambda: find(By.ID, "query-error").is_displayed() and find(By.ID, "query-error").text
    )
    assert "no_such_table" in error, error
    assert error.startswith("4"), error
    assert driver.find_elements(By.CSS_SELECTOR, "#result-table") == []
    assert not find(By.ID, "chart").is_displayed()
    driver.save_screenshot(str(artefacts_dir() / "console-error.png"))

    # History keeps both queries, newest first, in localStorage.
    history = driver.execute_script("return JSON.parse(localStorage.getItem('quiver.history'))")
    assert history[:2] == [
        "SELECT * FROM no_such_table",
        "SELECT time, host, usage FROM cpu ORDER BY time, host",
    ]
    assert len(driver.find_elements(By.CSS_SELECTOR, "#history li")) >= 2

    # Live rates from two samples of /metrics: while rows are written and queries run,
    # both rates go above zero.
    def busy_rate(element_id: str):
        node.write_lines(db, [f"load v=1 {time.time_ns()}"])
        node.sql(db, "SELECT count(*) FROM load")
        text = find(By.ID, element_id).text.replace(",", "")
        try:
            return float(text) > 0 and text
        except ValueError:
            return False

    wait_until("a positive ingest rate", lambda: busy_rate("rate-ingest"))
    wait_until("a positive query rate", lambda: busy_rate("rate-queries"))

    # The cluster page: a single node leads.
    find(By.CSS_SELECTOR, "#nav a[data-page=cluster]").click()
    wait_until("the node's role", lambda: find(By.ID, "cluster-role").text == "leader")
    members = driver.find_elements(By.CSS_SELECTOR, "#cluster-members tbody tr")
    assert len(members) == 1 and "this node" in members[0].text, [m.text for m in members]
    driver.save_screenshot(str(artefacts_dir() / "console-cluster.png"))

    # The storage page: the database and its measurement with its rows.
    find(By.CSS_SELECTOR, "#nav a[data-page=storage]").click()
    section = wait_until(
        "the database on the storage page",
        lambda: driver.find_elements(By.CSS_SELECTOR, f"section.database[data-database='{db}']"),
    )[0]
    rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in section.find_elements(By.CSS_SELECTOR, "tbody tr")]
    cpu = [r for r in rows if r[0] == "cpu"]
    assert cpu and cpu[0][2] == str(len(lines)), rows
    assert any(r[0] == "load" for r in rows), rows
    assert "forever" in section.text
    driver.save_screenshot(str(artefacts_dir() / "console-storage.png"))

    # Nothing was fetched from anywhere but the node, and the page broke no rule (CSP).
    origin = urlparse(node.url).netloc
    resources = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert resources and all(urlparse(r).netloc == origin for r in resources), resources
    # The refused login (401) and the bad query (400) are logged as failed loads.
    severe = [m for m in severe_console_messages(driver) if "Failed to load resource" not in m]
    assert severe == [], severe

    # Log out: the token is gone, and a reload asks for one again.
    find(By.ID, "logout").click()
    wait_until("the login form again", lambda: find(By.ID, "login-form").is_displayed())
    assert driver.execute_script("return sessionStorage.getItem('quiver.token')") is None
    driver.refresh()
    wait_until("the login form after reload", lambda: find(By.ID, "login-form").is_displayed())


def test_console_without_authentication_needs_no_login(browser, tmp_path):
    """A node started with authentication off (`--auth none`, the README's first run)
    opens the console at once: no login form, no logout, queries run."""
    from conftest import Node, binary_path

    open_node = Node(binary_path(), tmp_path, extra_env={"QUIVER_AUTH_ENABLED": "false"})
    open_node.start()
    try:
        driver = browser
        find = driver.find_element
        driver.get(open_node.url + "/ui#query")
        wait_until("the query page", lambda: find(By.ID, "query-page").is_displayed())
        assert not find(By.ID, "login-page").is_displayed()
        assert not find(By.ID, "logout").is_displayed()
        assert driver.execute_script("return sessionStorage.getItem('quiver.token')") is None
        open_node.write_lines("opendb", [f"m v=1 {time.time_ns()}"])
        database = find(By.ID, "database")
        database.clear()
        database.send_keys("opendb")
        sql = find(By.ID, "sql")
        sql.clear()
        sql.send_keys("SELECT count(*) AS n FROM m")
        find(By.ID, "run").click()
        wait_until(
            "the one-row result",
            lambda: [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#result-table tbody td")] == ["1"],
        )
        # No time column: a table, no chart.
        assert not find(By.ID, "chart").is_displayed()
    finally:
        open_node.stop()


def module_call(driver, node_url: str, module: str, function: str, *args):
    """Imports one of the console's modules in the page and returns
    `function(*args)` (arguments and result as JSON; no eval, which the CSP forbids)."""
    driver.get(node_url + "/ui")
    base = wait_until(
        "the page's script",
        lambda: driver.execute_script(
            "const s = document.querySelector('script[type=module]'); return s && s.src.replace(/app\\.js$/, '')"
        ),
    )
    got = driver.execute_async_script(
        """const [url, name, args, done] = arguments;
        import(url)
          .then((m) => done({value: JSON.parse(JSON.stringify(m[name](...args) ?? null))}))
          .catch((e) => done({error: String(e)}));""",
        base + module,
        function,
        list(args),
    )
    assert "error" not in got, got
    return got["value"]


def test_console_reads_prometheus_text_and_computes_rates(node, browser):
    text = "\n".join(
        [
            "# HELP quiver_rows_applied_total rows",
            "# TYPE quiver_rows_applied_total counter",
            "quiver_rows_applied_total 1500",
            'quiver_query_seconds{quantile="0.5"} 0.25',
            "quiver_query_seconds_count 7",
            'quiver_rows_written_total{format="lp",note="a } b"} 10 1700000000000',
            'quiver_rows_written_total{format="msgpack"} 5',
            "quiver_rows_written_total_other 99",
            "quiver_broken NaN",
        ]
    )
    names = ["quiver_rows_applied_total", "quiver_query_seconds_count", "quiver_rows_written_total", "quiver_broken"]
    got = module_call(browser, node.url, "rates.js", "sumMetrics", text, names)
    assert got == {
        "quiver_rows_applied_total": 1500,
        "quiver_query_seconds_count": 7,
        "quiver_rows_written_total": 15,
    }, got
    got = module_call(
        browser,
        node.url,
        "rates.js",
        "rates",
        {"at": 1000, "values": {"a": 10, "b": 50, "gone": 1}},
        {"at": 3000, "values": {"a": 30, "b": 5, "new": 2}},
    )
    # a: 20 in 2 s; b went backwards (a restart): no rate; new: no earlier sample.
    assert got == {"a": 10, "b": None, "new": None}, got


def test_console_charts_only_time_series(node, browser):
    t0, t1 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:01.123456789Z"
    ms0 = 1767225600000
    cases = [
        # one series per tag value; nanosecond times read to the millisecond
        (
            (["time", "host", "v"], [[t0, "a", 1], [t0, "b", 2], [t1, "a", 3]]),
            {
                "series": [
                    {"name": "host=a", "points": [[ms0, 1], [ms0 + 1123, 3]]},
                    {"name": "host=b", "points": [[ms0, 2]]},
                ],
                "dropped": 0,
            },
        ),
        # several numeric columns, no tags: one series per column
        (
            (["time", "x", "y"], [[t0, 1, 2]]),
            {"series": [{"name": "x", "points": [[ms0, 1]]}, {"name": "y", "points": [[ms0, 2]]}], "dropped": 0},
        ),
        # no time column, nothing numeric, or a time that is not one: a table only
        ((["host", "v"], [["a", 1]]), None),
        ((["time", "host"], [[t0, "a"]]), None),
        ((["time", "v"], [["yesterday", 1]]), None),
    ]
    for args, expected in cases:
        assert module_call(browser, node.url, "series.js", "timeSeries", *args) == expected, args
    # More series than are drawn: the first 20, and how many were left out.
    many = module_call(
        browser, node.url, "series.js", "timeSeries", ["time", "k", "v"], [[t0, f"k{i}", i] for i in range(25)]
    )
    assert (len(many["series"]), many["dropped"]) == (20, 5), many


def test_console_links_to_members_by_their_address(node, browser):
    # Member addresses are stored with or without a scheme; a link needs an origin.
    assert module_call(browser, node.url, "cluster.js", "origin", "10.0.0.2:8000") == "http://10.0.0.2:8000"
    assert module_call(browser, node.url, "cluster.js", "origin", "https://q2:8000/") == "https://q2:8000"
