"""Training, the train stage:

- ``train``: the training loop, in the order it runs;
- ``optimization``: the tutorial's loss, learning-rate schedule, optimizer and weight
  averages, and one step;
- ``inputs``, ``distortions``: the input pipeline, and the distortions vectorised over a batch;
- ``paths``: where a run writes (the train stage's folders, a variant's, a queued
  experiment's), and what it may replace there;
- ``checkpoints``: the resume policy: which checkpoint a run continues from;
- ``deadline``, ``mirror``, ``segments``: pause at a deadline, continue elsewhere from a
  checkpoint mirror, and the record of the segments a run was trained in;
- ``distributed``: torchrun: ranks, relaunch, pause, collectives;
- ``monitoring``: the log line, DVCLive, TensorBoard, held-out points;
- ``live``: DVCLive's files, through DVCLive or (without dvclive) its plain stand-in;
- ``host_memory``: the memory a step frees stays mapped (no page faults).
"""
