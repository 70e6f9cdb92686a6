"""Everything that computes a trial's numbers: its config, data, models and the trainer.

A trial's key holds the code fingerprint of the components it runs (`components.py` names
them; fusion_sweep/codeprint.py hashes the code each can reach): an edit here that changes
code a trial runs (not a comment, docstring, message or formatting) is a new code version for
the trials that run it, so a sweep retrains those. Orchestration (Ray, MLflow, the CLI) and the
statistics live outside this folder because they cannot change a trial's result.
"""
