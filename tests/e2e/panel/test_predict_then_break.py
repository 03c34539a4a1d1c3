"""Predict, then break, in headless Chromium: a learner predicts that a crash between commit and
acknowledgement doubles the reservation, runs the lab from the panel, and reads the auditor's
answer (neither) beside the prediction; the instructor's page lists the run."""

from __future__ import annotations

from collections.abc import Callable

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.e2e.panel.conftest import PanelSystem
from tests.support.browser import SCREENSHOTS, texts_of


def _wait(driver: WebDriver, what: str, condition: Callable[[WebDriver], bool], timeout: float = 120) -> None:
    WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition, message=f"waiting for {what}")


def test_a_learner_predicts_runs_a_lab_and_reads_the_auditors_answer_beside_it(
    clean: PanelSystem, browser: WebDriver
) -> None:
    browser.get(f"{clean.url}/labs")
    row = browser.find_element(By.ID, "lab-crash-after-commit")
    row.find_element(By.CSS_SELECTOR, "input[value='doubled']").click()
    row.find_element(By.XPATH, ".//button[text()='Run it']").click()
    _wait(browser, "the lab to start", lambda d: bool(d.find_elements(By.ID, "notice-lab-run")), 30)
    refused = clean.panel.post("/api/labs/run", json={"lab": "relay-crash", "prediction": "neither"})
    assert refused.status_code == 409 and "is running" in refused.json()["message"]
    browser.find_element(By.ID, "notice-lab-run").click()

    _wait(browser, "the auditor's answer", lambda d: "neither" in " ".join(texts_of(d, "#auditor-answer")))
    assert "wrong" in (browser.find_element(By.ID, "auditor-answer").get_attribute("class") or "")
    page = " ".join(texts_of(browser, "#lab-run"))
    assert "You predicted doubled" in page.replace("\n", " ") and "Not what you said" in page, page
    assert "PASSED" in page, page
    browser.save_screenshot(str(SCREENSHOTS / "predict-then-break.png"))

    browser.find_element(By.ID, "lab-order").click()
    _wait(browser, "the lab's order proven", lambda d: len(texts_of(d, "section.proof.once")) == 4, 60)

    browser.get(f"{clean.url}/labs/runs")
    [run] = [r for r in texts_of(browser, "table.lab-runs tr") if "crash-after-commit" in r]
    assert "doubled" in run and "neither" in run and "✖ wrong" in run and "held" in run, run
    answers = clean.panel.get("/api/labs/runs").json()["runs"]
    assert [(r["lab"], r["prediction"], r["answer"], r["passed"]) for r in answers][-1] == (
        "crash-after-commit",
        "doubled",
        "neither",
        True,
    )
