"""Loaded by every Python process of the registry image (``site`` imports ``sitecustomize`` from the
path, /app here): the MLflow server's workers read the database password at each new connection."""

import os

from launch import install_password_refresh  # type: ignore[import-not-found]  # /app/launch.py in the image

install_password_refresh(os.environ)
