"""Mutation machinery shared by bug injection and the repair baseline: operators (small edits of one function),
source text addressed by ast positions, and the per-test coverage map (`coverage`, helpers in `_cov/`)."""
