"""`fusion-sweep ui`: the MLflow UI server of a store, and the proxy that keeps it on loopback."""
