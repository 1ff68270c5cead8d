"""The model registry server's image: MLflow's tracking server and model registry, started by
``launch.py`` (the image copies it and ``sitecustomize.py`` alone, workloads/registry/server/Dockerfile)."""
