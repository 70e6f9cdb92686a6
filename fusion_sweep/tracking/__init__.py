"""MLflow: the runs of a sweep and its trials (the resume rule), the store and its URIs, the
checkout's commit, the list of sweeps and the saved trials view of the MLflow UI."""
