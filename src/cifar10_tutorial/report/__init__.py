"""The results:

- ``report``: the report (reports/report.md), a function a section, with its sections
  ``schedules`` (the reproduction, time to accuracy), ``multi_device`` (exercise 5),
  ``against_reference`` (the tutorial's own code on the same data), ``reference`` (the
  tutorial's published figures) and ``yours`` (a section for each variant of no exercise);
- ``results``: what the sections share: the variants' results loaded, tables, plots;
- ``equivalence``: the record of commits checked to train alike.
"""
