"""The web console in headless Chromium against the real stack (issue 14; SPEC R17, R18,
R10.3, R15.4): edit an override and see the preview and a validation error; publish and
see the release; inspect a call of a summarized session and follow a source link to the
paged read-back; a viewer without a grant is refused."""

from __future__ import annotations

import asyncio
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

from schemas.auth import KeyKind
from services.sdk.client import ContextClient
from tests.browser.conftest import shot
from tests.support.flows import client, new_session
from tests.support.services import TEST_SPACE, Services

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


async def summarized_call(c: ContextClient, db: asyncpg.Pool) -> tuple[str, str, str]:
    """A session whose first question was summarized, and a model call made after it:
    (session_id, call_id, the id of a long covered tool result)."""
    session = await new_session(
        c, context_policy={"recent_complete_groups": 1, "compaction": {"user_turns": 2}}
    )
    first = await c.start_run(session)
    await c.append_user(first, "Question a?", "a-q")
    for i in range(2):
        await c.append_model_result(
            first, f"Looking at a{i}.", f"a{i}-m1", [(f"a{i}-c", "read_file", json.dumps({}))]
        )
        body = " ".join(f"row{j}={j * 7}" for j in range(600))  # > one read-back page
        await c.append_tool_outcome(first, f"a{i}-c", "read_file", body)
        await c.append_model_result(first, f"a{i} read.", f"a{i}-m2")
    await c.finish_run(first)
    run = await c.start_run(session)
    await c.append_user(run, "Question b?", "b-q")
    await c.prepare(run)  # the second question fires the user_turns trigger
    sid = session["session_id"]
    summary_id = None
    for _ in range(400):
        summary_id = await db.fetchval(
            "SELECT current_summary_id FROM compaction_state WHERE session_id=$1"
            " AND lineage='main'",
            sid,
        )
        if summary_id:
            break
        await asyncio.sleep(0.05)
    assert summary_id, "the first question was not summarized"
    prepared = await c.prepare(run)
    assert prepared["dependency_versions"]["summary_id"] == summary_id
    call = await c.check_model_call(run, prepared)
    covered = await db.fetchval(
        "SELECT covered_record_ids FROM summary_revisions WHERE summary_id=$1", summary_id
    )
    long_id = await db.fetchval(
        "SELECT record_id FROM records WHERE record_id = ANY($1) AND kind='tool_outcome'"
        " ORDER BY session_sequence LIMIT 1",
        list(covered),
    )
    return sid, call["call_id"], long_id


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
