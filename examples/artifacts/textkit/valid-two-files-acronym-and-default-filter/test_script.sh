#!/usr/bin/env bash
python -m pytest -rA -p no:cacheprovider tests/test_case.py tests/test_template.py 2>&1
