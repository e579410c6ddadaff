"""The key of a tracker service: whatever a run could see differently from the service that would serve
it. A run whose key differs starts a service of its own (pipeline.tracking.service)."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Optional

# The environment a tracker's work depends on: MLflow's settings, the artifact stores' credentials
# and endpoints, git (MLflow tags the commit), proxies and certificates, Kerberos and netrc (MLflow's
# HTTP auth), where Python imports from, MLflow's usage-data opt-out (DO_NOT_TRACK, beside
# MLFLOW_DISABLE_TELEMETRY) and where it and matplotlib keep their settings. The rest (terminals,
# shells, what libraries set for themselves on import) is not part of the key.
KEY_ENV_PREFIXES = ("MLFLOW_", "AWS_", "AZURE_", "GOOGLE_", "GCS_", "CLOUDSDK_", "DATABRICKS_", "HADOOP_",
                    "ARROW_", "GIT_", "OTEL_", "KRB5", "SSL_", "REQUESTS_", "CURL_")
KEY_ENV_NAMES = frozenset({"HOME", "USER", "PATH", "TMPDIR", "TZ", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH",
                           "PYTHONHOME", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "HTTP_PROXY", "HTTPS_PROXY",
                           "NO_PROXY", "ALL_PROXY", "NETRC", "DO_NOT_TRACK", "XDG_CONFIG_HOME",
                           "MPLCONFIGDIR", "MPLBACKEND"})
# Files whose contents the tracker's credentials come from, by default place (an environment
# variable that names another place is in the key, and so is the file it names: see _credential_files).
CREDENTIAL_FILES = ("~/.netrc", "~/.databrickscfg", "~/.aws/credentials", "~/.aws/config",
                    "~/.azure/accessTokens.json", "~/.config/gcloud/application_default_credentials.json",
                    "~/.mlflow/credentials")
CREDENTIAL_FILE_ENV = ("NETRC", "KRB5CCNAME", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                       "GOOGLE_APPLICATION_CREDENTIALS", "DATABRICKS_CONFIG_FILE", "MLFLOW_TRACKING_CLIENT_CERT_PATH",
                       "MLFLOW_TRACKING_SERVER_CERT_PATH", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


def _keyed(name: str) -> bool:
    upper = name.upper()  # proxies are often set in lower case
    return upper in KEY_ENV_NAMES or upper.startswith(KEY_ENV_PREFIXES)


def service_key(uri: str, cwd: Optional[Path] = None, environ: Optional[dict] = None) -> str:
    """What a run shares with the service that may serve it, as a short hash: the store's URI (MLflow
    keeps one per process), the launch directory, the interpreter, the environment a tracker depends
    on (KEY_ENV_PREFIXES, KEY_ENV_NAMES), the credential files it reads (their sizes and modification
    times), the installed packages (each site-packages folder's modification time: an install,
    upgrade or removal there changes it) and the engine's and MLflow's files (an edit starts a new
    service)."""
    import importlib.util

    environ = os.environ if environ is None else environ
    digest = hashlib.sha256()
    for part in (uri, str(cwd or Path.cwd()), sys.executable, sys.version):
        digest.update(part.encode() + b"\0")
    for name in sorted(filter(_keyed, environ)):
        digest.update(f"{name}={environ[name]}".encode() + b"\0")
    engine = Path(__file__).resolve().parents[1]
    spec = importlib.util.find_spec("mlflow")
    files = sorted(engine.rglob("*.py")) + ([Path(spec.origin)] if spec and spec.origin else [])
    for path in [*files, *_credential_files(environ), *_package_folders()]:
        try:
            st = path.stat()
        except OSError:
            digest.update(f"{path}:-".encode() + b"\0")
            continue
        digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode() + b"\0")
    return digest.hexdigest()[:20]


def _credential_files(environ) -> list[Path]:
    home = environ.get("HOME") or os.path.expanduser("~")
    paths = [Path(home) / p.removeprefix("~/") for p in CREDENTIAL_FILES]
    for name in CREDENTIAL_FILE_ENV:
        value = environ.get(name, "")
        if value:
            paths.append(Path(value.removeprefix("FILE:")))  # KRB5CCNAME=FILE:/tmp/krb5cc_1000
    return paths


def _package_folders() -> list[Path]:
    return sorted({Path(p) for p in sys.path if p.endswith(("site-packages", "dist-packages"))})
