"""User-facing training: configs, trainer, metrics and reports."""
