"""Seeded, time-bounded fuzzing of the hostile-input surfaces (see :mod:`tests.fuzz.targets`)."""
