"""Loaded by every Python process of the registry image (``site`` imports ``sitecustomize`` from the
path, /app here): the MLflow server's workers read the database password at each new connection, and
with TLS on refuse anything older than TLS 1.3."""

import os

from launch import install_password_refresh, install_tls13_floor  # type: ignore[import-not-found]  # /app

install_password_refresh(os.environ)
install_tls13_floor(os.environ)
