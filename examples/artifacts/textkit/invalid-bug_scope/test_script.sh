#!/usr/bin/env bash
python -m pytest -rA -p no:cacheprovider tests/test_tokenize.py tests/test_wrap.py 2>&1
