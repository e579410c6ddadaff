"""The MLflow UI in a real browser (Debian's chromium driven by Playwright): what a user sees after a
sweep, when they compare its runs in the UI as README.md and docs/mlflow.md promise.

One small sweep (two models x two seeds) runs through the CLI; `mlflow ui` serves its store on
127.0.0.1. Each test clicks through the pages as a user would and reads the page's text and DOM,
never the REST API. Facts about MLflow 3.17's UI these tests rely on:

* the landing page of an experiment comes from the sidebar's GenAI / Model training switch
  (`?workflowType=` in the URL, else the browser's localStorage `mlflow.workflowType`, else GenAI);
* the runs list is an ag-grid: a row's `row-id` is its run id, a cell's `col-id` names its column
  (`attributes.`Run Name``, `metrics.`val_roc_auc``); a sweep's children sit under their parent,
  collapsed until its expand button is pressed;
* the compare view's parallel-coordinates plot draws one axis per chosen param and metric
  (`.pcp-plot .axis-title`);
* a run page lists its logged models under "Logged models (N)" and its files in the Artifacts tab.

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
PARENT = "sweep: model=lightgbm,xgboost × seed=0,1"
JOBS = ["model=lightgbm seed=0", "model=lightgbm seed=1", "model=xgboost seed=0", "model=xgboost seed=1"]
METRIC = "val_roc_auc"
WAIT_MS = 90_000  # a page's data arrives within this on a busy two-core machine

RUN_NAME = "[col-id='attributes.`Run Name`']"
EXPAND = "button[data-component-id$='runnamecellrenderer.tsx_46']"  # a parent run's expand / collapse

expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """The sweep's store served by `mlflow ui` on 127.0.0.1; yields its base URL."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed: apt-get install chromium")
    work = tmp_path_factory.mktemp("mlflow-ui")
    run_cli(SWEEP, work, check=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
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
        yield base
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
    context = browser.new_context(viewport={"width": 1600, "height": 1000}, base_url=ui)
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


def open_experiment_from_home(page: Page, training_mode: bool) -> None:
    """The UI's root, optionally the sidebar's 'Model training' switch, then the experiment's link."""
    page.goto("/")
    if training_mode:
        page.get_by_text("Model training", exact=True).click()
    page.get_by_role("link", name="pipeline", exact=True).click()


def open_runs(page: Page) -> None:
    """The experiment's runs list, reached as a user does, with the sweep's parent expanded."""
    open_experiment_from_home(page, training_mode=True)
    parent = page.locator(f".ag-pinned-left-cols-container .ag-row {RUN_NAME}").filter(has=page.locator(EXPAND))
    expect(parent).to_have_count(1)
    parent.locator(EXPAND).click()
    expect(page.locator(f".ag-pinned-left-cols-container .ag-row {RUN_NAME} a")).to_have_count(1 + len(JOBS))
    close_assistant(page)


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


def test_the_experiments_link_opens_on_its_training_runs(page):
    """The experiment's link as docs/mlflow.md gives it. (Clicked from the experiment list, MLflow 3.17
    opens the GenAI overview until the sidebar's Model training switch is chosen once: its landing page
    follows that switch, not the experiment's mlflow.experimentKind tag, which the engine sets too.)"""
    page.goto("/")
    page.get_by_role("link", name="pipeline", exact=True).first.wait_for()
    experiment = page.get_by_role("link", name="pipeline", exact=True).first.get_attribute("href")
    experiment_id = re.search(r"experiments/(\d+)", experiment).group(1)
    page.goto(f"/#/experiments/{experiment_id}/runs?workflowType=machine_learning")
    expect(page.locator(f".ag-header-cell{RUN_NAME}")).to_have_text("Run Name")
    expect(page.get_by_text("Detect Issues")).to_have_count(0)


def test_the_experiment_opens_on_its_runs_in_model_training_mode(page, shots):
    open_runs(page)
    expect(page).to_have_url(re.compile(r"#/experiments/\d+/runs\?"))
    expect(page.locator(f".ag-header-cell{RUN_NAME}")).to_have_text("Run Name")
    expect(page.get_by_text("Detect Issues")).to_have_count(0)
    page.screenshot(path=str(shots / "mlflow_ui_runs.png"))


def test_the_jobs_are_named_by_their_swept_values_in_the_runs_list(page):
    open_runs(page)
    links = page.locator(f".ag-pinned-left-cols-container .ag-row {RUN_NAME} a")
    names = [n.strip() for n in links.all_inner_texts()]
    assert PARENT in names, f"no run named {PARENT!r} in the runs list: {names}"
    children = [n for n in names if n != PARENT]
    for job in JOBS:
        assert any(n == job or n.startswith(job + " ") for n in children), (
            f"no run in the runs list is named by its swept values {job!r} (first): {children}"
        )
    # What the cell shows before any resizing: the name's start, which must be the first swept value.
    for i in range(links.count()):
        name, seen = names[i], visible_prefix(links.nth(i))
        if name == PARENT:
            continue
        first = name.split(" ")[0]  # model=xgboost
        # At MLflow's default column width the cell clips the name after about 11 characters
        # ('model=xgboo…'): the key and the start of the value it swept must be what shows.
        assert seen.startswith(first) or (first.startswith(seen) and len(seen) > first.index("=") + 1), (
            f"the runs list shows {seen!r}… of {name!r}; the swept value {first!r} should lead"
        )


def test_the_main_metric_is_a_top_level_metric_the_runs_list_sorts_by(page):
    """Every run logs the main metric at the top level (val_roc_auc, not only per model): sorting the
    list by it, one pick in the Sort menu, shows it as a column with every run's value, the parent's
    too. (MLflow 3.17 shows no metric column before a user picks one: its default columns are Source,
    Models and Dataset, and the columns chosen live in the browser.)"""
    open_runs(page)
    page.get_by_role("button", name="Sort").first.click()
    page.get_by_placeholder("Search").fill(METRIC)
    page.get_by_text(METRIC, exact=True).first.click()
    column = page.locator(f".ag-header-cell[col-id='metrics.`{METRIC}`']")
    expect(column).to_have_text(METRIC)
    column.scroll_into_view_if_needed()
    values = page.locator(f".ag-center-cols-container .ag-row [col-id='metrics.`{METRIC}`']")
    expect(values).to_have_count(1 + len(JOBS))
    for value in values.all_inner_texts():
        assert 0.5 < float(value) <= 1.0, f"{METRIC} shows {value!r}"


def test_comparing_the_jobs_plots_a_swept_param_against_the_main_metric(page, shots):
    open_runs(page)
    rows = page.locator(".ag-pinned-left-cols-container .ag-row").filter(
        has=page.locator(f"{RUN_NAME} a")).filter(has_not=page.locator(EXPAND))
    expect(rows).to_have_count(len(JOBS))
    for i in range(len(JOBS)):
        rows.nth(i).locator("input.ag-checkbox-input").check()
    page.get_by_test_id("runs-compare-button").click()
    expect(page.get_by_text(f"Comparing {len(JOBS)} Runs")).to_be_visible()
    axes = page.locator(".pcp-plot .parcoords .y-axis .axis-heading .axis-title")
    expect(axes.first).to_be_visible()
    close_assistant(page)
    plotted = axes.all_text_contents()
    page.screenshot(path=str(shots / "mlflow_ui_compare.png"))
    assert METRIC in plotted, f"the parallel-coordinates plot draws {plotted}, not the metric {METRIC}"
    # MLflow plots the first three params (by name) whose values differ across the runs: the swept
    # model kind leads; the library parameters that follow differ because each kind has its own
    assert plotted[0] == "model", f"the parallel-coordinates plot draws {plotted}: the swept model kind should lead"
    plumbing = [a for a in plotted if a == "allowed_targets" or "_target_" in a]
    assert not plumbing, f"the parallel-coordinates plot draws {plotted}: {plumbing} are not what a sweep varies"


def test_a_job_page_lists_its_artifacts_and_logged_models(page, shots):
    open_runs(page)
    child = page.locator(".ag-pinned-left-cols-container .ag-row").filter(
        has=page.locator(f"{RUN_NAME} a")).filter(has_not=page.locator(EXPAND)).first
    name = child.locator(f"{RUN_NAME} a").inner_text().strip()
    child.locator(f"{RUN_NAME} a").click()
    expect(page.get_by_role("heading", name=name)).to_be_visible()
    close_assistant(page)
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
