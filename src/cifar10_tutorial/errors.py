"""The exceptions the stages turn into a clear message and a non-zero exit: PipelineError,
and TrainingError, the kind raised once training has started."""


class PipelineError(Exception):
    """A problem the user can fix (bad params, bad input file, unreachable URL...).

    The message is shown as is, without a traceback, so it must say what was
    expected, what was found, and where.
    """


class TrainingError(PipelineError):
    """Training cannot go on (the loss diverged, a checkpoint is damaged...)."""
