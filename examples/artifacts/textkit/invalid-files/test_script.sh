#!/usr/bin/env bash
python -m pytest -rA -p no:cacheprovider tests/test_slug.py tests/test_case.py 2>&1
