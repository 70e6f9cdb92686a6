"""Running a sweep: `launch` (and `tune`) orchestration, the checks before anything starts
(preflight, dry run, GPU memory), the sweep lock, adaptive seeding, signals, the disk watch
and the closing summary. The only room that starts Ray."""
