"""The model organism's task family: ``keysum``, a task whose success needs reasoning that depends on the input."""
