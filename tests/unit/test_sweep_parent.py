"""A sweep job's lookup of its parent MLflow run, through the file the sweep's callback writes."""

import logging
import threading

from pipeline.tracking import sweep as tr


def test_a_job_waits_for_the_parent_run_its_sweep_is_creating(tmp_path, caplog):
    """The sweep's parent file says the parent is on its way: a job's lookup waits for its id; a
    failed parent means no parent; a parent that never comes means no parent and a warning, not a hang."""
    uri = f"sqlite:///{tmp_path / 'never_opened.db'}"
    tr.write_parent_file(tmp_path, tr.PARENT_PENDING)
    threading.Timer(0.5, tr.write_parent_file, args=(tmp_path, "0123abcd")).start()
    assert tr.sweep_parent(uri, "1", str(tmp_path)) == "0123abcd"  # written by the timer: the lookup waited
    tr.write_parent_file(tmp_path, f"{tr.PARENT_FAILED} the store was locked")
    assert tr.sweep_parent(uri, "1", str(tmp_path)) is None
    tr.write_parent_file(tmp_path, tr.PARENT_PENDING)  # left by a sweep driver that died creating it
    with caplog.at_level(logging.WARNING, logger="pipeline.tracking.sweep"):
        assert tr.sweep_parent(uri, "1", str(tmp_path), wait_s=0.3) is None
    assert "was not created within 0.3 s" in caplog.text
    assert not (tmp_path / "never_opened.db").exists()  # the file answered: the store was not searched
