"""Reading the config into settings needs neither numpy nor pandas (`--help` and dry_run stay fast)."""

import subprocess
import sys

MODULES = ("pipeline.config", "pipeline.settings", "pipeline.data_sources", "pipeline.searchers", "pipeline.hpo",
           "pipeline.store", "pipeline.hardware", "pipeline.predict",
           "hydra_plugins.pipeline_optuna_sweeper.config", "hydra_plugins.pipeline_optuna_sweeper._settings")


def test_settings_modules_import_no_numpy_or_pandas():
    code = (f"import sys\nfor m in {MODULES!r}: __import__(m)\n"
            "print(','.join(m for m in ('numpy', 'pandas', 'torch', 'sklearn', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
