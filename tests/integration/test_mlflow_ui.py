"""The MLflow UI in a real browser (Debian's chromium driven by Playwright): what a newcomer sees after a
sweep, following the link its console ends with, as README.md and docs/mlflow.md promise.

One small sweep (two models x two seeds) runs through the CLI, with `tracking.ui_port` set to the port
`mlflow ui` then serves its store on (127.0.0.1). Each test starts from the link the sweep printed, in a
fresh browser context, and clicks through the pages as a user would, reading the page's text and DOM,
never the REST API. Facts about MLflow 3.17's UI these tests rely on:

* `#/experiments/<id>/runs?viewStateShareKey=<key>` opens the runs list with the view stored in the
  experiment's tag `mlflow.sharedViewState.<key>` (its columns and sort order); without it a fresh
  browser shows no metric column, and the landing page follows the sidebar's GenAI / Model training
  switch (`?workflowType=`, else localStorage `mlflow.workflowType`, else GenAI);
* the runs list is an ag-grid: a row's `row-id` is its run id and `row-index` its place, a cell's
  `col-id` names its column (`attributes.`Run Name``, `metrics.`val_roc_auc``, `params.`seed``); sorted
  by a metric, a sweep's jobs are listed flat beside their parent;
* the compare view's parallel-coordinates plot draws one axis per chosen param and metric
  (`.pcp-plot .axis-title`): the first three params by name that differ between the runs, against
  the first metric the first run logged;
* a run page lists its logged models under "Logged models (N)", a logged model's page its metrics
  and "Datasets used", and a run's files are in its Artifacts tab.

PIPELINE_SCREENSHOTS=docs/img also saves the pages it visits as PNGs there (docs/mlflow.md's images).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.conftest import ROOT, free_port, run_cli, stop_process_group

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SWEEP = ["-m", "model=lightgbm,xgboost", "seed=0,1", "data.max_rows=1500"]
PARENT = "sweep: lightgbm,xgboost × s=0,1"
JOBS = ["lightgbm s=0", "lightgbm s=1", "xgboost s=0", "xgboost s=1"]
METRIC = "val_roc_auc"
SWEPT = {"model", "seed"}
LINK = re.compile(
    r"^all runs, best first: (http://127\.0\.0\.1:\d+/#/experiments/\d+/runs\?viewStateShareKey=\w+)$", re.M)
WAIT_MS = 90_000  # a page's data arrives within this on a busy two-core machine

RUN_NAME = "[col-id='attributes.`Run Name`']"

expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """The sweep's store served by `mlflow ui` on 127.0.0.1, on the port the sweep was told
    (tracking.ui_port); yields the link the sweep's console ends with."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed: apt-get install chromium")
    work = tmp_path_factory.mktemp("mlflow-ui")
    port = free_port()
    proc = run_cli([*SWEEP, f"tracking.ui_port={port}"], work, check=True)
    assert proc.stdout.rstrip().splitlines()[-1].startswith("all runs, best first: "), proc.stdout[-2000:]
    link = LINK.findall(proc.stdout)[-1]
    base = f"http://127.0.0.1:{port}"
    assert link.startswith(base + "/")
    log = open(work / "ui.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{work / 'outputs' / 'mlflow.db'}"],
        cwd=work, env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        while True:  # until it answers, or exits (pytest-timeout bounds a server that hangs)
            if server.poll() is not None:
                raise RuntimeError((work / "ui.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(base + "/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.3)
        yield link
    finally:
        stop_process_group(server)
        log.close()


@pytest.fixture(scope="module")
def browser(ui):
    with sync_playwright() as p:
        # Playwright gives the browser a fresh profile of its own, and each test a fresh context.
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, ui):
    context = browser.new_context(viewport={"width": 1600, "height": 1000}, base_url=ui.split("/#/")[0])
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """Where the screenshots go: $PIPELINE_SCREENSHOTS (relative to the project), else scratch."""
    folder = os.environ.get("PIPELINE_SCREENSHOTS")
    path = ROOT / folder if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def close_assistant(page: Page) -> None:
    """MLflow 3.17 opens its Assistant panel beside every page; a user closes it to see the page."""
    close = page.locator("[data-component-id='mlflow.assistant.chat_panel.close']")
    if close.count():
        close.click()


def open_link(page: Page, link: str) -> None:
    """The link the sweep's console ended with, in this fresh browser context."""
    page.goto(link)
    expect(page.locator(f".ag-header-cell{RUN_NAME}")).to_have_text("Run Name")
    close_assistant(page)


def row_names(page: Page) -> list[str]:
    """The runs list's names, top to bottom as shown (ag-grid's DOM order is not its display order)."""
    names = page.locator(f".ag-pinned-left-cols-container .ag-row {RUN_NAME} a")
    expect(names).to_have_count(1 + len(JOBS))
    rows = page.locator(".ag-pinned-left-cols-container .ag-row")
    shown = sorted((int(rows.nth(i).get_attribute("row-index")),
                    rows.nth(i).locator(f"{RUN_NAME} a").inner_text()) for i in range(rows.count()))
    return [name.strip() for _, name in shown]


def visible_prefix(link) -> str:
    """The characters of a run name a user sees in its cell: those left of where the cell clips it."""
    return link.evaluate("""a => {
        const span = a.querySelector('span') || a;
        const text = span.firstChild;
        let right = span.getBoundingClientRect().right;
        for (let e = span; e && !e.classList.contains('ag-cell'); e = e.parentElement) {
            const style = getComputedStyle(e);
            if (style.overflow !== 'visible' || style.overflowX !== 'visible')
                right = Math.min(right, e.getBoundingClientRect().right);
        }
        const cell = span.closest('.ag-cell');
        if (cell) right = Math.min(right, cell.getBoundingClientRect().right);
        if (span.scrollWidth > span.clientWidth) right -= 12;  // the ellipsis takes the last few pixels
        const range = document.createRange();
        let n = 0;
        while (n < text.length) {
            range.setStart(text, 0); range.setEnd(text, n + 1);
            if (range.getBoundingClientRect().right > right + 0.5) break;
            n++;
        }
        return text.textContent.slice(0, n);
    }""")


def test_the_printed_link_opens_the_runs_sorted_by_the_main_metric(page, ui, shots):
    """A fresh browser, the link the sweep ended with: the training runs (not the GenAI overview),
    the main metric as a column, every run's value, best first; the swept params as columns too."""
    open_link(page, ui)
    expect(page).to_have_url(re.compile(r"#/experiments/\d+/runs\?"))
    expect(page.get_by_text("Detect Issues")).to_have_count(0)
    column = page.locator(f".ag-header-cell[col-id='metrics.`{METRIC}`']")
    expect(column).to_have_text(METRIC)
    for param in SWEPT:
        expect(page.locator(f".ag-header-cell[col-id='params.`{param}`']")).to_have_count(1)
    rows = page.locator(".ag-center-cols-container .ag-row")
    expect(rows).to_have_count(1 + len(JOBS))
    cell = f"[col-id='metrics.`{METRIC}`']"
    shown = sorted((int(rows.nth(i).get_attribute("row-index")), rows.nth(i).locator(cell).inner_text())
                   for i in range(rows.count()))
    values = [float(v) for _, v in shown]
    assert all(0.5 < v <= 1.0 for v in values), values
    assert values == sorted(values, reverse=True), f"{METRIC} is not sorted best first: {values}"
    page.screenshot(path=str(shots / "mlflow_ui_runs.png"))


def test_the_jobs_names_tell_them_apart_where_the_list_cuts_them(page, ui):
    """What each name cell shows at MLflow's default column width (about 18 characters) differs from job
    to job, and is the swept values: the model kind and the seed."""
    open_link(page, ui)
    names = row_names(page)
    assert PARENT in names, f"no run named {PARENT!r} in the runs list: {names}"
    assert sorted(n for n in names if n != PARENT) == sorted(JOBS), names
    links = page.locator(f".ag-pinned-left-cols-container .ag-row {RUN_NAME} a")
    seen = {}
    for i in range(links.count()):
        name = links.nth(i).inner_text().strip()
        if name != PARENT:
            seen[name] = visible_prefix(links.nth(i))
    assert len(set(seen.values())) == len(JOBS), f"the runs list shows {seen}: jobs that read the same"
    assert all(seen[n] == n for n in JOBS), f"the runs list cuts the swept values: {seen}"


def test_comparing_the_jobs_plots_a_swept_param_against_the_main_metric(page, ui, shots):
    open_link(page, ui)
    rows = page.locator(".ag-pinned-left-cols-container .ag-row")
    expect(rows).to_have_count(1 + len(JOBS))
    for i in range(rows.count()):
        if rows.nth(i).locator(f"{RUN_NAME} a").inner_text().strip() in JOBS:
            rows.nth(i).locator("input.ag-checkbox-input").check()
    page.get_by_test_id("runs-compare-button").click()
    expect(page.get_by_text(f"Comparing {len(JOBS)} Runs")).to_be_visible()
    axes = page.locator(".pcp-plot .parcoords .y-axis .axis-heading .axis-title")
    expect(axes.first).to_be_visible()
    close_assistant(page)
    plotted = axes.all_text_contents()
    page.screenshot(path=str(shots / "mlflow_ui_compare.png"))
    # MLflow plots the first three params (by name) that differ between the runs, against the first
    # metric the first run logged: the optimised metric, and the swept model kind
    assert METRIC in plotted, f"the parallel-coordinates plot draws {plotted}, not the metric {METRIC}"
    assert SWEPT & set(plotted), f"the parallel-coordinates plot draws {plotted}: no swept param {SWEPT}"
    plumbing = [a for a in plotted if a in ("allowed_targets", "data.label")
                or a.endswith((".device", "_target_")) or "early_stopping" in a]
    assert not plumbing, f"the parallel-coordinates plot draws {plotted}: {plumbing} are not what a sweep varies"


def test_a_logged_model_shows_its_own_scores_and_data(page, ui, shots):
    """A job's logged model lists its own scores (not the run's or the ensemble's), each with the split
    it was measured on, and the data it was trained on under "Datasets used"."""
    open_link(page, ui)
    page.locator(f".ag-pinned-left-cols-container {RUN_NAME} a", has_text=JOBS[2]).click()
    expect(page.get_by_role("heading", name=JOBS[2])).to_be_visible()
    close_assistant(page)
    logged = page.locator("h4", has_text=re.compile(r"^Logged models \([1-9]\d*\)$"))
    model_link = logged.locator("xpath=ancestor::*[.//*[@role='row']][1]").locator(
        "a[href*='/models/m-']:not([target])", has_text="xgboost")
    expect(model_link).to_have_count(1)
    model_link.click()
    expect(page.get_by_role("heading", name="xgboost")).to_be_visible()
    close_assistant(page)
    metrics = page.locator("h4, h3, h2", has_text=re.compile(r"^Metrics \(\d+\)$"))
    expect(metrics).to_be_visible()
    table = metrics.locator("xpath=ancestor::*[.//*[@role='row']][1]")
    names = table.locator("[role='row'] [role='cell']:first-child")
    # the table fills as its rows load: wait for the score, then read every name
    expect(names.filter(has_text=re.compile(r"^\s*xgboost/val_roc_auc\s*$"))).to_have_count(1)
    listed = [n.strip() for n in names.all_inner_texts()]
    assert all(n.startswith("xgboost/") for n in listed), f"the xgboost model lists others' scores: {listed}"
    expect(page.get_by_text("Datasets used")).to_be_visible()
    used = page.get_by_text("Datasets used").locator("xpath=following::*[contains(., 'adult')][1]")
    expect(used).to_be_visible()
    page.screenshot(path=str(shots / "mlflow_ui_model.png"))


def test_a_job_page_lists_its_artifacts_and_logged_models(page, ui, shots):
    open_link(page, ui)
    name = JOBS[0]
    page.locator(f".ag-pinned-left-cols-container {RUN_NAME} a", has_text=name).click()
    expect(page.get_by_role("heading", name=name)).to_be_visible()
    close_assistant(page)
    # its Source is the command the user typed, not the process that logged it
    expect(page.get_by_text(" ".join(["python -m pipeline", *SWEEP]), exact=False).first).to_be_visible()
    models = page.locator("h4", has_text=re.compile(r"^Logged models \([1-9]\d*\)$"))
    expect(models).to_be_visible()
    section = models.locator("xpath=ancestor::*[.//*[@role='row']][1]")
    model_links = section.locator("a[href*='/models/m-']")
    expect(model_links.first).to_be_visible()
    assert set(model_links.all_inner_texts()) <= {"lightgbm", "xgboost"}, model_links.all_inner_texts()
    page.get_by_role("tab", name="Artifacts").click()
    for artifact in ["config.yaml", "plan.json", "leaderboard.csv", "timeline.json", "timeline.png",
                     "learning_curves.png", "feature_importance.png"]:
        expect(page.get_by_text(artifact, exact=True)).to_be_visible()
    page.get_by_text("timeline.png", exact=True).click()
    expect(page.get_by_role("img", name="timeline.png")).to_be_visible()
    page.screenshot(path=str(shots / "mlflow_ui_run.png"))
