"""The ``trainer`` command line: one module per verb."""
