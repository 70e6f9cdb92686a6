"""Ray and Ray Tune: starting or joining Ray, version quirks, the trainable that runs one trial
on a worker, placement, progress, and how a failed trial is classified."""
