"""Training: the loop (train), the update rules and weight averages (rules), the input
pipeline and its distortions (inputs, distortions), checkpoints and resume (checkpoints),
pauses and mirrors (continuation), devices and torchrun (devices), logs (monitoring)."""
