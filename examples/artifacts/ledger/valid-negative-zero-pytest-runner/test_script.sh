#!/usr/bin/env bash
python -m pytest -rA -p no:cacheprovider tests/test_money.py 2>&1
