#!/usr/bin/env bash
python -m pytest -rA -v -p no:cacheprovider tests/test_distance.py 2>&1
