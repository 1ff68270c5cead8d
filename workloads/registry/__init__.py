"""The model registry's image: MLflow's tracking server and model registry, started by ``launch.py``."""
