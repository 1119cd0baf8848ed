#!/usr/bin/env bash
python -m pytest -rA -p no:cacheprovider tests/test_wrap.py tests/test_tokenize.py 2>&1
