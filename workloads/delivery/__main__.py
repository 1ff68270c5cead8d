"""The rollout as the cluster Job runs it: ``python -m workloads.delivery``, configured by ROLLOUT_*
variables (workloads/delivery/launch.py ``ENV``) and the registry client's MLFLOW_TRACKING_*."""

import sys

from workloads.delivery.launch import main

sys.exit(main())
