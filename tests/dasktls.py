"""A Dask cluster's TLS files for tests that start a scheduler root gives by address:
faultlab's labeler refuses a plain-TCP scheduler of this host (any local user's client
would run code on it as root), so the tests' schedulers speak TLS with these."""

from __future__ import annotations

import os
from pathlib import Path

from distributed.security import Security


def tls_files(folder: Path) -> dict:
    """Write a fresh authority's certificate and key (one self-signed pair, as
    ``Security.temporary()`` makes) into ``folder``, 0600; returns ``{"cli": [the
    ``--tls-*`` flags of ``dask scheduler`` and ``dask worker``], "env": {dask's client
    settings as environment variables}, "config": {the same as dask config keys},
    "security": a Security with them}."""
    folder.mkdir(parents=True, exist_ok=True)
    sec = Security.temporary()
    cert, key = folder / "dask.crt", folder / "dask.key"
    for path, text in ((cert, sec.tls_ca_file), (key, sec.tls_client_key)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    config = {"distributed.comm.tls.ca-file": str(cert), "distributed.comm.tls.client.cert": str(cert),
              "distributed.comm.tls.client.key": str(key)}
    env = {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(cert), "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(cert),
           "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(key)}
    security = Security(tls_ca_file=str(cert), tls_client_cert=str(cert), tls_client_key=str(key), tls_scheduler_cert=str(cert),
                        tls_scheduler_key=str(key), tls_worker_cert=str(cert), tls_worker_key=str(key), require_encryption=True)
    return {"cli": ["--tls-ca-file", str(cert), "--tls-cert", str(cert), "--tls-key", str(key)], "env": env, "config": config,
            "security": security}
