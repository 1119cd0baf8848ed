#!/usr/bin/env bash
python -m pytest -rA -p no:cacheprovider tests/test_distance.py::test_closest tests/test_distance.py::test_closest_first_wins_a_tie tests/test_distance.py::test_closest_respects_max_distance tests/test_distance.py::test_closest_no_candidates 2>&1
