"""Training, the train stage:

- ``train``: the training loop, in the order it runs;
- ``optimization``: the tutorial's loss, learning-rate schedule, optimizer and weight
  averages, and one step;
- ``inputs``, ``distortions``: the input pipeline, and the distortions vectorised over a batch;
- ``checkpoints``: checkpoints and the resume policy;
- ``continuation``: pause at a deadline, continue elsewhere (a checkpoint mirror);
- ``distributed``: torchrun: ranks, relaunch, pause, collectives;
- ``monitoring``: the log line, DVCLive, TensorBoard, held-out points;
- ``live``: DVCLive's files, through DVCLive or (without dvclive) its plain stand-in;
- ``host_memory``: the memory a step frees stays mapped (no page faults).
"""
