"""Analyses that use the metrics: distributions of stories (MAUVE per system), diagnostics of
model prose, curves along long stories, robustness tests of metrics, classifier-based
evaluation of style transfer, and the entity evaluation tasks.

Each module imports what it needs when it is used; importing this package loads none of them.
"""
