"""Thin command-line modules: parse flags, call the core, render with rich or --json."""
