"""The web console in headless Chromium against the real stack (issue 14; SPEC R17, R18,
R10.3, R15.4): edit an override and see the preview and a validation error; publish and
see the release; inspect a call of a summarized session and follow a source link to the
paged read-back; a viewer without a grant is refused."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from domain.auth import KeyKind
from tests.browser.conftest import shot
from tests.support.flows import client, new_session
from tests.support.services import TEST_SPACE, Services
from tests.support.summarized import summarized_call

pytestmark = pytest.mark.integration
WAIT_S = 30  # how long a page may take to show what it must; never asserted as a bound


def sign_in(driver: webdriver.Chrome, console: str, key: str, then: str = "/inspector") -> None:
    driver.delete_all_cookies()
    driver.get(f"{console}/login?next={then}")
    driver.find_element(By.ID, "api_key").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(driver, WAIT_S).until(ec.presence_of_element_located((By.ID, "viewer")))


def wait_text(driver: webdriver.Chrome, css: str, text: str) -> str:
    """The element's text once it holds ``text``. Live validation replaces the preview
    while we read it: an element gone stale is looked up again."""

    def holds(d: webdriver.Chrome) -> str | bool:
        found = str(d.find_element(By.CSS_SELECTOR, css).text)
        return found if text in found else False

    wait = WebDriverWait(
        driver, WAIT_S, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
    )
    return str(wait.until(holds))


async def prepare_get(services: Services, path: str) -> dict[str, Any]:
    """Read through Prepare's API with the test host key."""
    async with httpx.AsyncClient(base_url=services.prepare_url) as http:
        r = await http.get(path, headers={"Authorization": f"Bearer {services.api_key}"})
    r.raise_for_status()
    out: dict[str, Any] = r.json()
    return out


async def sent_request(db: asyncpg.Pool, call_id: str) -> dict[str, Any]:
    """The provider request the gateway answered for the call (its stored blob)."""
    text = await db.fetchval(
        "SELECT convert_from(b.content, 'UTF8') FROM model_calls m JOIN sessions s"
        " USING (session_id) JOIN blobs b ON b.space_id = s.space_id"
        " AND b.sha256 = m.final_input_sha256 WHERE m.call_id=$1",
        call_id,
    )
    return dict(json.loads(text))


def console_errors(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


@pytest.mark.spec("R17", "R7.7", "R6.1")
async def test_an_override_shows_in_the_preview_and_a_bad_value_beside_its_field(
    browser: webdriver.Chrome, console: str, services: Services
) -> None:
    async with client(services) as c:
        rel = await c.register_release(
            agent_id="console-agent",
            instructions="You help.",
            model_profile={
                "name": "m100k",
                "context_capacity": 100_000,
                "output_reserve": 0,
                "safety_margin": 0,
            },
        )
    sign_in(browser, console, services.api_key, "/settings/context-compaction")
    browser.find_element(By.ID, "release").send_keys(rel["release_id"])
    browser.find_element(By.ID, "f-compaction-user_turns").send_keys("3")
    # R7.8: InputBudget 100,000 and the default ratio 0.80 ⇒ the trigger at 80,000 tokens
    wait_text(browser, "#thresholds", "80000")
    wait_text(browser, "#effective", "compaction.user_turns 3 override")
    browser.find_element(By.ID, "f-compaction-context_ratio").send_keys("1.5")
    error = wait_text(browser, "#f-compaction-context_ratio-error", "(0, 1)")
    assert "context_ratio" in error
    wait_text(browser, "#draft-invalid", "1 error")
    field = browser.find_element(By.ID, "f-compaction-context_ratio")
    assert field.get_attribute("aria-invalid") == "true"
    assert browser.find_element(By.ID, "f-compaction-user_turns-error").text == ""
    shot(browser, "settings-validation")
    assert console_errors(browser) == []


@pytest.mark.spec("R17", "R1.4")
async def test_publish_makes_a_new_release_with_the_overrides(
    browser: webdriver.Chrome, console: str, services: Services
) -> None:
    async with client(services) as c:
        base = await new_session(c)
        sid = base["session_id"]
    rel_id = (await prepare_get(services, f"/v1/sessions/{sid}"))["release_id"]
    sign_in(browser, console, services.api_key, f"/settings/context-compaction?release={rel_id}")
    browser.find_element(By.ID, "f-compaction-model_steps").send_keys("5")
    browser.find_element(By.ID, "f-recent_complete_groups").send_keys("3")
    wait_text(browser, "#effective", "compaction.model_steps 5 override")
    browser.find_element(By.ID, "publish").click()
    new_id = wait_text(browser, "#published-release", "rel_")
    assert new_id != rel_id
    shot(browser, "settings-published")
    got = await prepare_get(services, f"/v1/releases/{new_id}")
    old = await prepare_get(services, f"/v1/releases/{rel_id}")
    assert got["context_policy"]["compaction"]["model_steps"] == 5
    assert got["context_policy"]["recent_complete_groups"] == 3
    assert got["model_profile"] == old["model_profile"]  # the rest of the release is kept
    assert old["context_policy"] != got["context_policy"]  # the base release is untouched
    assert console_errors(browser) == []


@pytest.mark.spec("R18", "R4.2", "R10.3", "R11.7")
async def test_the_inspector_shows_the_summarized_call_and_reads_a_source_back_paged(
    browser: webdriver.Chrome, console: str, services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        sid, call_id, source = await summarized_call(c, db)
    sign_in(browser, console, services.api_key)
    browser.find_element(By.LINK_TEXT, sid).click()
    browser.find_element(By.LINK_TEXT, call_id).click()
    wait_text(browser, "h1", call_id)
    blocks = browser.find_element(By.ID, "blocks").text
    assert "summary" in blocks and "history_summary" in blocks
    assert "summarized covered_by_summary" in blocks
    # Issue 28: each block shows the role it had in the provider request that was sent —
    # the summary a labelled user note, never system.
    sent = await sent_request(db, call_id)
    summary_id = await db.fetchval(
        "SELECT dependency_versions->>'summary_id' FROM model_calls WHERE call_id=$1", call_id
    )
    rows = {  # block id → the role shown
        cells[1].find_element(By.TAG_NAME, "code").text: cells[2].text
        for cells in (
            r.find_elements(By.TAG_NAME, "td")
            for r in browser.find_elements(By.CSS_SELECTOR, "#blocks tbody tr")
        )
    }
    in_request = [m["role"] for m in sent["messages"] if str(m.get("content")).startswith(
        f"[history summary {summary_id}")]  # fmt: skip
    assert rows[f"summary:{summary_id}"] == in_request[0] == "user"
    shown = [
        r.get_attribute("data-role")
        for r in browser.find_elements(By.CSS_SELECTOR, "#blocks tbody tr")
    ]
    assert [r for r in shown if r] == [m["role"] for m in sent["messages"]]
    chain = browser.find_element(By.ID, "summary-chain").text
    assert "Covers session sequences" in chain
    assert browser.find_elements(By.CSS_SELECTOR, "#budget-bar .seg")
    shot(browser, "inspector-call")
    browser.find_element(By.CSS_SELECTOR, "#summary-chain summary").click()
    link = browser.find_element(By.CSS_SELECTOR, f"#summary-chain a[href$='/records/{source}']")
    link.click()
    wait_text(browser, "h1", source)
    first_page = browser.find_element(By.ID, "content").text
    assert first_page.startswith("row0=0")
    browser.find_element(By.ID, "next-page").click()
    wait_text(browser, "#page-heading", "Characters 2000")
    assert browser.find_element(By.ID, "content").text not in first_page
    shot(browser, "inspector-readback")
    assert console_errors(browser) == []


@pytest.mark.spec("R17", "R7.1", "R11.7")
async def test_the_dry_run_shows_what_the_next_prepare_would_do_under_the_draft(
    browser: webdriver.Chrome, console: str, services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        sid, _, source = await summarized_call(c, db)
    rel_id = (await prepare_get(services, f"/v1/sessions/{sid}"))["release_id"]
    sign_in(browser, console, services.api_key, f"/settings/context-compaction?release={rel_id}")
    # A context trigger far below what the session already holds: it fires on the dry run.
    browser.find_element(By.ID, "f-compaction-context_ratio").send_keys("0.001")
    browser.find_element(By.ID, "f-compaction-target_context_ratio").send_keys("0.0005")
    browser.find_element(By.ID, "dry_run_session").send_keys(sid)
    browser.find_element(By.CSS_SELECTOR, "#policy-form button[type=submit]").click()
    decision = wait_text(browser, "#dry-decision", "already covered by the session's summary")
    assert "context_ratio" in decision
    rows = browser.find_element(By.ID, "dry-records").text
    assert source not in rows  # summarized already: not in the view the dry run sees
    assert "user_input" in rows and "keep" in rows  # the second question stays
    # The whole policy is on the page, each value with where it came from.
    assert browser.find_element(By.ID, "f-retention_rules-history")
    assert browser.find_element(By.ID, "f-hook_bindings").tag_name == "textarea"
    wait_text(browser, "#effective", "compaction.context_ratio 0.001 override")
    wait_text(browser, "#effective", "child_transfer_policy.max_background_refs 20 platform")
    shot(browser, "settings-dry-run")
    assert console_errors(browser) == []


@pytest.mark.spec("R15.4", "R18", "R3.3")
async def test_a_viewer_without_a_grant_is_refused_and_sees_nothing(
    browser: webdriver.Chrome, console: str, services: Services, db: asyncpg.Pool
) -> None:
    async with client(services) as c:
        session = await new_session(c)
    sid = session["session_id"]
    stranger = await services.new_key(TEST_SPACE, KeyKind.USER, f"viewer-{uuid.uuid4().hex[:6]}")
    sign_in(browser, console, stranger.key)
    assert sid not in browser.find_element(By.TAG_NAME, "main").text  # not even listed
    browser.get(f"{console}/inspector/sessions/{sid}")
    refusal = wait_text(browser, "#refusal", "not_granted")
    assert "Access refused" in browser.find_element(By.TAG_NAME, "h1").text
    assert "no grant" in refusal
    assert session["release_id"] not in browser.page_source
    shot(browser, "inspector-refused")
    # The same viewer with a grant reads the session (and only then).
    async with client(services) as c:
        await c.grant(sid, str(stranger.actor_id))
    browser.get(f"{console}/inspector/sessions/{sid}")
    wait_text(browser, "h1", f"Session {sid}")


def test_analytics_shows_its_placeholder(
    browser: webdriver.Chrome, console: str, services: Services
) -> None:
    browser.get_log("browser")  # drained: an earlier test's expected 403 is not this page's
    sign_in(browser, console, services.api_key, "/analytics")
    wait_text(browser, "h1", "Analytics")
    assert "analytics issue" in browser.find_element(By.ID, "analytics-placeholder").text
    assert console_errors(browser) == []


@pytest.mark.spec("R4.4", "R18")
async def test_the_inspector_shows_the_plan_and_the_constraints_a_call_saw_after_a_compaction(
    browser: webdriver.Chrome, console: str, services: Services, db: asyncpg.Pool
) -> None:
    async def frontier(c: Any, run: Any) -> None:
        await c.set_constraint(run, "Never push to main.", constraint_id="no-push")
        await c.update_plan(
            run,
            [
                {"id": "p1", "step": "read the summary", "status": "done"},
                {"id": "p2", "step": "answer question b", "status": "in_progress"},
            ],
            "plan:b",
        )

    async with client(services) as c:
        sid, call_id, _ = await summarized_call(c, db, before_call=frontier)
    diag = await prepare_get(services, f"/v1/diagnostics/{call_id}")
    kept = {b["block_id"]: b for b in diag["blocks"]}
    assert kept["plan:v1"]["retention"] == "required" and kept["plan:v1"]["decision"] == "kept"
    assert kept["constraints:v1"]["reason"] == "user_constraints_in_force"
    assert diag["frontier"]["plan"]["items"][1]["status"] == "in_progress"
    sign_in(browser, console, services.api_key)
    browser.get(f"{console}/inspector/sessions/{sid}/calls/{call_id}")
    wait_text(browser, "h1", call_id)
    plan = browser.find_element(By.ID, "plan").text
    assert "[done] read the summary" in plan and "[in_progress] answer question b" in plan
    constraints = browser.find_element(By.ID, "constraints").text
    assert "Never push to main." in constraints and "no-push v1" in constraints
    assert "plan:v1" in browser.find_element(By.ID, "blocks").text
    shot(browser, "inspector-frontier")
    assert console_errors(browser) == []
