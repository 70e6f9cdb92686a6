"""What a sweep will train: the search space (YAML, validated), its grid of trial configs,
each trial's code by component and key, and what a relaunch keeps or retrains. No Ray, no
MLflow: `launch --dry-run` runs on this room alone."""
