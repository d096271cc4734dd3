"""Capture intake (AW-02): collectors post captured evidence, get a durable receipt,
and a job for the capture worker is enqueued on the jobs topic."""
