#!/usr/bin/env bash
python -m unittest -v tests.test_journal 2>&1
