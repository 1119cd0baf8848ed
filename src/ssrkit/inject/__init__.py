"""Bug injection (SPEC §4): the procedural injector (`procedural.inject`), its operators and test mapping."""
