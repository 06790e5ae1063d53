"""Measurement tools (engine bench, load tester). Nothing imports bench/ except gateway/cli.py, lazily."""
