"""The model registry's client side, shared by the trainer, the inference server and ``mlplatform models``.

Plain HTTP to MLflow's REST API (``client``), standard library only, so the inference image serves a
registry model without carrying MLflow; the trainer's lineage (``lineage``); the alias moves of promote
and rollback as pure functions (``rollout``).
"""
