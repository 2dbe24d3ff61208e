"""The smoke suite run as a program (python -m smoke) over mimic module trees, in subprocesses."""
