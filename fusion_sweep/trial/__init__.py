"""Everything that computes a trial's numbers: its config, data, models and the trainer.

This folder is the scope of the code fingerprint (:func:`fusion_sweep.schema.code_fingerprint`):
an edit here that changes the code (not a comment, docstring or formatting) is a new code
version, so a sweep re-trains its trials. Orchestration (Ray, MLflow, the CLI) and the
statistics live outside it because they cannot change a trial's result.
"""
